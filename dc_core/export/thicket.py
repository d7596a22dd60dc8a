"""Ensemble export for LLNL Thicket: one window's ranks as one Thicket.

A file holds, for one run and one step window, every rank's profile as a
Hatchet literal (exactly what ``--format hatchet`` writes for that rank, see
`hatchet`) with that rank's metadata beside it::

    {"format": "deepcontext-thicket", "version": 1, "run": "...", "steps": [5, 8],
     "metric": "cpu_time_ns",
     "profiles": [{"name": "<run>/<rank>-<host>/steps-5-7",
                   "metadata": {"run": ..., "rank": 0, "host": ..., ...},
                   "graph": [<Hatchet literal>]}, ...]}

`load` reads it into a ``thicket.Thicket``: one profile per rank, the call
tree the union of the ranks' trees, the per-rank metrics in
``tk.dataframe`` (indexed by node and profile) and a row per rank in
``tk.metadata``. Without DeepContext installed, Thicket's own API does the
same in three lines (this is what `load` runs; a test runs this recipe)::

    gfs = [(hatchet.GraphFrame.from_literal(p["graph"]), p) for p in json.load(open(path))["profiles"]]
    for gf, p in gfs: gf.metadata = p["metadata"]  # assign, never update: Hatchet shares one default dict
    tk = thicket.Thicket.concat_thickets([thicket.Thicket.thicketize_graphframe(gf, p["name"]) for gf, p in gfs])

Then e.g. ``thicket.stats.mean(tk, columns=["time"])`` fills
``tk.statsframe.dataframe["time_mean"]``, and ``tk.replace_profile_index("rank")``
indexes the data by rank instead of Thicket's profile hash.

A node that some rank never reached has NaN (not 0) in that rank's rows:
Thicket's convention for the union of trees, which its statistics skip (the
mean of such a node is over the ranks that ran it); ``tk.dataframe.fillna(0)``
counts it as zero instead.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..model.kinds import UNITS
from ..store.profile import Profile
from . import hatchet
from .nested import dumps

#: The ``format`` field of the file; `load` refuses anything else.
FORMAT = "deepcontext-thicket"
#: The file's layout version; `load` refuses newer ones.
VERSION = 1


class ThicketFileError(ValueError):
    """A file `load` cannot read: not this format, a newer version, or malformed."""


def profile_name(profile: Profile) -> str:
    """The profile's name in the Thicket (hashed into its profile index): the
    logdir layout's ``<run>/<rank>-<host>/steps-<first>-<last>``, unique per
    file even where two hosts claim the same rank."""
    first, end = profile.steps
    return f"{profile.run}/{profile.rank}-{profile.host}/steps-{first}-{max(first, end - 1)}"


def metadata(profile: Profile, metric: str) -> dict[str, Any]:
    """One row of ``Thicket.metadata``: flat scalars only, so that Thicket's
    ``groupby``, ``filter_metadata`` and pandas can use every column."""
    first, end = profile.steps
    return {
        "run": profile.run,
        "rank": profile.rank,
        "host": profile.host,
        "framework": profile.framework,
        "mode": profile.mode,
        "world_size": profile.world_size,
        "steps": f"{first}-{max(first, end - 1)}",
        "first_step": first,
        "last_step": max(first, end - 1),
        "metric": metric,  # which metric the "time" columns hold
        "unit": UNITS.get(metric, "1"),
    }


def export(profile: Profile, metric: str = "cpu_time_ns") -> bytes:
    """One profile as a Thicket file of one profile (`export_window` of ``[profile]``)."""
    return export_window([profile], metric)


def export_window(profiles: Sequence[Profile], metric: str = "cpu_time_ns") -> bytes:
    """The ranks of one window as one Thicket file.

    Args:
        profiles: The ranks' profiles, all of one run and one window (the CLI
            groups them); written in rank order.
        metric: The metric copied into each literal's ``time`` / ``time (inc)``
            columns; zeros on a rank that lacks it.

    Returns:
        UTF-8 JSON (see the module docstring).

    Raises:
        ValueError: no profile, or profiles of different runs or windows.
    """
    if not profiles:
        raise ValueError("a Thicket file needs at least one profile")
    windows = {(p.run, tuple(p.steps)) for p in profiles}
    if len(windows) > 1:
        raise ValueError(f"a Thicket file holds one run's window, got {sorted(windows)}")
    first = profiles[0]
    head = {
        "format": FORMAT,
        "version": VERSION,
        "run": first.run,
        "steps": list(first.steps),
        "metric": metric,
    }
    # Each literal is spliced in as the bytes `hatchet.export` wrote: it is
    # already JSON, and decoding it to re-encode would recurse once per level.
    parts = [dumps(head)[:-1].encode(), b', "profiles": [']
    for index, profile in enumerate(sorted(profiles, key=lambda p: (p.rank, p.host))):
        entry = dumps({"name": profile_name(profile), "metadata": metadata(profile, metric)})
        parts += [
            b", " if index else b"",
            entry[:-1].encode(),
            b', "graph": ',
            hatchet.export(profile, metric),
            b"}",
        ]
    parts.append(b"]}")
    return b"".join(parts)


def read(path: str | Path) -> dict[str, Any]:
    """The file's document, checked: `FORMAT`, a known version, a list of profiles.

    Raises:
        ThicketFileError: naming the file and what is wrong with it.
        OSError: the file cannot be read.
    """
    try:
        doc = json.loads(Path(path).read_bytes())
    except ValueError as exc:
        raise ThicketFileError(f"{path}: not JSON: {exc}") from None
    except RecursionError:  # Python's JSON reader recurses per level (and so does Hatchet's)
        raise ThicketFileError(f"{path}: a call tree too deep for Python's JSON reader") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ThicketFileError(f'{path}: not a DeepContext Thicket file (no "format": {FORMAT!r})')
    version = doc.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise ThicketFileError(
            f"{path}: version {version!r} is newer than this reader's {VERSION}; "
            "upgrade DeepContext"
        )
    profiles = doc.get("profiles")
    if (
        not isinstance(profiles, list)
        or not profiles
        or not all(
            isinstance(p, dict)
            and isinstance(p.get("graph"), list)
            and isinstance(p.get("metadata"), dict)
            and isinstance(p.get("name"), str)
            for p in profiles
        )
    ):
        raise ThicketFileError(
            f'{path}: "profiles" must be a non-empty list of {{name, metadata, graph}}'
        )
    return doc


def load(path: str | Path, progress: bool = False) -> Any:
    """Read a file written by `export_window` into one ``thicket.Thicket``.

    Args:
        path: A ``.thicket.json`` file from ``deepcontext export --format thicket``.
        progress: Show Thicket's progress bars (off: they go to stderr).

    Returns:
        A ``thicket.Thicket`` with one profile per rank, the union tree, and
        ``metadata`` holding each rank's `metadata` row.

    Raises:
        ImportError: LLNL Thicket is not installed (``pip install llnl-thicket``).
        ThicketFileError: the file is not a readable Thicket export.
    """
    try:
        import hatchet as ht
        import thicket as th
    except ImportError as exc:
        raise ImportError(
            f"loading a Thicket export needs LLNL Thicket: pip install llnl-thicket ({exc})",
            name=exc.name,
        ) from exc
    doc = read(path)
    thickets = []
    for entry in doc["profiles"]:
        gf = ht.GraphFrame.from_literal(entry["graph"])
        # Assigned, not updated: GraphFrame's default metadata is one dict
        # shared by every GraphFrame, so an update would leak across ranks.
        gf.metadata = dict(entry["metadata"])
        thickets.append(th.Thicket.thicketize_graphframe(gf, entry["name"]))
    return th.Thicket.concat_thickets(thickets, disable_tqdm=not progress)
