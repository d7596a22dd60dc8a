"""``deepcontext export LOGDIR --format F --out DIR``: profiles in other tools' formats."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..export import FORMATS, PER_WINDOW, SUFFIX, exporter, window_exporter
from ..store.logdir import ProfileFile
from ..store.profile import Profile
from .common import CliError, add_read_options, fail, list_logdir, read_files
from .present import METRIC_PREFERENCE, default_metric


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "export", help="write profiles as Chrome trace, speedscope, pprof, Hatchet or Thicket JSON"
    )
    p.add_argument(
        "logdir",
        help="directory holding DeepContext profiles (searched recursively); "
        "every profile found is exported to its own file (thicket: every run's window, all its "
        "ranks together, to one file)",
    )
    p.add_argument(
        "--format",
        choices=FORMATS,
        required=True,
        help="chrome (chrome://tracing, Perfetto), speedscope, pprof (go tool pprof), hatchet "
        "(GraphFrame.from_literal) or thicket (one Hatchet literal per rank plus its metadata; "
        "dc_core.export.thicket.load(path) gives a thicket.Thicket)",
    )
    p.add_argument("--out", required=True, help="directory for the exported files")
    p.add_argument(
        "--metric",
        default=None,
        help="metric drawn as the flame chart's widths (chrome, speedscope), the default sample "
        "type (pprof) or Hatchet's and Thicket's default 'time' column: cpu_time_ns, "
        "device_time_ns, count, samples, alloc_bytes (default: the profile's main one, device "
        "time where there is any, else CPU time; thicket: one for all ranks of a window)",
    )
    p.add_argument(
        "--rank",
        type=int,
        default=None,
        metavar="N",
        help="export only rank N's profiles (default: every rank's)",
    )
    add_read_options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Export every readable profile. Unreadable files are named and skipped
    (as ``report`` does); a profile that cannot be exported is named and
    skipped too, and makes the exit status 1; the others are still written."""
    try:
        files, limit = list_logdir(args.logdir, args.rank, max_bytes=args.max_bytes)
    except CliError as exc:
        return fail(str(exc))
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return fail(f"cannot create --out {args.out!r}: {exc.strerror}")
    skipped: list[str] = []
    # Read a window (per-window formats) or a file at a time: memory holds one export, not the logdir.
    groups: dict[tuple, list[ProfileFile]] = {}
    for file in files:
        key = (file.run, file.steps) if args.format in PER_WINDOW else (file.path,)
        groups.setdefault(key, []).append(file)
    exported = readable = 0
    for group in groups.values():
        profiles, errors = read_files(group, limit, quiet=True)
        readable += len(profiles)
        skipped.extend(f"skipped {error.file}: {error.message}" for error in errors)
        usable = []
        for profile in profiles:
            if args.metric and args.metric not in profile.tree.excl:
                skipped.append(f"skipped {profile.source}: it has no metric {args.metric!r}")
            else:
                usable.append(profile)
        if args.format in PER_WINDOW:
            exported += _export_windows(usable, args.format, args.metric, out, skipped)
        else:
            exported += _export_each(usable, args.format, args.metric, out, skipped)
    for line in skipped:
        print(line)
    return 0 if readable and exported == readable else 1


def _export_each(
    profiles: Sequence[Profile], fmt: str, metric: str | None, out: Path, skipped: list[str]
) -> int:
    """One file per profile; returns how many were written."""
    export = exporter(fmt)
    exported = 0
    for profile in profiles:
        name = _file_name(profile.run, profile.steps, SUFFIX[fmt], profile.rank)
        chosen = metric or default_metric(profile.tree)
        exported += _write(
            out / name, functools.partial(export, profile, chosen), [profile], skipped
        )
    return exported


def _export_windows(
    profiles: Sequence[Profile], fmt: str, metric: str | None, out: Path, skipped: list[str]
) -> int:
    """One file per (run, window) holding its ranks; returns how many profiles were written."""
    export = window_exporter(fmt)
    windows: dict[tuple[str, tuple[int, int]], list[Profile]] = {}
    for profile in profiles:
        windows.setdefault((profile.run, tuple(profile.steps)), []).append(profile)
    exported = 0
    for (run_name, steps), ranks in sorted(windows.items()):
        # One metric for the whole window: every rank's "time" column must mean
        # the same thing, or Thicket's statistics across ranks compare apples and pears.
        chosen = metric or min((default_metric(p.tree) for p in ranks), key=_preference)
        name = _file_name(run_name, steps, SUFFIX[fmt])
        exported += _write(out / name, functools.partial(export, ranks, chosen), ranks, skipped)
    return exported


def _preference(metric: str) -> int:
    return (
        METRIC_PREFERENCE.index(metric) if metric in METRIC_PREFERENCE else len(METRIC_PREFERENCE)
    )


def _file_name(run_name: str, steps: tuple[int, int], suffix: str, rank: int | None = None) -> str:
    """``<run>[-rank<N>]-steps<first>-<last><suffix>``, the run's slashes flattened."""
    flat = run_name.replace("/", "_").strip(".") or "run"
    who = "" if rank is None else f"-rank{rank}"
    return f"{flat}{who}-steps{steps[0]}-{steps[1] - 1}{suffix}"


def _write(
    path: Path, render: Callable[[], bytes], profiles: Sequence[Profile], skipped: list[str]
) -> int:
    """Write ``render()`` to ``path`` and print it; on failure name each profile
    it held as skipped. Returns how many profiles were written."""
    try:
        path.write_bytes(render())
    except OSError as exc:
        skipped.extend(
            f"skipped {p.source}: cannot write {path}: {exc.strerror or exc}" for p in profiles
        )
        return 0
    print(path)
    return len(profiles)
