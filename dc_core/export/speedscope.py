"""speedscope's file format: one "evented" profile, the aggregated tree laid
out as a flame chart (as the Chrome exporter does): a node opens where its
earlier siblings end and spans its inclusive value, its children inside it.

Evented rather than "sampled": a sample stores its whole call path, so a
chain N deep would cost N² frame references; events cost two per node."""

from __future__ import annotations

import json

from ..profile import Profile

_UNITS = {"ns": "nanoseconds", "bytes": "bytes"}


def export(profile: Profile, metric: str = "cpu_time_ns") -> bytes:
    tree = profile.tree
    incl = tree.inclusive(metric)
    frame_index: dict[int, int] = {}
    frames: list[dict] = []
    events: list[dict] = []
    stack: list[tuple[int, int]] = [(k, 0) for k in reversed(tree.children(0))]  # (node or ~node, time)
    offsets = {0: 0}  # where the next child of an open node starts
    while stack:
        node, at = stack.pop()
        if node < 0:  # closing ~node
            events.append({"type": "C", "frame": frame_index[tree.frame[~node]], "at": at})
            continue
        span = incl[node]
        if span <= 0:
            continue
        parent = tree.parent[node]
        start = offsets[parent]
        offsets[parent] = start + span
        fid = tree.frame[node]
        if fid not in frame_index:
            frame = tree.frames[fid]
            frame_index[fid] = len(frames)
            entry = {"name": frame.label()}
            if frame.file:
                entry.update(file=frame.file, line=frame.line)
            frames.append(entry)
        events.append({"type": "O", "frame": frame_index[fid], "at": start})
        offsets[node] = start
        stack.append((~node, start + span))
        stack.extend((k, 0) for k in reversed(tree.children(node)))
    doc = {
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "shared": {"frames": frames},
        "profiles": [{
            "type": "evented", "name": f"rank {profile.rank} steps {profile.steps[0]}-{profile.steps[1] - 1} {metric}",
            "unit": _UNITS.get(tree.units.get(metric, ""), "none"),
            "startValue": 0, "endValue": max(incl[0], offsets[0]), "events": events,
        }],
        "name": f"DeepContext {profile.run}",
        "exporter": "deepcontext",
    }
    return json.dumps(doc).encode()
