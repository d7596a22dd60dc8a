"""The terminal report, the tab and the exports show one flat and one bottom-up.

Regression: ``deepcontext report --view flat`` gave ``model`` inclusive 10
(inclusive = exclusive) where the tab gave 110, for forward → model(10) → mm(100).
"""

from __future__ import annotations

import gzip
import json

from dc_core.cli import main
from dc_core.export import pprof_pb2
from dc_core.export.pprof import export as export_pprof
from dc_core.model.tree import Frame, tree_from_lists
from dc_core.store.logdir import write_profile
from dc_core.store.profile import Profile
from dc_core.tensorboard import tables
from dc_core.tensorboard.params import Ref
from dc_core.tensorboard.store import Index

TREE = tree_from_lists(
    (
        "forward",
        ("module:model @cpu_time_ns=10", "aten::mm @cpu_time_ns=100"),
        (
            "python:f|/a.py:1 @cpu_time_ns=5",
            ("python:f|/a.py:1 @cpu_time_ns=7", "aten::mm @cpu_time_ns=11"),
            "aten::mm @cpu_time_ns=13",
        ),
    ),
    ("backward", ("python:g|/a.py:2", "aten::mm [backward] @cpu_time_ns=17")),
)
METRIC = "cpu_time_ns"


def cli_json(tmp_path, capsys, view: str) -> dict:
    write_profile(Profile(tree=TREE, steps=(0, 1), step_times_ns=[163]), tmp_path)
    assert main(["report", str(tmp_path), "--json", "--view", view, "--min-percent", "0"]) == 0
    return json.loads(capsys.readouterr().out)["profiles"][0]["tree"]


def label(item: dict) -> str:
    return Frame(
        item["kind"], item["name"], item["file"], item["line"], item["detail"], item["backward"]
    ).label()


def tab() -> Index:
    return Index(Profile(tree=TREE, steps=(0, 1)), Ref(".", 0, (0, 1)))


def test_flat_is_the_same_in_the_report_and_the_tab(tmp_path, capsys):
    report = {
        label(k): (k["excl"][METRIC], k["incl"][METRIC])
        for k in cli_json(tmp_path, capsys, "flat")["children"]
    }
    shown = {
        r["label"]: (r["excl"][METRIC], r["incl"][METRIC])
        for r in tables.flat(tab(), METRIC, limit=100)["rows"]
    }
    assert report == shown
    assert report["model"] == (10, 110)
    assert report["a.py:1 f"] == (12, 36)  # recursion counted once: 5 + 7 + 11 + 13
    assert report["aten::mm"] == (124, 124)


def test_bottom_up_is_the_same_in_the_report_and_the_tab(tmp_path, capsys):
    index = tab()
    ids = {f.label(): fid for fid, f in enumerate(TREE.frames)}
    checked = 0
    stack = [([], cli_json(tmp_path, capsys, "bottom-up"))]
    while stack:
        path, item = stack.pop()
        rows = tables.bottom_up(index, path, METRIC, mode="excl", limit=100)["rows"]
        # the top level is the flat table, shown by its own cost
        column = "incl" if path else "excl"
        shown = {r["label"]: r[column][METRIC] for r in rows if r[column][METRIC]}
        assert {label(k): k["incl"][METRIC] for k in item["children"]} == shown, path
        checked += 1
        stack.extend(([*path, ids[label(k)]], k) for k in item["children"])
    assert checked > 10


def test_pprof_flat_and_cum_equal_the_flat_view():
    """pprof's flat (a function's value as the leaf) and cum (samples whose stack
    holds the function, once) are the flat view's excl and incl."""
    msg = pprof_pb2.Profile()
    msg.ParseFromString(gzip.decompress(export_pprof(Profile(tree=TREE, steps=(0, 1)), METRIC)))
    index = [t.type for t in msg.sample_type].index(list(msg.string_table).index(METRIC))
    labels = {
        loc.id: msg.string_table[
            next(f.name for f in msg.function if f.id == loc.line[0].function_id)
        ]
        for loc in msg.location
    }
    flat: dict[str, int] = {}
    cum: dict[str, int] = {}
    for sample in msg.sample:
        value = sample.value[index]
        stack = [labels[i] for i in sample.location_id]
        flat[stack[0]] = flat.get(stack[0], 0) + value
        for name in set(stack):
            cum[name] = cum.get(name, 0) + value
    rows = {
        r["label"]: (r["excl"][METRIC], r["incl"][METRIC])
        for r in tables.flat(tab(), METRIC, limit=100)["rows"]
    }
    assert {name: (flat.get(name, 0), cum.get(name, 0)) for name in rows} == rows
    assert rows["model"] == (10, 110) and rows["a.py:1 f"] == (12, 36)
