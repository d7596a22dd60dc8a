"""pprof (gzip-compressed protobuf): each call path is a sample whose values
are the path's exclusive metrics; locations are frames, leaf first.

As in Go's runtime profiles, a sample keeps at most `MAX_STACK` frames, the
innermost: a path N deep costs N location ids, so a deep recursion would
otherwise make the file quadratic in its depth."""

from __future__ import annotations

import gzip

from ..profile import Profile
from . import pprof_pb2

_UNITS = {"ns": "nanoseconds", "bytes": "bytes", "1": "count"}
MAX_STACK = 128


def export(profile: Profile, metric: str = "cpu_time_ns") -> bytes:
    tree = profile.tree
    strings: dict[str, int] = {"": 0}

    def sid(text: str) -> int:
        return strings.setdefault(text, len(strings))

    metrics = [metric] + [m for m in tree.excl if m != metric]  # the default sample type first
    msg = pprof_pb2.Profile(time_nanos=profile.start_unix_ns, duration_nanos=profile.duration_ns)
    for m in metrics:
        msg.sample_type.add(type=sid(m), unit=sid(_UNITS.get(tree.units.get(m, "1"), "count")))
    msg.period_type.type, msg.period_type.unit = sid(metric), sid(_UNITS.get(tree.units.get(metric, "1"), "count"))
    location_of: dict[int, int] = {}

    def location(fid: int) -> int:
        loc = location_of.get(fid)
        if loc is None:
            frame = tree.frames[fid]
            loc = location_of[fid] = len(location_of) + 1
            msg.function.add(id=loc, name=sid(frame.label()), system_name=sid(frame.name),
                             filename=sid(frame.file), start_line=frame.line)
            msg.location.add(id=loc).line.add(function_id=loc, line=frame.line)
        return loc

    for fid in range(1, len(tree.frames)):
        location(fid)
    zeros = [0] * len(tree)
    columns = [tree.excl.get(m, zeros) for m in metrics]
    depth = [0] * len(tree)
    path: list[int] = []  # location ids from the root's child down to the current node
    for node in tree.preorder():
        if node == 0:
            continue
        level = depth[node] = depth[tree.parent[node]] + 1
        del path[level - 1:]
        path.append(location(tree.frame[node]))
        values = [col[node] for col in columns]
        if any(values):
            msg.sample.add(location_id=path[-1:-MAX_STACK - 1:-1], value=values)
    msg.string_table.extend(strings)
    return gzip.compress(msg.SerializeToString())
