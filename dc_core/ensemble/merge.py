"""Many profiles as one tree: the union of their call paths, a value per profile.

An `Ensemble` is the merged tree of several profiles — the ranks of one
window, or the windows of one rank — whose nodes carry, per metric, the
node's inclusive value in each profile (a column; 0 where the profile lacks
the node). Statistics across columns (sum, mean, min, max, the column holding
the max, imbalance) are numpy reductions over a node's row.

`merge` streams: one profile is read, folded into the merged tree and
dropped before the next is read, so memory holds the merged tree and its
value matrix (nodes × columns × metrics, 8 bytes each) and never all the
trees at once. Past `PARALLEL_FROM` profiles the files are split between
worker processes, each merging its share; their partial ensembles are then
merged by path, which costs one pass over each partial tree.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing import get_context

import numpy as np

from ..model.kinds import UNITS
from ..model.tree import ROOT, Frame, Tree, fold_paths
from ..store.logdir import ProfileFile, max_profile_bytes, read_profile
from ..store.profile import Profile, ProfileError

#: Separator of a node's path labels, as the report prints paths.
PATH_SEP = " \u203a "
#: Fewer profiles than this are merged in-process: a worker pool costs more.
PARALLEL_FROM = 256


@dataclass(frozen=True)
class Column:
    """Which profile a column holds: its run, rank, host and window (``steps``
    is ``(start, end_exclusive)``), the file it came from and its step times."""

    run: str
    rank: int
    host: str
    steps: tuple[int, int]
    path: str
    step_times_ns: tuple[int, ...] = ()
    duration_ns: int = 0

    @property
    def step_count(self) -> int:
        return max(self.steps[1] - self.steps[0], 1)


@dataclass
class Stats:
    """Per node, a metric's inclusive value across columns (absent = 0)."""

    sum: np.ndarray  # float64
    mean: np.ndarray
    min: np.ndarray
    max: np.ndarray
    argmax: np.ndarray  # column index holding the max (the first, on ties)
    imbalance: np.ndarray  # (max - mean) / max, HPCToolkit's load imbalance; 0 where max is 0


class Ensemble:
    """A merged tree over columns; see the module docstring.

    Attributes:
        frames: Distinct frames; ``frame[i]`` indexes it.
        parent: Parent per node, ``-1`` for the root (node 0); ``parent[i] < i``.
        frame: Frame index per node.
        columns: What each column holds, in the order merged.
        incl: Metric → int64 array (nodes, columns) of inclusive values.
        units: Metric → unit.
    """

    def __init__(
        self,
        frames: list[Frame],
        parent: list[int],
        frame: list[int],
        columns: list[Column],
        incl: dict[str, np.ndarray],
        units: dict[str, str],
    ) -> None:
        self.frames, self.parent, self.frame = frames, parent, frame
        self.columns, self.incl, self.units = columns, incl, units
        # what and where, without metrics
        self.topology = Tree(frames=frames, parent=parent, frame=frame)
        self._stats: dict[str, Stats] = {}

    def __len__(self) -> int:
        return len(self.parent)

    @property
    def metrics(self) -> list[str]:
        return list(self.incl)

    def node_frame(self, node: int) -> Frame:
        return self.topology.node_frame(node)

    def children(self, node: int) -> list[int]:
        return self.topology.children(node)

    def path(self, node: int) -> list[int]:
        """Nodes from the root's child down to ``node``."""
        return self.topology.path(node)

    def label(self, node: int) -> str:
        """The node's path of labels joined by `PATH_SEP`, as the report prints it."""
        return PATH_SEP.join(self.node_frame(n).label() for n in self.path(node))

    def find(self, labels: str | Sequence[str]) -> int | None:
        """The node whose path labels are ``labels`` (a list, or joined by `PATH_SEP`)."""
        parts = (
            [p.strip() for p in labels.split(PATH_SEP.strip())]
            if isinstance(labels, str)
            else list(labels)
        )
        node = 0
        for part in parts:
            node = next((k for k in self.children(node) if self.node_frame(k).label() == part), -1)
            if node < 0:
                return None
        return node

    def values(self, metric: str, node: int) -> np.ndarray:
        """The node's inclusive ``metric`` in each column (zeros for a metric not recorded)."""
        matrix = self.incl.get(metric)
        return np.zeros(len(self.columns), np.int64) if matrix is None else np.asarray(matrix[node])

    def stats(self, metric: str) -> Stats:
        """Sum, mean, min, max, argmax and imbalance per node (cached)."""
        cached = self._stats.get(metric)
        if cached is None:
            m = self.incl.get(metric)
            if m is None:
                m = np.zeros((len(self), max(len(self.columns), 1)), np.int64)
            m = np.asarray(m)
            # float: a sum over thousands of ranks may pass int64
            total = m.sum(axis=1, dtype=np.float64)
            mean = total / max(m.shape[1], 1)
            high = m.max(axis=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                imbalance = np.where(high > 0, (high - mean) / np.where(high > 0, high, 1), 0.0)
            cached = self._stats[metric] = Stats(
                total, mean, m.min(axis=1), high, m.argmax(axis=1), imbalance
            )
        return cached

    def exclusive(self, metric: str) -> np.ndarray:
        """(nodes, columns) exclusive values: a node's inclusive minus its children's."""
        m = np.array(self.incl[metric], dtype=np.int64)
        if len(self) > 1:
            np.subtract.at(m, np.asarray(self.parent[1:]), np.asarray(self.incl[metric][1:]))
        return m

    def tree(self) -> Tree:
        """The merged `Tree` whose exclusive columns are sums over the columns
        (what a views/export function takes)."""
        excl = {}
        for metric in self.incl:
            total = np.clip(self.stats(metric).sum, _INT64.min, _FLOAT_BELOW_INT64_MAX).astype(
                np.int64
            )
            own = total.copy()
            if len(self) > 1:
                np.subtract.at(own, np.asarray(self.parent[1:]), total[1:])
            excl[metric] = own.tolist()
        return Tree(
            frames=list(self.frames),
            parent=list(self.parent),
            frame=list(self.frame),
            excl=excl,
            units={m: self.units.get(m, UNITS.get(m, "1")) for m in excl},
        )


_INT64 = np.iinfo(np.int64)
#: The largest float64 below 2**63 (int64's max rounds up to 2**63, which no int64 holds).
_FLOAT_BELOW_INT64_MAX = float(np.nextafter(np.float64(2.0**63), 0))


def _int64(values: list[int]) -> np.ndarray:
    """``values`` as int64, saturated (a damaged file's sums may not fit)."""
    try:
        return np.asarray(values, np.int64)
    except OverflowError:
        return np.asarray([min(max(v, _INT64.min), _INT64.max) for v in values], np.int64)


class _Builder:
    """Folds profiles into one merged tree, column by column."""

    def __init__(self, columns: int) -> None:
        self.frames: list[Frame] = [ROOT]
        self.frame_ids: dict[Frame, int] = {ROOT: 0}
        self.parent, self.frame = [-1], [0]
        self.child_of: dict[tuple[int, int], int] = {}
        self.width = columns
        self.incl: dict[str, np.ndarray] = {}
        self.units: dict[str, str] = {}
        self.columns: list[Column] = []

    def _matrix(self, metric: str, unit: str) -> np.ndarray:
        """The metric's (rows, columns) values, rows grown (doubling) to cover every merged node."""
        self.units.setdefault(metric, unit)
        m = self.incl.get(metric)
        rows = 0 if m is None else m.shape[0]
        if rows < len(self.parent):
            grown = np.zeros((max(len(self.parent), 2 * rows, 64), self.width), np.int64)
            if m is not None:
                grown[:rows] = m
            m = self.incl[metric] = grown
        return m

    def map_nodes(
        self, frames: Sequence[Frame], parent: Sequence[int], frame: Sequence[int]
    ) -> np.ndarray:
        """Merged node per node of a tree given by columns (parents first)."""
        fids = []
        for f in frames:
            fid = self.frame_ids.get(f)
            if fid is None:
                fid = self.frame_ids[f] = len(self.frames)
                self.frames.append(f)
            fids.append(fid)
        return np.asarray(
            fold_paths(parent, fids, frame, self.parent, self.frame, self.child_of), np.int64
        )

    def add_profile(self, profile: Profile, source: str) -> None:
        tree = profile.tree
        nodes = self.map_nodes(tree.frames, tree.parent, tree.frame)
        col = len(self.columns)
        for metric in tree.excl:
            m = self._matrix(metric, tree.units.get(metric, UNITS.get(metric, "1")))
            np.add.at(m[:, col], nodes, _int64(tree.inclusive(metric)))
        self.columns.append(
            Column(
                profile.run,
                profile.rank,
                profile.host,
                tuple(profile.steps),
                source,
                tuple(profile.step_times_ns),
                profile.duration_ns,
            )
        )

    def add_ensemble(self, part: Ensemble, first_column: int) -> None:
        nodes = self.map_nodes(part.frames, part.parent, part.frame)
        cols = slice(first_column, first_column + len(part.columns))
        for metric, values in part.incl.items():
            np.add.at(self._matrix(metric, part.units.get(metric, "1"))[:, cols], nodes, values)
        self.columns.extend(part.columns)

    def build(self) -> Ensemble:
        n = len(self.parent)
        incl = {
            metric: self._matrix(metric, self.units[metric])[:n, : len(self.columns)].copy()
            for metric in list(self.incl)
        }
        return Ensemble(self.frames, self.parent, self.frame, self.columns, incl, self.units)


def _source_name(source: ProfileFile | Profile) -> str:
    return str(source.path) if isinstance(source, ProfileFile) else source.source


def _merge_serial(
    sources: Sequence[ProfileFile | Profile], limit: int
) -> tuple[Ensemble, list[ProfileError]]:
    builder = _Builder(len(sources))
    errors = []
    for source in sources:
        try:
            profile = read_profile(source, limit) if isinstance(source, ProfileFile) else source
        except ProfileError as exc:
            errors.append(exc)
            continue
        builder.add_profile(profile, _source_name(source))
    return builder.build(), errors


def merge(
    sources: Sequence[ProfileFile | Profile],
    max_bytes: int | None = None,
    workers: int | None = None,
) -> tuple[Ensemble, list[ProfileError]]:
    """Merge profiles (files are read one at a time) into an `Ensemble` whose
    columns follow ``sources``' order; unreadable files are returned as
    errors, the others kept.

    Args:
        sources: Listed files or profiles already read.
        max_bytes: Per-file size cap; `max_profile_bytes` when None.
        workers: Worker processes; by default one per CPU past `PARALLEL_FROM` files.
    """
    limit = max_profile_bytes() if max_bytes is None else max_bytes
    files = all(isinstance(s, ProfileFile) for s in sources)
    if workers is None:
        workers = min(os.cpu_count() or 1, 8) if len(sources) >= PARALLEL_FROM else 1
    # Workers are forked, which copies no other thread: a threaded caller (the
    # TensorBoard server) could fork a lock another thread holds. Spawned
    # workers would instead re-run the caller's __main__. So threaded callers merge here.
    if threading.active_count() > 1:
        workers = 1
    if workers <= 1 or not files or len(sources) < 2 * workers:
        return _merge_serial(sources, limit)
    size = -(-len(sources) // workers)
    chunks = [list(sources[i : i + size]) for i in range(0, len(sources), size)]
    # Imported here: importing concurrent.futures registers an exit hook, which
    # fails once the interpreter is shutting down, where a session may still
    # write its last window (and import the analyzer, which imports this module).
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(len(chunks), mp_context=get_context("fork")) as pool:
        parts = list(pool.map(_merge_serial, chunks, [limit] * len(chunks)))
    builder = _Builder(sum(len(part.columns) for part, _ in parts))
    errors: list[ProfileError] = []
    for part, part_errors in parts:
        builder.add_ensemble(part, len(builder.columns))
        errors.extend(part_errors)
    return builder.build(), errors
