"""Profiles the plugin serves: found under the logdir, loaded once per file version.

Only files that `find_profiles` lists are ever opened; a request names a run,
rank and window, never a path. Loaded profiles are cached keyed by the file's
mtime and size (a rewritten window is reloaded), least recently used first out;
so are the merged ones (a window's ranks, a rank's windows; `merged`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from itertools import repeat
from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np  # a TensorBoard dependency

from ..ensemble import cross_rank, merge
from ..model.kinds import KINDS
from ..model.tree import Tree
from ..store.logdir import (
    DEFAULT_MAX_BYTES,
    ProfileFile,
    find_profiles,
    max_profile_bytes,
    read_profile,
)
from ..store.profile import Profile, ProfileError
from . import shape
from .merged import Merged, MergedCache
from .params import NotFound, Ref, format_window
from .shape import Levels

logger = logging.getLogger("deepcontext")


class Children:
    """Child lists of a parent column, in one sorted array (no list per node:
    allocating 100k lists costs more than the request budget on a busy machine).
    Children come in increasing node order, as `Tree.children` gives them.

    Any column of small non-negative ids groups the same way: ``Children(frame,
    groups=len(frames))`` lists the nodes of each frame.
    """

    def __init__(self, parent: list[int] | np.ndarray, groups: int | None = None) -> None:
        column = np.asarray(parent, dtype=np.int64)
        order = np.argsort(column, kind="stable")
        count = len(column) if groups is None else groups
        self._start = np.searchsorted(column[order], np.arange(count + 1)).tolist()
        self._order = order.tolist()  # slicing Python lists beats per-call numpy slicing

    def __call__(self, node: int) -> list[int]:
        return self._order[self._start[node] : self._start[node + 1]]


class Index:
    """A loaded profile and the lookups derived from it, computed on first use."""

    def __init__(self, profile: Profile, ref: Ref) -> None:
        self.profile = profile
        self.tree: Tree = profile.tree
        self.ref = ref
        self._memo: dict[Any, Any] = {}
        self._lock = threading.RLock()  # builders may use other memoized values
        self._labels: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self.tree)

    def memo(self, key: Any, build: Callable[[], Any]) -> Any:
        """``build()`` once per key; later calls return the cached value."""
        value = self._memo.get(key)
        if value is None:
            with self._lock:
                value = self._memo.get(key)
                if value is None:
                    value = self._memo[key] = build()
        return value

    def levels(self) -> Levels:
        """The tree's nodes by depth, for whole-tree numpy passes (`shape`)."""
        return self.memo(("levels",), lambda: Levels(self.tree.parent))

    def incl_arrays(self) -> dict[str, np.ndarray]:
        """Every metric's inclusive column as int64, computed in one pass:
        the first request of a window wants all of them (its totals)."""
        return self.memo(("incl_arrays",), lambda: shape.inclusive(self.tree, self.levels()))

    def incl_array(self, metric: str) -> np.ndarray:
        """Inclusive ``metric`` per node as int64 (zeros when absent)."""
        column = self.incl_arrays().get(metric)
        return column if column is not None else np.zeros(len(self.tree), dtype=np.int64)

    def total(self, metric: str) -> int:
        """The window's total of ``metric``: the root's inclusive value, which
        is the sum of the exclusive column (every node lies under the root),
        so a first request need not build the whole inclusive column for it."""
        return self.memo(("total", metric), lambda: sum(self.tree.excl.get(metric, ())))

    def incl(self, metric: str) -> list[int]:
        """Inclusive ``metric`` per node as Python ints (JSON-ready; zeros when absent)."""
        return self.memo(("incl", metric), lambda: self.incl_array(metric).tolist())

    def excl(self, metric: str) -> list[int]:
        column = self.tree.excl.get(metric)
        return column if column is not None else self.memo(("zeros",), lambda: [0] * len(self.tree))

    def frame_array(self) -> np.ndarray:
        """Frame id per node as int64."""
        return self.memo(("frame_array",), lambda: np.asarray(self.tree.frame, dtype=np.int64))

    def kind_codes(self) -> np.ndarray:
        """Per frame id, the index of its kind in `dc_core.model.kinds.KINDS`."""

        def build() -> np.ndarray:
            codes = {kind: i for i, kind in enumerate(KINDS)}  # decoded files have no other kind;
            # a tree built in code may: len(KINDS)
            kinds = map(attrgetter("kind"), self.tree.frames)
            return np.fromiter(
                map(codes.get, kinds, repeat(len(KINDS))),
                dtype=np.int64,
                count=len(self.tree.frames),
            )

        return self.memo(("kind_codes",), build)

    def children(self, node: int) -> list[int]:
        return self.memo(("children",), lambda: Children(self.tree.parent))(node)

    def order(self) -> list[int] | range:
        """Nodes with every parent before its children: index order when the
        tree was built top-down (the usual case), else a preorder."""
        return self.memo(("order",), self.tree.topdown)

    def label(self, fid: int) -> str:
        """Label of frame ``fid``, made on first use: a first paint shows a
        few hundred of a profile's tens of thousands of frames."""
        labels = self._labels
        text = labels.get(fid)
        if text is None:
            text = labels[fid] = self.tree.frames[fid].label()
        return text

    def labels(self) -> list[str]:
        """Label per frame id (all of them: search and sorting by name)."""
        return self.memo(("labels",), lambda: [self.label(f) for f in range(len(self.tree.frames))])

    @property
    def metrics(self) -> list[str]:
        return list(self.tree.excl)


class ProfileStore:
    """Finds and loads profiles under one logdir; safe to share between threads.

    Args:
        logdir: The directory TensorBoard was started on.
        listing_ttl_s: How long a directory listing is reused before rescanning.
        max_profiles: Loaded profiles kept in memory.
        clock: Monotonic clock, replaceable in tests.
        max_bytes: Larger files are refused by name (HTTP 422). Default:
            ``DEEPCONTEXT_MAX_PROFILE_BYTES``; when that is invalid, the error
            is logged and the built-in default used, so the tab still works.
    """

    def __init__(
        self,
        logdir: str | Path,
        listing_ttl_s: float = 2.0,
        max_profiles: int = 6,
        clock: Callable[[], float] = time.monotonic,
        max_bytes: int | None = None,
    ) -> None:
        if max_bytes is None:
            try:
                max_bytes = max_profile_bytes()
            except ValueError as exc:
                logger.error(
                    "DeepContext plugin: %s; reading files up to %d bytes", exc, DEFAULT_MAX_BYTES
                )
                max_bytes = DEFAULT_MAX_BYTES
        self.max_bytes = max_bytes
        self.logdir = Path(logdir) if logdir else None
        self._ttl = listing_ttl_s
        self._max = max_profiles
        self._clock = clock
        self._lock = threading.Lock()
        self._load_lock = threading.Lock()
        self._listing: tuple[float, list[ProfileFile]] | None = None
        self._loaded: OrderedDict[Path, tuple[tuple[int, int], Index]] = OrderedDict()
        self._summaries: dict[Path, tuple[tuple[int, int], Any]] = {}
        self.errors: dict[str, str] = {}  # relative path -> why it could not be read
        self._merged = MergedCache(lambda path: self._relative(Path(path)))

    def files(self) -> list[ProfileFile]:
        """Every profile file under the logdir (rescanned after ``listing_ttl_s``)."""
        if self.logdir is None or not self.logdir.is_dir():
            return []
        now = self._clock()
        with self._lock:
            if self._listing is not None and now - self._listing[0] < self._ttl:
                return self._listing[1]
        files = find_profiles(self.logdir)
        with self._lock:
            self._listing = (now, files)
        return files

    def resolve(self, ref: Ref) -> ProfileFile:
        for file in self.files():
            if file.run == ref.run and file.rank == ref.rank and file.steps == ref.window:
                return file
        raise NotFound(
            f"no profile for run {ref.run!r}, rank {ref.rank}, window {format_window(ref.window)}"
        )

    def version(self, ref: Ref) -> tuple[str, int, int]:
        """Path, mtime and size of the file behind ``ref`` now (`NotFound`
        when there is none): what `index` compares to reload a changed file,
        and what kept answers are keyed by (`answers`)."""
        file = self.resolve(ref)
        return (str(file.path), *_version(file.path))

    def index(self, ref: Ref) -> Index:
        """The loaded profile for ``ref``; raises `NotFound` or `ProfileError`."""
        file = self.resolve(ref)
        version = _version(file.path)
        with self._lock:
            cached = self._loaded.get(file.path)
            if cached is not None and cached[0] == version:
                self._loaded.move_to_end(file.path)
                return cached[1]
        with self._load_lock:  # concurrent first requests read a file once
            with self._lock:
                cached = self._loaded.get(file.path)
            if cached is not None and cached[0] == version:
                return cached[1]
            entry = Index(self._read(file), ref)
        with self._lock:
            self._loaded[file.path] = (version, entry)
            self._loaded.move_to_end(file.path)
            while len(self._loaded) > self._max:
                self._loaded.popitem(last=False)
        return entry

    def cross_rank(self, run: str, window: tuple[int, int]) -> Merged:
        """Every rank of ``run``'s ``window`` merged (`dc_core.ensemble.cross_rank`);
        raises `NotFound` when fewer than two ranks wrote it."""
        files = [f for f in self.files() if f.run == run and f.steps == window]
        if len(files) < 2:
            raise NotFound(
                f"run {run!r} has {len(files)} rank(s) for window {format_window(window)}; "
                "the cross-rank view needs two"
            )
        merged = self._merged.get(
            ("ranks", run, window), files, lambda: cross_rank(files, self.max_bytes)
        )
        self.errors.update(merged.errors)
        if not merged.ensemble.columns:
            raise ProfileError(
                *next(iter(merged.errors.items()), ("", "no rank file could be read"))
            )
        return merged

    def rank_windows(self, run: str, rank: int) -> Merged:
        """Every window of one rank merged (`dc_core.ensemble.merge`), columns in
        step order; windows already loaded are not read again."""
        files = sorted(
            (f for f in self.files() if f.run == run and f.rank == rank),
            key=lambda f: (f.steps, f.host),
        )
        if not files:
            raise NotFound(f"no profile for run {run!r}, rank {rank}")

        def build():
            with self._lock:
                loaded = dict(self._loaded)
            sources = []
            for f in files:
                entry = loaded.get(f.path)
                fresh = entry is not None and entry[0] == _version(f.path)
                sources.append(entry[1].profile if fresh else f)
            return merge(sources, self.max_bytes)

        merged = self._merged.get(("windows", run, rank), files, build)
        self.errors.update(merged.errors)
        return merged

    def summary(self, file: ProfileFile, build: Callable[[Profile], Any]) -> Any:
        """``build(profile)`` for ``file``, cached per file version without
        keeping the profile itself (used across all ranks of a window)."""
        version = _version(file.path)
        with self._lock:
            cached = self._summaries.get(file.path)
            if cached is not None and cached[0] == version:
                return cached[1]
            loaded = self._loaded.get(file.path)
        if loaded is not None and loaded[0] == version:
            profile = loaded[1].profile
        else:
            profile = self._read(file)
        value = build(profile)
        with self._lock:
            self._summaries[file.path] = (version, value)
        return value

    def _read(self, file: ProfileFile) -> Profile:
        relative = self._relative(file.path)
        try:
            profile = read_profile(file, self.max_bytes)
        except ProfileError as exc:
            self.errors[relative] = exc.message
            raise ProfileError(relative, exc.message) from None
        self.errors.pop(relative, None)
        return profile

    def _relative(self, path: Path) -> str:
        try:
            return path.relative_to(self.logdir).as_posix() if self.logdir else str(path)
        except ValueError:
            return path.name


def _version(path: Path) -> tuple[int, int]:
    try:
        stat = os.stat(path)
    except OSError:
        raise NotFound(f"profile file {path.name} disappeared") from None
    return stat.st_mtime_ns, stat.st_size
