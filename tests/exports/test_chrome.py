"""Chrome trace / Perfetto export: slices nest exactly and carry the report's numbers."""

from __future__ import annotations

import json
import random

from dc_core.export import exporter
from dc_core.model.tree import Frame, Tree
from dc_core.store.profile import Profile
from tests.exports.readers import drawn_widths, report_paths


def slices(data: bytes) -> list[dict]:
    """The B/E events read back as slices (path, start, end, args), matched
    with a stack the way trace viewers match them, checking nesting as they go."""
    out, stack = [], []
    for event in json.loads(data)["traceEvents"]:
        assert event["ph"] in ("M", "B", "E"), event
        if event["ph"] == "B":
            assert "args" not in event, "speedscope would show the args as part of the name"
            parent = stack[-1] if stack else None
            assert parent is None or event["ts"] >= parent["start"], (event, parent)
            stack.append(
                {
                    "name": event["name"],
                    "start": event["ts"],
                    "path": (parent["path"] if parent else ()) + (event["name"],),
                }
            )
        elif event["ph"] == "E":
            opened = stack.pop()
            assert event["name"] == opened["name"] and event["ts"] > opened["start"], (
                event,
                opened,
            )
            opened.update(end=event["ts"], args=event["args"])
            out.append(opened)
    assert not stack, "unclosed slices"
    return out


def assert_nested(spans: list[dict]) -> None:
    """Every slice lies inside its parent's interval, siblings one after another."""
    by_path = {s["path"]: s for s in spans}
    for s in spans:
        if len(s["path"]) > 1:
            parent = by_path[s["path"][:-1]]
            assert parent["start"] <= s["start"] and s["end"] <= parent["end"], (s, parent)
    ordered = sorted(spans, key=lambda s: (s["path"][:-1], s["start"]))
    for a, b in zip(ordered, ordered[1:]):
        if a["path"][:-1] == b["path"][:-1]:
            assert a["end"] <= b["start"], (a, b)


def test_chrome_slices_are_the_reports_inclusive_values_node_for_node(demo_profile):
    for metric in ("cpu_time_ns", "count"):
        spans = slices(exporter("chrome")(demo_profile, metric))
        assert_nested(spans)
        scale = 1000 if metric.endswith("_ns") else 1
        widths = {s["path"]: round(s["end"] * scale) - round(s["start"] * scale) for s in spans}
        assert widths == drawn_widths(demo_profile, metric)


def test_chrome_end_events_carry_the_nodes_exclusive_metrics(demo_profile):
    report = report_paths(demo_profile, "cpu_time_ns")
    spans = slices(exporter("chrome")(demo_profile, "cpu_time_ns"))
    assert spans
    for s in spans:
        assert {m: s["args"][m] for m in demo_profile.tree.excl} == report[s["path"]]["excl"]
    (grad,) = [s for s in spans if s["name"] == "demo::grad [backward]"]
    assert grad["path"][0] == "backward" and grad["args"]["file"] == ""


def test_chrome_phases_follow_each_other_instead_of_nesting(demo_profile):
    """speedscope nested the optimizer under backward: an X event's ts + dur,
    summed in floating point, ended past the next phase's start."""
    top = [
        s for s in slices(exporter("chrome")(demo_profile, "cpu_time_ns")) if len(s["path"]) == 1
    ]
    assert {s["name"] for s in top} == {"forward", "backward", "dataloader", "optimizer", "other"}


def wide_profile(seed: int = 0, blocks: int = 300) -> Profile:
    """Many parents of three operators each, of awkward nanosecond values:
    values whose float microseconds, summed, overshoot their parent."""
    rng = random.Random(seed)
    tree = Tree()
    outer = tree.child(0, Frame("phase", "forward"))
    for block in range(blocks):
        parent = tree.child(outer, Frame("module", f"block{block}"))
        for i in range(3):
            tree.add(
                tree.child(parent, Frame("operator", f"op{i}")),
                "cpu_time_ns",
                rng.randrange(1, 10**9),
            )
    return Profile(tree=tree, steps=(0, 1), step_times_ns=[1])


def old_overshoots(tree: Tree) -> int:
    """How many children the old export (X events, ts and dur float µs from
    ns, the end computed by the viewer as ts + dur) ended past their parent."""
    incl = tree.inclusive("cpu_time_ns")
    count, start = 0, 0
    for block in tree.children(tree.children(0)[0]):
        parent_end = start / 1e3 + incl[block] / 1e3
        offset = start
        for kid in tree.children(block):
            count += offset / 1e3 + incl[kid] / 1e3 > parent_end
            offset += incl[kid]
        start += incl[block]
    return count


def test_chrome_child_never_ends_after_its_parent_after_rounding():
    """Timestamps were float µs from ns: a child's end landed past its parent's."""
    profile = wide_profile()
    assert old_overshoots(profile.tree) > 10, (
        "the data no longer reproduces the rounding the bug was about"
    )
    spans = slices(exporter("chrome")(profile, "cpu_time_ns"))
    assert len(spans) == len(profile.tree) - 1
    assert_nested(spans)
    widths = {s["path"]: round(s["end"] * 1000) - round(s["start"] * 1000) for s in spans}
    assert widths == drawn_widths(profile, "cpu_time_ns")


def test_chrome_children_wider_than_their_parent_are_clipped_to_it():
    """A negative exclusive value makes the children outgrow their parent;
    the layout gives them only the room the parent has."""
    tree = Tree()
    parent = tree.child(0, Frame("phase", "forward"))
    tree.add(parent, "alloc_bytes", -50)
    for name in ("a", "b", "c"):
        tree.add(tree.child(parent, Frame("operator", name)), "alloc_bytes", 40)
    data = exporter("chrome")(Profile(tree, (0, 1)), "alloc_bytes")
    spans = {s["path"][-1]: (s["start"], s["end"]) for s in slices(data)}
    assert spans == {"forward": (0, 70), "a": (0, 40), "b": (40, 70)}
