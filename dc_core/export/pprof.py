"""pprof (gzip-compressed protobuf): each call path is a sample whose values
are the path's exclusive metrics; locations are frames, leaf first.

The exported metric is the first sample type and the profile's
``default_sample_type``, so ``go tool pprof`` and speedscope open on it (both
otherwise take the *last* sample type). ``duration_nanos`` is the window's
step time: the sum of the profile's step times.

As in Go's runtime profiles, a sample keeps at most `MAX_STACK` frames, the
innermost: a path N deep costs N location ids, so a deep recursion would
otherwise make the file quadratic in its depth."""

from __future__ import annotations

import gzip
from collections.abc import Callable

from ..model.tree import Tree
from ..store.profile import Profile
from . import pprof_pb2

_UNITS = {"ns": "nanoseconds", "bytes": "bytes", "1": "count"}
MAX_STACK = 128
_INT64_MAX = 2**63 - 1  # duration_nanos is an int64, and a sum of int64 step times may not fit


def export(profile: Profile, metric: str = "cpu_time_ns") -> bytes:
    """``profile`` as a gzip-compressed pprof message whose default sample type is ``metric``.

    Args:
        profile: The window to export.
        metric: The sample type viewers open with; it need not be one of the
            profile's columns (its values are then zero).

    Returns:
        The compressed ``perftools.profiles.Profile`` bytes.
    """
    tree = profile.tree
    strings: dict[str, int] = {"": 0}  # pprof requires string_table[0] == ""

    def sid(text: str) -> int:
        return strings.setdefault(text, len(strings))

    metrics = [metric] + [m for m in tree.excl if m != metric]
    msg = pprof_pb2.Profile(
        time_nanos=profile.start_unix_ns, duration_nanos=window_duration_ns(profile)
    )
    for m in metrics:
        msg.sample_type.add(type=sid(m), unit=sid(_unit(tree, m)))
    msg.period_type.type, msg.period_type.unit = sid(metric), sid(_unit(tree, metric))
    msg.default_sample_type = sid(metric)
    _add_samples(msg, tree, metrics, sid)
    msg.string_table.extend(strings)  # dicts keep insertion order = index order
    return gzip.compress(msg.SerializeToString())


def window_duration_ns(profile: Profile) -> int:
    """The window's step time: its step times summed, or the recorded window
    duration for a profile that stored no step times; clamped to what an int64
    holds, and never negative (a corrupt file's step times can be anything)."""
    total = sum(profile.step_times_ns) if profile.step_times_ns else profile.duration_ns
    return max(0, min(total, _INT64_MAX))


def _unit(tree: Tree, metric: str) -> str:
    """pprof's name for ``metric``'s unit."""
    return _UNITS.get(tree.units.get(metric, "1"), "count")


def _add_samples(
    msg: pprof_pb2.Profile, tree: Tree, metrics: list[str], sid: Callable[[str], int]
) -> None:
    """One function and location per frame, one sample per node with a value."""
    for fid in range(1, len(tree.frames)):  # location id = frame id; frame 0 is the root
        frame = tree.frames[fid]
        msg.function.add(
            id=fid,
            name=sid(frame.label()),
            system_name=sid(frame.name),
            filename=sid(frame.file),
            start_line=frame.line,
        )
        msg.location.add(id=fid).line.add(function_id=fid, line=frame.line)
    zeros = [0] * len(tree)
    columns = [tree.excl.get(m, zeros) for m in metrics]
    depth = [0] * len(tree)
    path: list[int] = []  # location ids from the root's child down to the current node
    for node in tree.preorder():
        if node == 0:
            continue
        level = depth[node] = depth[tree.parent[node]] + 1
        del path[level - 1 :]
        path.append(tree.frame[node])
        values = [col[node] for col in columns]
        if any(values):
            msg.sample.add(location_id=path[-1 : -MAX_STACK - 1 : -1], value=values)
