"""Two profiles as one tree, matched by call path: what changed per step.

The one comparison behind ``deepcontext diff A B`` and the tab's Diff. A
`Union` pairs the nodes of A's tree with B's, level by level and only where
asked (the tab expands a few rows of two 100k-node trees; the command walks
everything once, O(n)). Union ids: A's node ids as they are (a node picked
in A's tree is the same id here); a call path only B has is
``len(A) + its node id in B``. Ids are fixed by the two trees alone.

Matching children of a matched pair (`Union.pair_children`):

1. Exact: the same `Frame`.
2. Moved: where both sides leave siblings of one `loose_key` unmatched (a
   Python frame's function and file, a module's name and class), that
   group's calls, its exact pairs included, are paired again by
   `align_calls`: in line order and by what they call, so a line moved by
   an edit above it still matches, and a call whose line number another
   call now has does not take its place. The rest stay unmatched.

Per step: a node's inclusive value divided by its profile's `step_count`;
a metric taken at the window's memory peak (`kinds.at_peak`) is one
moment's value, compared as it is (`Side.divisor`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .kinds import at_peak
from .tree import Frame, Tree

if TYPE_CHECKING:  # `side_of` reads a profile's fields; the vocabulary imports no file format
    from ..store.profile import Profile

#: A side's step bounds per metric: per node (low, high), see `Side`.
StepRange = Callable[[str], "tuple[Sequence[int], Sequence[int]] | None"]


def step_count(steps: tuple[int, int], step_times_ns: Sequence[int]) -> int:
    """Steps a profile's values cover: ``max(len(step_times_ns), end - start, 1)``."""
    return max(len(step_times_ns), steps[1] - steps[0], 1)


def loose_key(frame: Frame) -> tuple | None:
    """What a frame keeps when its source line moves: a Python frame's kind,
    function and file; a module's name and class; None for other kinds (they
    match exactly or not at all)."""
    if frame.kind == "python":
        return ("python", frame.name, frame.file, frame.backward)
    if frame.kind == "module":
        return ("module", frame.name, frame.detail, frame.backward)
    return None


class Side:
    """One profile of a comparison.

    Args:
        tree: Its tree.
        steps: How many steps its values cover (`step_count`); per-step
            values are inclusive values divided by it.
        children: Child lists (default ``tree.children``; the tab passes its
            faster index).
        inclusive: Inclusive column of a metric (default ``tree.inclusive``).
        step_range: Per metric, per node (low, high): a lower bound of the
            node's inclusive value in its quietest step and an upper bound in
            its busiest, or None when unknown (`Profile.step_range`).
    """

    def __init__(
        self,
        tree: Tree,
        steps: int = 1,
        children: Callable[[int], Sequence[int]] | None = None,
        inclusive: Callable[[str], Sequence[int]] | None = None,
        step_range: StepRange | None = None,
    ) -> None:
        self.tree = tree
        self.steps = max(int(steps), 1)
        self.children = children or tree.children
        self.inclusive = inclusive or tree.inclusive
        self._step_range = step_range
        self._ranges: dict[str, tuple[Sequence[int], Sequence[int]] | None] = {}

    def __len__(self) -> int:
        return len(self.tree)

    def divisor(self, metric: str) -> int:
        """What inclusive ``metric`` is divided by to give a value per step:
        the step count; 1 for a metric taken at the window's memory peak
        (a moment of the window, not a total over its steps)."""
        return 1 if at_peak(metric) else self.steps

    def per_step(self, metric: str, node: int) -> float:
        """``node``'s inclusive ``metric`` per step (as it is for `divisor` 1)."""
        return self.inclusive(metric)[node] / self.divisor(metric)

    def spread(self, metric: str, node: int) -> int | None:
        """How far ``node``'s inclusive ``metric`` moves between this profile's
        steps: high − low of its step bounds; None when the profile has no
        bounds for ``metric`` or fewer than two steps (one step's bounds say
        nothing about how steps vary), and for a metric at the memory peak."""
        if self.steps < 2 or self._step_range is None or at_peak(metric):
            return None
        if metric not in self._ranges:
            self._ranges[metric] = self._step_range(metric)
        bounds = self._ranges[metric]
        return None if bounds is None else int(bounds[1][node]) - int(bounds[0][node])


def side_of(
    profile: Profile,
    children: Callable[[int], Sequence[int]] | None = None,
    inclusive: Callable[[str], Sequence[int]] | None = None,
    step_range: StepRange | None = None,
) -> Side:
    """The `Side` of ``profile``: its tree, `step_count` and step bounds
    (`Profile.step_range` unless ``step_range`` is given); lookups as `Side`."""
    return Side(
        profile.tree,
        step_count(profile.steps, profile.step_times_ns),
        children,
        inclusive,
        step_range or profile.step_range,
    )


@dataclass(frozen=True)
class Change:
    """One matched call path's change per step.

    ``spread_ns`` is the larger of the two sides' `Side.spread`, None when
    either is unknown. ``significant``: ``|delta_ns| > spread_ns`` with the
    spread known; a change no larger than how much the node moves between
    one step and another in either profile could be step-to-step noise
    (the bounds are loose, so this errs on the side of "not significant").
    """

    node: int  # union id (A's node)
    b_node: int
    a_ns: float
    b_ns: float
    spread_ns: int | None

    @property
    def delta_ns(self) -> float:
        return self.b_ns - self.a_ns

    @property
    def significant(self) -> bool:
        return self.spread_ns is not None and abs(self.delta_ns) > self.spread_ns


@dataclass(frozen=True)
class OnlyIn:
    """A call path one side alone has (its descendants are implied): its
    union id, its node in that side's tree, its inclusive value per step."""

    node: int
    side_node: int
    ns: float


@dataclass
class Comparison:
    """`compare`'s answer: changes ranked significant first, then by
    ``|delta_ns|``; the paths only one side has, largest first."""

    metric: str
    changes: list[Change]
    only_a: list[OnlyIn]
    only_b: list[OnlyIn]
    floor_ns: float


#: Sibling groups larger than this (calls of one function in A x in B) pair
#: in line order instead of by `align_calls`' table.
MAX_ALIGN = 4096
#: Children of a call `align_calls` compares at most (the first ones: what
#: a line calls first tells it apart as well as all of it).
MAX_CALL_KIDS = 16
#: Calls re-paired under one parent past which `align_calls` pairs them by
#: line order alone: an edit moves a few; hundreds mean two different programs.
MAX_MOVED = 256
#: `align_calls`' score of a pair on the same line: more than a pair's own 1,
#: less than one shared child's 2.
SAME_LINE = 1.5


@dataclass(frozen=True)
class Call:
    """One sibling of a group `align_calls` pairs: its line, node and the
    keys of its children (`loose_key`, else the frame)."""

    line: int
    node: int
    kids: frozenset


def align_calls(a: Sequence[Call], b: Sequence[Call]) -> list[tuple[int, int]]:
    """Pair the calls of one function from one parent in A and in B.

    Calls keep their order in the file when an edit inserts or removes lines,
    so the pairs keep line order: of the order-keeping pairings, the one of
    the highest score, a pair scoring 1, plus 2 per child key the two share
    (what the lines call, so that after an insertion A's line 26 pairs with
    B's 27 that calls the same, not with B's 26), plus `SAME_LINE` for the
    same line (a call removed leaves the others where they were, rather than
    each paired with its next). Returns (A node, B node) pairs.
    """
    a, b = sorted(a, key=lambda c: (c.line, c.node)), sorted(b, key=lambda c: (c.line, c.node))
    if len(a) * len(b) > MAX_ALIGN:
        return [(x.node, y.node) for x, y in zip(a, b)]
    rows, cols = len(a), len(b)
    best = [[0.0] * (cols + 1) for _ in range(rows + 1)]
    for i in range(rows):
        for j in range(cols):
            pair = (
                best[i][j]
                + 1
                + 2 * len(a[i].kids & b[j].kids)
                + (SAME_LINE if a[i].line == b[j].line else 0)
            )
            best[i + 1][j + 1] = max(pair, best[i][j + 1], best[i + 1][j])
    pairs, i, j = [], rows, cols
    while i and j:  # walk back, preferring a pair where it scores the same
        if best[i][j] == best[i - 1][j - 1] + 1 + 2 * len(a[i - 1].kids & b[j - 1].kids) + (
            SAME_LINE if a[i - 1].line == b[j - 1].line else 0
        ):
            pairs.append((a[i - 1].node, b[j - 1].node))
            i, j = i - 1, j - 1
        elif best[i][j] == best[i - 1][j]:
            i -= 1
        else:
            j -= 1
    return pairs[::-1]


class Union:
    """A and B merged by call path; ids and matching as the module says.

    Safe to share between request threads without a lock: the lazily filled
    maps only gain entries (one dict store each, atomic in CPython), each
    pairing is written before it is marked done, and racing requests
    compute the same values.
    """

    def __init__(self, a: Side, b: Side) -> None:
        self.a, self.b = a, b
        self.size_a = len(a)
        self._b_of: dict[int, int] = {0: 0}  # A node -> B node, -1 where B lacks the path
        self._a_of: dict[int, int] = {0: 0}  # B node -> A node, -1 where A lacks the path
        self._paired: set[int] = set()  # matched A nodes whose children are paired
        self._kids: dict[int, list[int]] = {}  # union children of A's nodes
        self._keys: tuple[list[int], list[int]] | None = None  # see `_number_frames`

    def __len__(self) -> int:
        return self.size_a + len(self.b)

    # --- matching ---------------------------------------------------------
    def pair_children(self, a_node: int) -> None:
        """Pair the children of matched A node ``a_node`` with those of its B
        node (exact frames, then moved lines; see the module), once."""
        if a_node in self._paired:
            return
        b_node = self._b_of[a_node]
        # Children are keyed by their frames (equal frames, equal keys): by
        # the frames themselves where a few levels are paired (keys made per
        # child, as tuples, would keep tens of thousands of new objects alive
        # and wake the cyclic garbage collector mid-request), by `_keys`'
        # frame numbers in a whole walk (ints hash faster than frames).
        keys_a, keys_b = self._keys or (self.a.tree.frames, self.b.tree.frames)
        frame_a, frame_b = self.a.tree.frame, self.b.tree.frame
        kids_a, kids_b = self.a.children(a_node), self.b.children(b_node)
        left_a = {keys_a[frame_a[k]]: k for k in kids_a}
        pairs: dict[int, int] = {}  # A child -> B child
        left_b = []
        for k in kids_b:
            match = left_a.pop(keys_b[frame_b[k]], None)
            if match is None:
                left_b.append(k)
            else:
                pairs[match] = k
        if left_a and left_b:
            self._pair_moved(pairs, list(left_a.values()), left_b)
        # Written once final (a racing reader sees a child's match or none yet).
        b_of, a_of = self._b_of, self._a_of
        for k in kids_a:
            b_of[k] = pairs.get(k, -1)
        for ka, kb in pairs.items():
            a_of[kb] = ka
        for k in kids_b:
            if k not in a_of:
                a_of[k] = -1
        self._paired.add(a_node)

    def _number_frames(self) -> None:
        """Number the frames of both trees alike (A's first id of a frame;
        -1 for a frame A lacks), so that a whole walk keys children by ints."""
        if self._keys is None:
            first: dict[Frame, int] = {}
            keys_a = [first.setdefault(f, i) for i, f in enumerate(self.a.tree.frames)]
            self._keys = keys_a, [first.get(f, -1) for f in self.b.tree.frames]

    def _pair_moved(self, pairs: dict[int, int], left_a: list[int], left_b: list[int]) -> None:
        """Re-pair, by `align_calls`, each group of siblings of one `loose_key`
        that both sides left unmatched members of, its exact pairs included:
        after lines were inserted, A's line 57 may be B's 56 moved down, and
        an exact match of two 57s the wrong pair."""
        ta, tb = self.a.tree, self.b.tree
        keys_b = {k: loose_key(tb.node_frame(k)) for k in left_b}
        shared = set(keys_b.values())
        groups: dict[tuple, tuple[list[int], list[int]]] = {}
        for k in left_a:
            key = loose_key(ta.node_frame(k))
            if key is not None and key in shared:
                groups.setdefault(key, ([], []))[0].append(k)
        if not groups:
            return
        for k, key in keys_b.items():
            if key in groups:
                groups[key][1].append(k)
        for ka, kb in list(pairs.items()):
            key = loose_key(ta.node_frame(ka))
            if key in groups:
                del pairs[ka]
                groups[key][0].append(ka)
                groups[key][1].append(kb)
        # Past MAX_MOVED calls (two unrelated programs, not an edit) or a group
        # past MAX_ALIGN pairs, calls pair in line order: what they call is not read.
        crowd = sum(len(in_a) + len(in_b) for in_a, in_b in groups.values()) > MAX_MOVED
        for in_a, in_b in groups.values():
            if len(in_a) == len(in_b) == 1:  # the usual edit: one call, moved
                pairs[in_a[0]] = in_b[0]
            else:
                big = crowd or len(in_a) * len(in_b) > MAX_ALIGN
                pairs.update(
                    align_calls(
                        [self._call(self.a, k, big) for k in in_a],
                        [self._call(self.b, k, big) for k in in_b],
                    )
                )

    @staticmethod
    def _call(side: Side, node: int, bare: bool = False) -> Call:
        """``node`` as `align_calls` takes it; the keys of its first
        `MAX_CALL_KIDS` children (none when ``bare``)."""
        tree = side.tree
        kids = () if bare else side.children(node)[:MAX_CALL_KIDS]
        return Call(
            tree.node_frame(node).line,
            node,
            frozenset(loose_key(f) or f for f in map(tree.node_frame, kids)),
        )

    def _match(self, side: int, node: int) -> int:
        """The other profile's node on the call path of ``node`` (of A when
        ``side`` is 0, of B when 1), or -1; walks up to the nearest known node."""
        known = self._a_of if side else self._b_of
        parent = (self.b if side else self.a).tree.parent
        path = []
        while node not in known:
            path.append(node)
            node = parent[node]
        for node in reversed(path):
            up = parent[node]
            up_a = self._a_of[up] if side else up  # the A node whose children pair this one
            if up_a >= 0 and (side or self._b_of[up_a] >= 0):
                self.pair_children(up_a)
            known.setdefault(node, -1)
        return known[node]

    def b_node(self, node: int) -> int:
        """B's node of union ``node``, -1 where B lacks the path."""
        return self._match(0, node) if node < self.size_a else node - self.size_a

    def a_node(self, node: int) -> int:
        """A's node of union ``node``, -1 where A lacks the path."""
        return node if node < self.size_a else -1

    def is_node(self, node: int) -> bool:
        """Whether ``node`` (in ``range(len(self))``) names a union node: a B
        path that A also has goes by A's id, not by ``len(A) + B's``."""
        return node < self.size_a or self._match(1, node - self.size_a) < 0

    # --- reading ----------------------------------------------------------
    def frame(self, node: int) -> Frame:
        """A's frame of ``node``, B's for a path only B has."""
        if node < self.size_a:
            return self.a.tree.node_frame(node)
        return self.b.tree.node_frame(node - self.size_a)

    def b_frame(self, node: int) -> Frame | None:
        """B's frame of ``node`` (it differs from A's for a moved line), None
        where B lacks the path."""
        b = self.b_node(node)
        return self.b.tree.node_frame(b) if b >= 0 else None

    def label(self, node: int) -> str:
        """The label of ``node``; a moved line reads ``f.py:10→14 f``."""
        frame, moved = self.frame(node), self.b_frame(node)
        if moved is None or moved == frame:
            return frame.label()
        if frame.kind == "python" and moved.kind == "python":
            return frame.label().replace(f":{frame.line} ", f":{frame.line}\u2192{moved.line} ", 1)
        return f"{frame.label()} \u2192 {moved.label()}"

    def path(self, node: int) -> list[int]:
        """Union ids from the root's first child down to ``node``."""
        if node < self.size_a:
            return self.a.tree.path(node)
        return [
            a if (a := self._match(1, k)) >= 0 else self.size_a + k
            for k in self.b.tree.path(node - self.size_a)
        ]

    def children(self, node: int) -> list[int]:
        """A's children (A's ids), then B's children A lacks (B-only ids)."""
        if node >= self.size_a:
            return [self.size_a + k for k in self.b.children(node - self.size_a)]
        kids = self._kids.get(node)
        if kids is None:
            kids = list(self.a.children(node))
            if self.b_node(node) >= 0:
                self.pair_children(node)
                a_of = self._a_of
                kids += [self.size_a + k for k in self.b.children(self._b_of[node]) if a_of[k] < 0]
            self._kids[node] = kids
        return kids

    def values(self, metric: str, node: int) -> tuple[int, int]:
        """Inclusive ``metric`` of ``node`` in A and in B (0 where absent)."""
        a = self.a.inclusive(metric)[node] if node < self.size_a else 0
        b = self.b_node(node)
        return a, (self.b.inclusive(metric)[b] if b >= 0 else 0)

    def change(self, metric: str, node: int) -> Change:
        """``node``'s `Change` of ``metric`` per step (0 on a side lacking it)."""
        a_node, b_node = self.a_node(node), self.b_node(node)
        a_ns = self.a.per_step(metric, a_node) if a_node >= 0 else 0.0
        b_ns = self.b.per_step(metric, b_node) if b_node >= 0 else 0.0
        spread = None
        if a_node >= 0 and b_node >= 0:
            sa, sb = self.a.spread(metric, a_node), self.b.spread(metric, b_node)
            spread = None if sa is None or sb is None else max(sa, sb)
        return Change(node, b_node, a_ns, b_ns, spread)

    def matched(self) -> Iterator[tuple[int, int]]:
        """Every matched pair (A node, B node), parents before children, each
        with its children already paired (one walk of both trees)."""
        self._number_frames()
        stack = [0]
        b_of, children, pair = self._b_of, self.a.children, self.pair_children
        while stack:
            node = stack.pop()
            pair(node)
            yield node, b_of[node]
            stack.extend(k for k in reversed(children(node)) if b_of[k] >= 0)


def carried(delta: float, kid_delta: float, tolerance: float) -> bool:
    """Whether a node's change is its child's: the child's change has the
    same sign, is at least half of the node's, and leaves a remainder within
    ``tolerance``. Such a node is not listed; the deeper path says it."""
    return (
        delta * kid_delta > 0
        and abs(kid_delta) * 2 >= abs(delta)
        and abs(delta - kid_delta) <= tolerance
    )


def compare(union: Union, metric: str, min_share: float = 0.0) -> Comparison:
    """Every call path's change of ``metric`` per step, in one walk.

    A matched path (the root aside) is listed when ``|delta_ns|`` is at least
    the floor, ``min_share`` of the larger side's total per step (and is not
    zero), unless one of its children carries its change (`carried`, within
    the larger of the node's spread and the floor). A path only one side has
    is listed by its topmost node, when its value per step reaches the floor.
    """
    a, b = union.a, union.b
    incl_a, incl_b = a.inclusive(metric), b.inclusive(metric)
    sa, sb = a.divisor(metric), b.divisor(metric)
    floor = min_share * max(incl_a[0] / sa, incl_b[0] / sb)
    changes, only_a, only_b = [], [], []
    b_of, a_of = union._b_of, union._a_of
    for node, b_node in union.matched():
        delta = incl_b[b_node] / sb - incl_a[node] / sa
        biggest = 0.0
        for k in a.children(node):
            kb = b_of[k]
            if kb < 0:
                if incl_a[k] / sa >= floor and incl_a[k]:
                    only_a.append(OnlyIn(k, k, incl_a[k] / sa))
                continue
            kid = incl_b[kb] / sb - incl_a[k] / sa
            if kid * delta > 0 and abs(kid) > abs(biggest):
                biggest = kid
        for k in b.children(b_node):
            if a_of[k] < 0 and incl_b[k] / sb >= floor and incl_b[k]:
                only_b.append(OnlyIn(union.size_a + k, k, incl_b[k] / sb))
        if node == 0 or not delta or abs(delta) < floor:
            continue
        change = union.change(metric, node)
        if biggest and carried(delta, biggest, max(change.spread_ns or 0, floor)):
            continue
        changes.append(change)
    changes.sort(key=lambda c: (not c.significant, -abs(c.delta_ns), c.node))
    only_a.sort(key=lambda o: (-o.ns, o.node))
    only_b.sort(key=lambda o: (-o.ns, o.node))
    return Comparison(metric, changes, only_a, only_b, floor)
