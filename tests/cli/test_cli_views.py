"""What the report's views put on each row: bottom-up shows self time where it
is spent, and its callers carry the part that flowed through them."""

from __future__ import annotations

import json

from dc_core.cli import main
from dc_core.cli.present import node_json, tree_rows
from dc_core.model.tree import tree_from_lists
from dc_core.model.views import view
from dc_core.store.logdir import write_profile
from dc_core.store.profile import Profile

TREE = tree_from_lists(("forward", ("module:model @cpu_time_ns=10", "aten::mm @cpu_time_ns=100")))


def rows_of(name: str) -> list[tuple[int, str, int, int]]:
    return [
        (r.depth, r.frame.label(), r.incl, r.excl)
        for r in tree_rows(view(TREE, name), "cpu_time_ns")
    ]


def test_bottom_up_puts_self_time_on_the_frame_that_spent_it():
    """Regression: function rows showed ``excl 0 ns`` and the outermost caller
    (``backward``) held the self time of the operator above it."""
    assert rows_of("bottom-up") == [
        (0, "aten::mm", 100, 100),  # where the time is spent
        (1, "model", 100, 100),  # its caller: the 100 that came through it
        (2, "forward", 100, 100),
        (0, "model", 10, 10),  # model's own 10
        (1, "forward", 10, 10),
    ]


def test_top_down_keeps_inclusive_and_exclusive_apart():
    assert rows_of("top-down") == [
        (0, "forward", 110, 0),
        (1, "model", 110, 10),
        (2, "aten::mm", 100, 100),
    ]


def test_bottom_up_json_rows_carry_the_flow_in_both_columns():
    root = node_json(view(TREE, "bottom-up"))
    top = {k["name"]: k for k in root["children"]}
    assert set(top) == {"aten::mm", "model"}
    assert top["aten::mm"]["excl"]["cpu_time_ns"] == top["aten::mm"]["incl"]["cpu_time_ns"] == 100
    (caller,) = top["aten::mm"]["children"]
    assert (
        caller["name"] == "model"
        and caller["excl"]["cpu_time_ns"] == caller["incl"]["cpu_time_ns"] == 100
    )
    (outer,) = caller["children"]
    assert outer["name"] == "forward" and outer["excl"]["cpu_time_ns"] == 100
    assert (
        top["model"]["excl"]["cpu_time_ns"] == 10
        and top["model"]["children"][0]["excl"]["cpu_time_ns"] == 10
    )
    assert root["incl"]["cpu_time_ns"] == 110


def test_bottom_up_table_has_one_self_column(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    write_profile(Profile(tree=TREE, steps=(0, 1), step_times_ns=[110]), tmp_path)
    assert main(["report", str(tmp_path), "--view", "bottom-up", "--min-percent", "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if "% window" in line)
    assert header.split() == ["%", "window", "self", "cpu_time_ns", "context"]
    body = [line.split() for line in lines[lines.index(header) + 1 :] if "%" in line]
    assert body == [
        ["90.9%", "100", "ns", "aten::mm"],
        ["90.9%", "100", "ns", "model"],
        ["90.9%", "100", "ns", "forward"],
        ["9.1%", "10", "ns", "model"],
        ["9.1%", "10", "ns", "forward"],
    ]
    assert main(["report", str(tmp_path), "--view", "bottom-up", "--json"]) == 0
    tree = json.loads(capsys.readouterr().out)["profiles"][0]["tree"]
    assert {k["name"]: k["excl"]["cpu_time_ns"] for k in tree["children"]} == {
        "aten::mm": 100,
        "model": 10,
    }
