"""speedscope export: valid against speedscope's published schema, frames
nested exactly, widths the report's inclusive values."""

from __future__ import annotations

import json

import pytest

from dc_core.export import exporter
from tests.exports.readers import drawn_widths, require, speedscope_schema_path


def validate(doc: dict) -> None:
    """Check ``doc`` against speedscope's own ``file-format-schema.json``."""
    jsonschema = require("jsonschema")
    schema = json.loads(speedscope_schema_path().read_text())
    jsonschema.validate(doc, schema)
    broken = json.loads(json.dumps(doc))
    broken["profiles"][0]["unit"] = "parsecs"
    # the schema is the real one, not an empty stand-in
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


def frame_widths(doc: dict) -> dict[tuple[str, ...], int]:
    """Width per call path of the evented profile, checking as speedscope's
    importer does that every close matches the innermost open frame, inside its parent."""
    frames = doc["shared"]["frames"]
    (profile,) = doc["profiles"]
    stack: list[tuple[tuple[str, ...], int, int]] = []  # (path, frame index, opened at)
    widths, last = {}, profile["startValue"]
    for event in profile["events"]:
        assert event["at"] >= last, "events go back in time"
        last = event["at"]
        if event["type"] == "O":
            path = (stack[-1][0] if stack else ()) + (frames[event["frame"]]["name"],)
            stack.append((path, event["frame"], event["at"]))
        else:
            path, frame, opened = stack.pop()
            assert frame == event["frame"] and event["at"] > opened
            widths[path] = event["at"] - opened
    assert not stack and last <= profile["endValue"]
    return widths


def test_speedscope_file_is_valid_against_the_published_schema(demo_profile):
    for metric in ("cpu_time_ns", "count", "flops"):  # flops: a metric the profile lacks
        validate(json.loads(exporter("speedscope")(demo_profile, metric)))


def test_speedscope_widths_are_the_reports_inclusive_values_node_for_node(demo_profile):
    for metric in ("cpu_time_ns", "samples"):
        doc = json.loads(exporter("speedscope")(demo_profile, metric))
        assert frame_widths(doc) == drawn_widths(demo_profile, metric)
        (profile,) = doc["profiles"]
        assert profile["endValue"] == demo_profile.tree.inclusive(metric)[0]
        assert profile["unit"] == ("nanoseconds" if metric == "cpu_time_ns" else "none")


def test_speedscope_frames_name_their_source(demo_profile):
    doc = json.loads(exporter("speedscope")(demo_profile, "cpu_time_ns"))
    by_name = {f["name"]: f for f in doc["shared"]["frames"]}
    assert by_name["demo::featurize"] == {"name": "demo::featurize"}
    train = [
        f
        for name, f in by_name.items()
        if name.startswith("workload.py:") and name.endswith(" train")
    ]
    assert len(train) >= 2  # the forward and the backward call sites
    for frame in train:
        assert frame["file"].endswith("dc_core/demo/workload.py")
        assert frame["name"] == f"workload.py:{frame['line']} train"
