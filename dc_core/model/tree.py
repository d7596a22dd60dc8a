"""The calling context tree: frames (what), nodes (where), metric columns (how much).

A `Tree` is flat: ``parent[i]`` and ``frame[i]`` per node, ``excl[metric][i]``
per node. Inclusive values are derived (and cached), never stored. Nodes are
appended after their parent, so ``parent[i] < i`` (`profile.decode` refuses a
file where it does not hold), and every walk here is a loop, never a
recursion: a call chain may be 100,000 deep.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .kinds import KINDS, PHASES, unit_of


@dataclass(frozen=True)
class Frame:
    """Identity of a context: kind, name and, where they apply, source and detail."""

    kind: str
    name: str
    file: str = ""
    line: int = 0
    detail: str = ""
    backward: bool = False

    def label(self) -> str:
        """A one-line human label, e.g. ``model.py:88 attention`` or ``blocks.3.attn (MHA)``."""
        if self.kind == "python":
            short = self.file.rsplit("/", 1)[-1] if self.file else "?"
            text = f"{short}:{self.line} {self.name}" + (f" ({self.detail})" if self.detail else "")
        elif self.detail:
            text = f"{self.name} ({self.detail})"
        else:
            text = self.name or self.kind
        return text + (" [backward]" if self.backward else "")


ROOT = Frame("root", "")


def frame_json(frame: Frame) -> dict[str, Any]:
    """A frame's identity as JSON, the one shape of every reader: the report's
    nodes (``--json``, docs/schema.md), the cross-rank tree's, the tab's rows
    (which add their own keys, a label among them)."""
    return {
        "kind": frame.kind,
        "name": frame.name,
        "detail": frame.detail,
        "file": frame.file,
        "line": frame.line,
        "backward": frame.backward,
    }


@dataclass
class Tree:
    """A calling context tree with exclusive metric columns.

    Attributes:
        frames: Distinct frames; nodes refer to them by index.
        parent: Parent node per node (``-1`` for the root, node 0).
        frame: Frame index per node.
        excl: Exclusive value per node, per metric name.
        units: Unit per metric name.
    """

    frames: list[Frame] = field(default_factory=lambda: [ROOT])
    parent: list[int] = field(default_factory=lambda: [-1])
    frame: list[int] = field(default_factory=lambda: [0])
    excl: dict[str, list[int]] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._children: list[list[int]] | None = None
        self._incl: dict[str, list[int]] = {}
        self._frame_ids: dict[Frame, int] | None = (
            None  # built on first lookup: readers rarely need it
        )
        self._child_of: dict[tuple[int, int], int] | None = None
        self._ordered: bool | None = None  # parent[i] < i for every node (cached by `topdown`)
        self._ordered_len = 0

    def __len__(self) -> int:
        return len(self.parent)

    @property
    def metrics(self) -> list[str]:
        return list(self.excl)

    # --- building -------------------------------------------------------
    def _ids(self) -> dict[Frame, int]:
        if self._frame_ids is None:
            self._frame_ids = {f: i for i, f in enumerate(self.frames)}
        return self._frame_ids

    def intern(self, frame: Frame) -> int:
        ids = self._ids()
        index = ids.get(frame)
        if index is None:
            index = ids[frame] = len(self.frames)
            self.frames.append(frame)
        return index

    def child(self, parent: int, frame: Frame) -> int:
        """Find or insert the node for ``frame`` under ``parent``."""
        child_of = self._child_index()
        key = (parent, self.intern(frame))
        node = child_of.get(key)
        if node is None:
            node = child_of[key] = len(self.parent)
            self.parent.append(parent)
            self.frame.append(key[1])
            for column in self.excl.values():
                column.append(0)
            self._invalidate()
        return node

    def find_child(self, parent: int, frame: Frame) -> int | None:
        """The node for ``frame`` under ``parent`` if there is one (nothing is inserted)."""
        fid = self._ids().get(frame)
        return None if fid is None else self._child_index().get((parent, fid))

    def _child_index(self) -> dict[tuple[int, int], int]:
        if self._child_of is None:
            self._child_of = {(p, f): i for i, (p, f) in enumerate(zip(self.parent, self.frame))}
        return self._child_of

    def add(self, node: int, metric: str, value: int) -> None:
        column = self.excl.get(metric)
        if column is None:
            column = self.excl[metric] = [0] * len(self.parent)
            self.units.setdefault(metric, unit_of(metric))
        column[node] += value
        self._incl.pop(metric, None)

    def _invalidate(self) -> None:
        self._children = None
        self._incl.clear()
        self._ordered = None

    # --- reading --------------------------------------------------------
    def node_frame(self, node: int) -> Frame:
        return self.frames[self.frame[node]]

    def children(self, node: int) -> list[int]:
        if self._children is None:
            kids: list[list[int]] = [[] for _ in self.parent]
            for i, p in enumerate(self.parent):
                if p >= 0:
                    kids[p].append(i)
            self._children = kids
        return self._children[node]

    def value(self, node: int, metric: str) -> int:
        column = self.excl.get(metric)
        return column[node] if column is not None else 0

    def inclusive(self, metric: str) -> list[int]:
        """Inclusive column: a node's value plus all of its descendants'."""
        cached = self._incl.get(metric)
        if cached is not None:
            return cached
        column = list(self.excl.get(metric, [0] * len(self.parent)))
        for i in reversed(self.topdown()):
            p = self.parent[i]
            if p >= 0:
                column[p] += column[i]
        self._incl[metric] = column
        return column

    def topdown(self) -> Sequence[int]:
        """Every node after its parent: index order, as trees are built; a
        preorder for one assembled otherwise."""
        if self._ordered is None or len(self.parent) != self._ordered_len:
            self._ordered = all(p < i for i, p in enumerate(self.parent) if i)
            self._ordered_len = len(self.parent)
        if self._ordered:
            return range(len(self.parent))
        return list(self.preorder())

    def path(self, node: int) -> list[int]:
        """Nodes from the root's first child down to ``node``."""
        out = []
        while node > 0:
            out.append(node)
            node = self.parent[node]
        return out[::-1]

    def path_frames(self, node: int) -> list[Frame]:
        return [self.node_frame(n) for n in self.path(node)]

    def preorder(self, start: int = 0) -> Iterator[int]:
        stack = [start]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(self.children(node)))

    def find(self, *labels: str) -> int | None:
        """Node reached by following children whose name or label matches, or None."""
        node = 0
        for label in labels:
            for kid in self.children(node):
                frame = self.node_frame(kid)
                if label in (frame.name, frame.label()):
                    node = kid
                    break
            else:
                return None
        return node

    def find_all(self, predicate) -> list[int]:
        return [n for n in range(len(self.parent)) if predicate(self.node_frame(n))]

    def total(self, metric: str) -> int:
        return sum(self.excl.get(metric, ()))


def fold_paths(
    parent: Sequence[int],
    frame_ids: Sequence[int],
    frame: Sequence[int],
    out_parent: list[int],
    out_frame: list[int],
    child_of: dict[tuple[int, int], int],
    into_parent: Callable[[int], bool] | None = None,
) -> list[int]:
    """Map each node of a tree given by columns (parents first) to a node of
    the output columns, where one call path is one node.

    A node's key is (its parent's output node, ``frame_ids[frame[node]]``);
    ``child_of`` maps keys to output nodes, and a new key appends to
    ``out_parent``/``out_frame`` (all three are extended in place, so several
    trees can be folded into one). With ``into_parent(node)`` true, a node
    (not a root child) is merged into its parent's output node. Node 0 maps to 0.
    """
    out = [0] * len(parent)
    for node in range(1, len(parent)):
        key = (out[parent[node]], frame_ids[frame[node]])
        if into_parent is not None and key[0] and into_parent(node):
            out[node] = key[0]
            continue
        target = child_of.get(key)
        if target is None:
            target = child_of[key] = len(out_parent)
            out_parent.append(key[0])
            out_frame.append(key[1])
        out[node] = target
    return out


def _parse_label(label: str) -> tuple[Frame, dict[str, int]]:
    """``"kind:name @metric=value,metric=value"`` → frame and metrics."""
    text, _, metric_text = label.partition(" @")
    metrics = {}
    for item in filter(None, metric_text.split(",")):
        key, _, value = item.partition("=")
        metrics[key.strip()] = int(value)
    kind, sep, name = text.partition(":")
    backward = False
    if not sep or kind not in KINDS:
        name = text
        kind = "phase" if text in PHASES else "operator" if "::" in text else "python"
    if name.endswith(" [backward]"):
        name, backward = name[: -len(" [backward]")], True
    file, line = "", 0
    if kind == "python" and "|" in name:  # "python:func|file.py:12"
        name, where = name.split("|", 1)
        file, _, line_text = where.rpartition(":")
        line = int(line_text)
    return Frame(kind, name, file, line, backward=backward), metrics


def tree_from_lists(*specs: str | Sequence) -> Tree:
    """Build a tree from a literal shorthand, for tests and examples.

    Each spec is a label or ``(label, *children)``. A label is
    ``[kind:]name[ [backward]][ @metric=value,...]``; without a kind, phases,
    ``ns::op`` operators and Python functions are recognised by name. Example:
    ``tree_from_lists(("forward", ("model", "aten::mm @cpu_time_ns=100")))``.
    """
    tree = Tree()
    stack = [(0, spec) for spec in reversed(specs)]  # depth-first, in the order written
    while stack:
        parent, spec = stack.pop()
        label, kids = (spec, ()) if isinstance(spec, str) else (spec[0], spec[1:])
        frame, metrics = _parse_label(label)
        node = tree.child(parent, frame)
        for metric, value in metrics.items():
            tree.add(node, metric, value)
        stack.extend((node, kid) for kid in reversed(kids))
    return tree


def from_columns(
    frames: Sequence[Frame],
    parent: Iterable[int],
    frame: Iterable[int],
    excl: Mapping[str, Iterable[int]],
    units: Mapping[str, str] | None = None,
) -> Tree:
    """Build a tree from flat columns (a collector snapshot or a profile file)."""
    parent, frame = list(parent), list(frame)
    columns = {name: list(values) for name, values in excl.items()}
    columns = {name: values for name, values in columns.items() if len(values) == len(parent)}
    return Tree(
        frames=list(frames),
        parent=parent,
        frame=frame,
        excl=columns,
        units={name: (units or {}).get(name, unit_of(name)) for name in columns},
    )
