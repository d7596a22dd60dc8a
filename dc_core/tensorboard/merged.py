"""Merged profiles the tab shows, cached while their files are unchanged:
the ranks of one window (through `dc_core.ensemble.cross_rank`, which keeps a
summary index beside the profiles) and the windows of one rank
(`dc_core.ensemble.merge`).

A merge of a thousand rank files takes seconds, so each key is built once
however many requests ask for it at the same time, and other keys (and the
plugin's other routes) are not held up meanwhile.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from ..ensemble import Ensemble
from ..store.logdir import ProfileFile
from ..store.profile import ProfileError


@dataclass
class Merged:
    """An ensemble and the files left out of it (relative path -> why)."""

    ensemble: Ensemble
    errors: dict[str, str]


Build = Callable[[], "tuple[Ensemble, list[ProfileError]]"]


class MergedCache:
    """Least recently used merged profiles, keyed by what they merge.

    Args:
        max_entries: Ensembles kept (a 1,024-rank window of 2,000 nodes holds
            about 16 MiB per metric).
        relative: Turns a file path into the name the tab may show.
    """

    def __init__(self, relative: Callable[[str], str], max_entries: int = 4) -> None:
        self._relative = relative
        self._max = max_entries
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, tuple[tuple, Merged]] = OrderedDict()
        self._building: dict[Hashable, threading.Lock] = {}

    def get(self, key: Hashable, files: Sequence[ProfileFile], build: Build) -> Merged:
        """The cached merge for ``key`` while ``files`` are unchanged, else ``build()``."""
        version = versions(files)
        with self._lock:
            cached = self._entries.get(key)
            if cached is not None and cached[0] == version:
                self._entries.move_to_end(key)
                return cached[1]
            gate = self._building.setdefault(key, threading.Lock())
        with gate:  # one build per key; a second request waits for it, then finds it cached
            with self._lock:
                cached = self._entries.get(key)
            if cached is not None and cached[0] == version:
                return cached[1]
            ensemble, errors = build()
            merged = Merged(ensemble, {self._relative(e.file): e.message for e in errors})
            with self._lock:
                self._entries[key] = (version, merged)
                self._entries.move_to_end(key)
                while len(self._entries) > self._max:
                    self._entries.popitem(last=False)
        return merged


def versions(files: Sequence[ProfileFile]) -> tuple:
    """Path, mtime and size of each file (a missing one counts as changed)."""
    out = []
    for file in files:
        try:
            info = os.stat(file.path)
            out.append((str(file.path), info.st_mtime_ns, info.st_size))
        except OSError:
            out.append((str(file.path), -1, -1))
    return tuple(out)
