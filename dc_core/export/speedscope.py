"""speedscope's file format: one "evented" profile, the aggregated tree laid
out as a flame chart (`layout.flame_edges`, as the Chrome exporter does): a
node opens where its earlier siblings end and spans its inclusive value, its
children inside it.

Evented rather than "sampled": a sample stores its whole call path, so a
chain N deep would cost N² frame references; events cost two per node."""

from __future__ import annotations

import json
from typing import Any

from ..model.tree import Tree
from ..store.profile import Profile
from .layout import extent, flame_edges

SCHEMA_URL = "https://www.speedscope.app/file-format-schema.json"
_UNITS = {"ns": "nanoseconds", "bytes": "bytes"}


def export(profile: Profile, metric: str = "cpu_time_ns") -> bytes:
    """``profile`` as a speedscope file: one evented profile of ``metric``.

    Args:
        profile: The window to export.
        metric: The metric whose inclusive values are the frames' widths.

    Returns:
        The UTF-8 JSON document, valid against speedscope's file-format schema.
    """
    tree = profile.tree
    frames, events = _frames_and_events(tree, metric)
    doc = {
        "$schema": SCHEMA_URL,
        "shared": {"frames": frames},
        "profiles": [
            {
                "type": "evented",
                "name": f"rank {profile.rank} steps {profile.steps[0]}-{profile.steps[1] - 1} {metric}",
                "unit": _UNITS.get(tree.units.get(metric, ""), "none"),
                "startValue": 0,
                "endValue": extent(tree, metric),
                "events": events,
            }
        ],
        "name": f"DeepContext {profile.run}",
        "exporter": "deepcontext",
    }
    return json.dumps(doc).encode()


def _frames_and_events(
    tree: Tree, metric: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """speedscope's shared frame list (one entry per distinct frame drawn) and
    the profile's open/close events referring to it."""
    frame_index: dict[int, int] = {}
    frames: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    for edge in flame_edges(tree, metric):
        fid = tree.frame[edge.node]
        index = frame_index.get(fid)
        if index is None:
            frame = tree.frames[fid]
            index = frame_index[fid] = len(frames)
            entry: dict[str, Any] = {"name": frame.label()}
            if frame.file:
                entry.update(file=frame.file, line=frame.line)
            frames.append(entry)
        events.append({"type": "O" if edge.opens else "C", "frame": index, "at": edge.at})
    return frames, events
