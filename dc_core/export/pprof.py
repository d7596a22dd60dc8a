"""pprof (gzip-compressed protobuf): each call path is a sample whose values
are the path's exclusive metrics; locations are frames, leaf first."""

from __future__ import annotations

import gzip

from ..profile import Profile
from . import pprof_pb2

_UNITS = {"ns": "nanoseconds", "bytes": "bytes", "1": "count"}


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
    for fid, frame in enumerate(tree.frames):
        if fid == 0:
            continue
        loc = location_of[fid] = len(location_of) + 1
        msg.function.add(id=loc, name=sid(frame.label()), system_name=sid(frame.name),
                         filename=sid(frame.file), start_line=frame.line)
        msg.location.add(id=loc).line.add(function_id=loc, line=frame.line)
    columns = [tree.excl[m] for m in metrics]
    for node in range(1, len(tree)):
        values = [col[node] for col in columns]
        if any(values):
            ids = [location_of[tree.frame[n]] for n in reversed(tree.path(node))]
            msg.sample.add(location_id=ids, value=values)
    msg.string_table.extend(strings)
    return gzip.compress(msg.SerializeToString())
