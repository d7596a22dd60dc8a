"""speedscope's file format: one "sampled" profile whose samples are the
tree's call paths weighted by their exclusive value."""

from __future__ import annotations

import json

from ..profile import Profile

_UNITS = {"ns": "nanoseconds", "bytes": "bytes"}


def export(profile: Profile, metric: str = "cpu_time_ns") -> bytes:
    tree = profile.tree
    frame_index: dict[int, int] = {}
    frames = []
    samples, weights = [], []
    excl = tree.excl.get(metric, [0] * len(tree))
    for node in range(1, len(tree)):
        if excl[node] <= 0:
            continue
        stack = []
        for n in tree.path(node):
            fid = tree.frame[n]
            if fid not in frame_index:
                frame = tree.frames[fid]
                frame_index[fid] = len(frames)
                entry = {"name": frame.label()}
                if frame.file:
                    entry.update(file=frame.file, line=frame.line)
                frames.append(entry)
            stack.append(frame_index[fid])
        samples.append(stack)
        weights.append(excl[node])
    doc = {
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "shared": {"frames": frames},
        "profiles": [{
            "type": "sampled", "name": f"rank {profile.rank} steps {profile.steps[0]}-{profile.steps[1] - 1} {metric}",
            "unit": _UNITS.get(tree.units.get(metric, ""), "none"),
            "startValue": 0, "endValue": sum(weights), "samples": samples, "weights": weights,
        }],
        "name": f"DeepContext {profile.run}",
        "exporter": "deepcontext",
    }
    return json.dumps(doc).encode()
