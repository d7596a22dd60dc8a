"""Profiles the plugin serves: found under the logdir, loaded once per file version.

Only files that `find_profiles` lists are ever opened; a request names a run,
rank and window, never a path. Loaded profiles are cached keyed by the file's
mtime and size (a rewritten window is reloaded), least recently used first out.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

import numpy as np  # a TensorBoard dependency

from ..store.logdir import DEFAULT_MAX_BYTES, ProfileFile, find_profiles, max_profile_bytes, read_profile
from ..store.profile import Profile, ProfileError
from ..model.tree import Tree
from .params import NotFound, Ref, format_window

logger = logging.getLogger("deepcontext")


class Children:
    """Child lists of a parent column, in one sorted array (no list per node:
    allocating 100k lists costs more than the request budget on a busy machine).
    Children come in increasing node order, as `Tree.children` gives them."""

    def __init__(self, parent: list[int]) -> None:
        column = np.asarray(parent, dtype=np.int64)
        order = np.argsort(column, kind="stable")
        self._start = np.searchsorted(column[order], np.arange(len(parent) + 1)).tolist()
        self._order = order.tolist()  # slicing Python lists beats per-call numpy slicing

    def __call__(self, node: int) -> list[int]:
        return self._order[self._start[node]:self._start[node + 1]]


class Index:
    """A loaded profile and the lookups derived from it, computed on first use."""

    def __init__(self, profile: Profile, ref: Ref) -> None:
        self.profile = profile
        self.tree: Tree = profile.tree
        self.ref = ref
        self._memo: dict[Any, Any] = {}
        self._lock = threading.RLock()  # builders may use other memoized values

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

    def incl(self, metric: str) -> list[int]:
        return self.memo(("incl", metric), lambda: self.tree.inclusive(metric))

    def excl(self, metric: str) -> list[int]:
        column = self.tree.excl.get(metric)
        return column if column is not None else self.memo(("zeros",), lambda: [0] * len(self.tree))

    def children(self, node: int) -> list[int]:
        return self.memo(("children",), lambda: Children(self.tree.parent))(node)

    def order(self) -> list[int] | range:
        """Nodes with every parent before its children: index order when the
        tree was built top-down (the usual case), else a preorder."""
        return self.memo(("order",), self.tree.topdown)

    def labels(self) -> list[str]:
        """Label per frame id."""
        return self.memo(("labels",), lambda: [f.label() for f in self.tree.frames])

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

    def __init__(self, logdir: str | Path, listing_ttl_s: float = 2.0, max_profiles: int = 6,
                 clock: Callable[[], float] = time.monotonic, max_bytes: int | None = None) -> None:
        if max_bytes is None:
            try:
                max_bytes = max_profile_bytes()
            except ValueError as exc:
                logger.error("DeepContext plugin: %s; reading files up to %d bytes", exc, DEFAULT_MAX_BYTES)
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
        raise NotFound(f"no profile for run {ref.run!r}, rank {ref.rank}, window {format_window(ref.window)}")

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
