"""The summary index: a window's merged ranks, saved so the next reader need
not read a thousand rank files again.

Beside the profiles (``<run>/plugins/deepcontext/.index/steps-<first>-<last>/``),
or under the user's cache directory when the logdir is read-only, an index
holds ``meta.json`` (a checksum line, then the merged tree's frames and parents, the columns, the
files that could not be read) and one ``<metric>.npy`` per metric: the
(nodes × ranks) inclusive values, memory-mapped when read, so one node's
distribution over ranks is one row read.

An index is used only while it matches the files: their names, sizes and
mtimes are hashed into its signature. One that does not match, or that fails
any check on reading (a checksum over its JSON and arrays, then every index
and shape: it is a file like any other and may be damaged), is rebuilt; a failure to write
one is logged and costs only the next reader's time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..model.kinds import KINDS
from ..model.tree import Frame
from ..store.logdir import ProfileFile, max_profile_bytes
from ..store.profile import ProfileError
from .merge import Column, Ensemble, merge

logger = logging.getLogger("deepcontext")

INDEX_VERSION = 1
INDEX_DIR = ".index"
#: Rank files of one window below this are merged each time: an index would save little.
INDEX_FROM = 16
_META = "meta.json"
#: meta.json larger than this is not an index we wrote (2,000 nodes take ~150 KB).
MAX_META_BYTES = 256 << 20


def signature(files: Sequence[ProfileFile], max_bytes: int) -> str:
    """Hash of the files' paths, sizes and mtimes (and the size cap, which decides what was read)."""
    digest = hashlib.sha1(f"{INDEX_VERSION}:{max_bytes}".encode())
    for file in files:
        try:
            info = file.path.stat()
            digest.update(f"{file.path}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
        except OSError:
            digest.update(f"{file.path}\0missing\n".encode())
    return digest.hexdigest()


def index_dirs(files: Sequence[ProfileFile]) -> list[Path]:
    """Where a window's index may live: beside the profiles, then the user's cache."""
    plugin_dir = files[0].path.parent.parent
    first, end = files[0].steps
    name = f"steps-{first}-{max(end - 1, first)}"
    cache_root = (
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "deepcontext" / "index"
    )
    key = hashlib.sha1(str(plugin_dir.resolve()).encode()).hexdigest()[:20]
    return [plugin_dir / INDEX_DIR / name, cache_root / key / name]


def cross_rank(
    files: Sequence[ProfileFile], max_bytes: int | None = None, cache: bool = True
) -> tuple[Ensemble, list[ProfileError]]:
    """The merged ranks of one (run, window), from its index when it is current.

    Args:
        files: Every rank's file of the window (one run, one window).
        max_bytes: Per-file size cap; `max_profile_bytes` when None.
        cache: Read and write the summary index (off: always merge).
    """
    limit = max_profile_bytes() if max_bytes is None else max_bytes
    files = sorted(files, key=lambda f: (f.rank, f.host))
    if not cache or len(files) < INDEX_FROM:
        return merge(files, limit)
    sign = signature(files, limit)
    places = index_dirs(files)
    for place in places:
        loaded = load_index(place, sign)
        if loaded is not None:
            return loaded
    ensemble, errors = merge(files, limit)
    for place in places:
        if save_index(place, sign, ensemble, errors):
            break
    return ensemble, errors


def save_index(place: Path, sign: str, ensemble: Ensemble, errors: list[ProfileError]) -> bool:
    """Write the index atomically (a temporary directory renamed into place); False when it cannot be."""
    meta = {
        "version": INDEX_VERSION,
        "signature": sign,
        "frames": [[f.kind, f.name, f.file, f.line, f.detail, f.backward] for f in ensemble.frames],
        "parent": ensemble.parent,
        "frame": ensemble.frame,
        "units": ensemble.units,
        "metrics": list(ensemble.incl),
        "columns": [
            [c.run, c.rank, c.host, list(c.steps), c.path, list(c.step_times_ns), c.duration_ns]
            for c in ensemble.columns
        ],
        "errors": [[e.file, e.message] for e in errors],
    }
    try:
        place.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=place.parent))
        try:
            body = json.dumps(meta).encode()
            digest = hashlib.sha1(body)
            for i, metric in enumerate(ensemble.incl):
                np.save(
                    tmp / f"{i}.npy",
                    np.ascontiguousarray(ensemble.incl[metric]),
                    allow_pickle=False,
                )
                digest.update((tmp / f"{i}.npy").read_bytes())
            (tmp / _META).write_bytes(digest.hexdigest().encode() + b"\n" + body)
            if place.exists():  # a stale index: move it aside, then remove it
                old = place.with_name(place.name + ".old")
                shutil.rmtree(old, ignore_errors=True)
                os.replace(place, old)
                shutil.rmtree(old, ignore_errors=True)
            os.replace(tmp, place)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    except OSError as exc:
        logger.debug("DeepContext: cannot write the rank index at %s: %s", place, exc)
        return False
    return True


def load_index(place: Path, sign: str) -> tuple[Ensemble, list[ProfileError]] | None:
    """The index at ``place`` if it exists, matches ``sign`` and passes every check; else None."""
    try:
        with open(place / _META, "rb") as handle:
            raw = handle.read(MAX_META_BYTES + 1)
        head, _, body = raw.partition(b"\n")
        if len(raw) > MAX_META_BYTES or len(head) != 40:
            return None
        meta = json.loads(body)
        if (
            not isinstance(meta, dict)
            or meta.get("version") != INDEX_VERSION
            or meta.get("signature") != sign
        ):
            return None
        digest = hashlib.sha1(body)
        for i in range(len(meta["metrics"])):
            digest.update((place / f"{i}.npy").read_bytes())
        if digest.hexdigest().encode() != head:
            raise ValueError("its checksum does not match its contents")
        return _from_meta(place, meta)
    except (OSError, ValueError, TypeError, KeyError, IndexError, RecursionError) as exc:
        if not isinstance(exc, FileNotFoundError):
            logger.debug("DeepContext: ignoring the rank index at %s: %s", place, exc)
        return None


def _from_meta(place: Path, meta: dict) -> tuple[Ensemble, list[ProfileError]]:
    """Raises ValueError (or TypeError/KeyError/IndexError) on anything inconsistent."""
    frames = []
    for kind, name, file, line, detail, backward in meta["frames"]:
        if kind not in KINDS or not all(isinstance(v, str) for v in (name, file, detail)):
            raise ValueError("bad frame")
        frames.append(Frame(kind, name, file, int(line), detail, bool(backward)))
    parent, frame = [int(p) for p in meta["parent"]], [int(f) for f in meta["frame"]]
    n = len(parent)
    if (
        n == 0
        or len(frame) != n
        or parent[0] != -1
        or any(not 0 <= p < i for i, p in enumerate(parent) if i)
    ):
        raise ValueError("parents do not form a tree")
    if any(not 0 <= f < len(frames) for f in frame):
        raise ValueError("a node refers outside the frames")
    columns = [
        Column(
            str(run),
            int(rank),
            str(host),
            (int(steps[0]), int(steps[1])),
            str(path),
            tuple(int(t) for t in times),
            int(duration),
        )
        for run, rank, host, steps, path, times, duration in meta["columns"]
    ]
    incl = {}
    for i, metric in enumerate(meta["metrics"]):
        matrix = np.load(place / f"{i}.npy", mmap_mode="r", allow_pickle=False)
        if matrix.dtype != np.int64 or matrix.shape != (n, len(columns)):
            raise ValueError(f"{metric}: shape {matrix.shape} is not ({n}, {len(columns)})")
        incl[str(metric)] = matrix
    units = {str(k): str(v) for k, v in meta["units"].items()}
    errors = [ProfileError(str(file), str(message)) for file, message in meta["errors"]]
    return Ensemble(frames, parent, frame, columns, incl, units), errors
