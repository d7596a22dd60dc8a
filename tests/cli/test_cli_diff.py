"""``deepcontext diff A B`` and the comparison it shares with the tab's Diff:
per-step changes ranked by significance, paths only one side has, moved
lines still matched, and bad input named in one line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from dc_core.cli import main
from dc_core.model.diff import Union, compare, side_of
from dc_core.model.tree import Tree, tree_from_lists
from dc_core.store.logdir import write_profile
from dc_core.store.profile import Profile
from dc_core.tensorboard import diff as tab_diff
from dc_core.tensorboard.params import Ref
from dc_core.tensorboard.store import Index

STEPS = 4
MS = 1_000_000
LINE = "python:layer|/src/model.py:10"


def with_bounds(tree: Tree, jitter: int = 50_000) -> dict[str, list[int]]:
    """Step bounds of a window whose steps each hold ``excl / STEPS``, give or take ``jitter``."""
    per_step = [v // STEPS for v in tree.excl["cpu_time_ns"]]
    return {
        "cpu_time_ns.min": [max(v - jitter, 0) if v else 0 for v in per_step],
        "cpu_time_ns.max": [v + jitter if v else 0 for v in per_step],
    }


def profile(
    tree: Tree,
    framework: str = "torch",
    mode: str = "lightweight",
    bounds: bool = True,
    rank: int = 0,
    steps: tuple[int, int] = (2, 2 + STEPS),
) -> Profile:
    step = tree.inclusive("cpu_time_ns")[0] // STEPS
    return Profile(
        tree=tree,
        steps=steps,
        step_times_ns=[step] * STEPS,
        rank=rank,
        host="h",
        framework=framework,
        mode=mode,
        step_bounds=with_bounds(tree) if bounds else {},
    )


def model(extra_ns: int = 0, line: str = LINE, new_op: bool = False) -> Tree:
    """forward › train.py:20 train › ``line`` (4 ms/step of mm, plus ``extra_ns`` per
    step), an add beside it; a backward. ``new_op``: B's extra path, 2 ms/step."""
    mm = f"aten::mm @cpu_time_ns={STEPS * (4 * MS + extra_ns)}"
    train = ["python:train|/src/train.py:20", (line, mm), f"aten::add @cpu_time_ns={STEPS * MS}"]
    if new_op:
        train.append(f"aten::cdist @cpu_time_ns={STEPS * 2 * MS}")
    backward = f"aten::mm [backward] @cpu_time_ns={STEPS * 3 * MS}"
    return tree_from_lists(
        ("forward", tuple(train)), ("backward", ("python:train|/src/train.py:20", backward))
    )


def write(tmp_path: Path, name: str, p: Profile) -> Path:
    return write_profile(p, tmp_path / name, name)


def run_json(capsys, *args: str) -> dict:
    assert main(["diff", *map(str, args), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_planted_5ms_per_step_under_a_line_comes_first_and_significant(tmp_path, capsys):
    a = write(tmp_path, "base", profile(model()))
    b = write(tmp_path, "slow", profile(model(extra_ns=5 * MS)))
    doc = run_json(capsys, a, b, "--min-share", "0")
    first = doc["changes"][0]
    assert first["path"] == ["forward", "train.py:20 train", "model.py:10 layer", "aten::mm"]
    assert first["delta_ns"] == pytest.approx(5e6, abs=1e3) and first["significant"] is True
    assert (first["a_ns"], first["b_ns"], first["spread_ns"]) == (4 * MS, 9 * MS, 100_000)
    # Its ancestors change as much: the deepest path carries it, they are not listed again.
    assert [c["path"] for c in doc["changes"]] == [first["path"]]
    assert doc["metric"] == "cpu_time_ns" and doc["step_delta_ns"] == 5 * MS
    assert doc["a"]["mean_step_ns"] == 8 * MS and doc["b"]["step_count"] == STEPS
    assert (doc["a"]["file"], doc["b"]["rank"], doc["b"]["steps"]) == (str(a), 0, [2, 6])
    assert doc["only_a"] == doc["only_b"] == []


def test_a_path_only_in_b_is_listed_apart(tmp_path, capsys):
    doc = run_json(
        capsys,
        write(tmp_path, "a", profile(model())),
        write(tmp_path, "b", profile(model(new_op=True))),
        "--min-share",
        "0",
    )
    assert doc["only_b"] == [
        {
            "path": ["forward", "train.py:20 train", "aten::cdist"],
            "a_ns": 0,
            "b_ns": 2 * MS,
            "delta_ns": 2 * MS,
        }
    ]
    assert doc["only_a"] == [] and all(c["path"][-1] != "aten::cdist" for c in doc["changes"])
    # train.py:20 grew by the new op alone: listed, as no matched child carries its change.
    assert [(c["path"], c["delta_ns"]) for c in doc["changes"]] == [
        (["forward", "train.py:20 train"], 2 * MS)
    ]


def test_a_moved_line_is_matched_not_listed_as_only_in(tmp_path, capsys):
    a = write(tmp_path, "a", profile(model()))
    b = write(tmp_path, "b", profile(model(extra_ns=MS, line="python:layer|/src/model.py:14")))
    doc = run_json(capsys, a, b, "--min-share", "0")
    assert doc["only_a"] == doc["only_b"] == []
    (change,) = doc["changes"]
    assert change["path"][2] == "model.py:10 layer" and change["b_path"][2] == "model.py:14 layer"
    assert change["delta_ns"] == MS
    assert main(["diff", str(a), str(b), "--min-share", "0"]) == 0
    assert "model.py:10\u219214 layer" in capsys.readouterr().out


def test_moved_calls_of_one_function_pair_in_line_order():
    def tree(*calls: tuple[int, str]) -> Tree:
        return tree_from_lists(
            (
                "forward",
                *((f"python:f|/f.py:{line}", f"{op} @cpu_time_ns=1") for line, op in calls),
                "python:g|/f.py:30 @cpu_time_ns=3",
            )
        )

    # Four lines inserted above both calls of f; B's tree lists the second first.
    a, b = tree((10, "aten::mm"), (20, "aten::add")), tree((24, "aten::add"), (14, "aten::mm"))
    union = Union(side_of(profile(a, bounds=False)), side_of(profile(b, bounds=False)))
    for line in (10, 20):
        node = a.find("forward", f"f.py:{line} f")
        assert union.b_frame(node).line == line + 4 and union.children(node) == a.children(node)
    assert len(union.children(a.find("forward"))) == 3  # nothing only in one side
    result = compare(union, "cpu_time_ns")
    assert result.changes == [] and result.only_a == result.only_b == []


def test_lines_shifted_onto_each_others_numbers_pair_by_what_they_call():
    """Regression: a comment inserted above two calls moved ``logits = model(x)``
    from line 56 to 57 and the loss from 57 to 58; an exact match paired A's
    loss line with B's model line (both 57), and the model's subtree read as
    only in A and only in B."""

    def tree(model_line: int, loss_line: int, extra: int = 0) -> Tree:
        model = f"module:TinyLM @cpu_time_ns={10 + extra}"
        return tree_from_lists(
            (
                "forward",
                (
                    "python:<module>|/t.py:66",
                    (f"python:main|/t.py:{model_line}", model),
                    (f"python:main|/t.py:{loss_line}", "aten::cross_entropy @cpu_time_ns=3"),
                    "python:main|/t.py:60 @cpu_time_ns=1",
                ),
            )
        )

    a, b = tree(56, 57), tree(57, 58, extra=5)
    union = Union(side_of(profile(a, bounds=False)), side_of(profile(b, bounds=False)))
    lines = {
        a.node_frame(n).line: union.b_frame(n).line
        for n in a.children(a.find("forward", "t.py:66 <module>"))
    }
    assert lines == {56: 57, 57: 58, 60: 60}
    result = compare(union, "cpu_time_ns")
    assert result.only_a == result.only_b == []
    assert [union.label(c.node) for c in result.changes] == ["TinyLM"]
    assert [union.label(n) for n in union.path(result.changes[0].node)] == [
        "forward",
        "t.py:66 <module>",
        "t.py:56\u219257 main",
        "TinyLM",
    ]


def test_a_call_removed_without_a_shift_leaves_the_others_on_their_lines():
    def tree(*calls: tuple[int, str]) -> Tree:
        return tree_from_lists(
            ("forward", *((f"python:f|/f.py:{line}", f"{op} @cpu_time_ns=1") for line, op in calls))
        )

    a, b = (
        tree((10, "aten::mm"), (11, "aten::add"), (14, "aten::mul")),
        tree((10, "aten::mm"), (14, "aten::mul")),
    )
    union = Union(side_of(profile(a, bounds=False)), side_of(profile(b, bounds=False)))
    result = compare(union, "cpu_time_ns")
    assert [union.label(o.node) for o in result.only_a] == ["f.py:11 f"] and result.only_b == []
    kept = (a.find("forward", "f.py:10 f"), a.find("forward", "f.py:14 f"))
    assert all(union.b_frame(n) == a.node_frame(n) for n in kept)
    # One call removed, another added below: the calls that stayed keep their pairs.
    a = tree((10, "aten::mm"), (11, "aten::add"), (20, "aten::mul"))
    b = tree((10, "aten::mm"), (20, "aten::mul"), (24, "aten::div"))
    union = Union(side_of(profile(a, bounds=False)), side_of(profile(b, bounds=False)))
    result = compare(union, "cpu_time_ns")
    assert [union.label(o.node) for o in result.only_a] == ["f.py:11 f"]
    assert [union.label(o.node) for o in result.only_b] == ["f.py:24 f"]


def test_a_line_inserted_between_calls_moves_only_the_calls_below():
    def tree(*calls: tuple[int, str]) -> Tree:
        return tree_from_lists(
            ("forward", *((f"python:forward|/m.py:{line}", f"module:{mod}") for line, mod in calls))
        )

    a = tree((24, "norm1 @cpu_time_ns=1"), (25, "attn @cpu_time_ns=2"), (26, "mlp @cpu_time_ns=3"))
    b = tree((24, "norm1 @cpu_time_ns=1"), (26, "attn @cpu_time_ns=2"), (27, "mlp @cpu_time_ns=3"))
    union = Union(side_of(profile(a, bounds=False)), side_of(profile(b, bounds=False)))
    pairs = {a.node_frame(n).line: union.b_frame(n).line for n in a.children(a.find("forward"))}
    assert pairs == {24: 24, 25: 26, 26: 27}
    assert compare(union, "cpu_time_ns").changes == []


def test_spread_unknown_without_step_bounds(tmp_path, capsys):
    a = write(tmp_path, "a", profile(model(), bounds=False))
    b = write(tmp_path, "b", profile(model(extra_ns=5 * MS), bounds=False))
    first = run_json(capsys, a, b)["changes"][0]
    assert (first["spread_ns"], first["significant"], first["delta_ns"]) == (None, False, 5 * MS)
    assert main(["diff", str(a), str(b)]) == 0
    assert (
        "spread unknown (?): A and B have no per-step bounds of cpu_time_ns"
        in capsys.readouterr().out
    )


def test_min_share_and_top_limit_what_is_listed(tmp_path, capsys):
    a = write(tmp_path, "a", profile(model()))
    b = write(tmp_path, "b", profile(model(extra_ns=5 * MS, new_op=True)))
    everything = run_json(capsys, a, b, "--min-share", "0")
    assert len(everything["changes"]) == 2 and everything["counts"] == {
        "changes": 2,
        "only_a": 0,
        "only_b": 1,
    }
    assert run_json(capsys, a, b, "--top", "1")["changes"] == everything["changes"][:1]
    # B's step is 15 ms: a 0.2 share lists only changes of 3 ms or more.
    high = run_json(capsys, a, b, "--min-share", "0.2")
    assert (
        [c["delta_ns"] for c in high["changes"]] == [5 * MS]
        and high["only_b"] == []
        and high["min_ns"] == 3 * MS
    )


@pytest.mark.parametrize(
    "field, values, words",
    [
        ("framework", ("torch", "jax"), ("a torch profile", "a jax one")),
        ("mode", ("lightweight", "comprehensive"), ("lightweight mode", "comprehensive mode")),
    ],
)
def test_profiles_of_different_frameworks_or_modes_are_refused(
    tmp_path, capsys, field, values, words
):
    a = write(tmp_path, "a", profile(model(), **{field: values[0]}))
    b = write(tmp_path, "b", profile(model(), **{field: values[1]}))
    assert main(["diff", str(a), str(b)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert (
        str(a) in captured.err and str(b) in captured.err and all(w in captured.err for w in words)
    )


def test_a_metric_one_side_lacks_is_refused_naming_both_files(tmp_path, capsys):
    device = model()
    device.add(device.find("forward", "train.py:20 train", "aten::add"), "device_time_ns", 7)
    a, b = write(tmp_path, "a", profile(model())), write(tmp_path, "b", profile(device))
    assert run_json(capsys, a, b)["metric"] == "cpu_time_ns"  # device time only where both have it
    assert main(["diff", str(a), str(b), "--metric", "device_time_ns"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"A ({a}) has no device_time_ns values" in err and str(b) in err
    doc = run_json(capsys, b, write(tmp_path, "c", profile(device)))
    assert doc["metric"] == "device_time_ns" and doc["changes"] == [] and doc["step_delta_ns"] == 0


def test_a_missing_or_corrupt_file_is_named(tmp_path, capsys):
    good = write(tmp_path, "a", profile(model()))
    corrupt = tmp_path / "steps-0-3.pb"
    corrupt.write_bytes(b"\x08\x01\x12\xff\xff garbage")
    assert main(["diff", str(good), str(corrupt)]) == 2
    err = capsys.readouterr().err
    assert str(corrupt) in err and "corrupt profile" in err and err.count("\n") == 1
    missing = tmp_path / "nope.pb"
    assert main(["diff", str(missing), str(good)]) == 2
    assert f"A: {missing}: no such file or directory" in capsys.readouterr().err


def test_a_directory_comes_down_to_one_profile_and_its_other_files_may_be_corrupt(tmp_path, capsys):
    logdir = tmp_path / "logs"
    for rank, extra in ((0, 0), (1, 5 * MS)):
        write_profile(profile(model(extra_ns=extra), rank=rank), logdir, "run")
    broken = write_profile(profile(model(), rank=2), logdir, "run")
    broken.write_bytes(b"not a profile")
    assert main(["diff", str(logdir), str(logdir)]) == 2
    err = capsys.readouterr().err
    assert "holds 3 profiles" in err and "rank 1 steps 2\u20135 (--rank 1 --steps 2)" in err
    # two ranks of one window
    doc = run_json(capsys, logdir, logdir, "--a-rank", "0", "--b-rank", "1")
    assert (doc["a"]["rank"], doc["b"]["rank"], doc["changes"][0]["delta_ns"]) == (0, 1, 5 * MS)
    assert doc["a"]["run"] == "run"
    assert main(["diff", str(logdir), str(logdir), "--rank", "0", "--steps", "9"]) == 2
    assert "no window starting at step 9" in capsys.readouterr().err
    assert main(["diff", str(logdir), str(logdir), "--rank", "0", "--b-rank", "2"]) == 2
    assert str(broken) in capsys.readouterr().err


def test_the_tab_and_the_command_agree_on_a_nodes_change(tmp_path, capsys):
    pa, pb = profile(model()), profile(model(extra_ns=5 * MS))
    doc = run_json(capsys, write(tmp_path, "a", pa), write(tmp_path, "b", pb), "--min-share", "0")
    union = tab_diff.build_union(Index(pa, Ref("a", 0, pa.steps)), Index(pb, Ref("b", 0, pb.steps)))
    node = pa.tree.find("forward", "train.py:20 train", "model.py:10 layer")
    (row,) = [
        r for r in tab_diff.diff_children(union, [node], "cpu_time_ns")["children"][str(node)]
    ]
    first = doc["changes"][0]
    assert row["label"] == first["path"][-1]
    assert (row["delta_ns"], row["spread_ns"], row["significant"]) == (
        first["delta_ns"],
        first["spread_ns"],
        True,
    )
    # the tab's a, b: window totals
    assert (row["a"], row["b"]) == (
        STEPS * first["a_ns"],
        STEPS * first["b_ns"],
    )


def test_the_tab_matches_a_moved_line_too():
    pa, pb = profile(model()), profile(model(line="python:layer|/src/model.py:14"))
    union = tab_diff.build_union(Index(pa, Ref("a", 0, pa.steps)), Index(pb, Ref("b", 0, pb.steps)))
    train = pa.tree.find("forward", "train.py:20 train")
    rows = tab_diff.diff_children(union, [train], "cpu_time_ns")["children"][str(train)]
    assert [(r["label"], r.get("b_label"), r["in_a"], r["in_b"]) for r in rows] == [
        ("model.py:10 layer", "model.py:14 layer", True, True),
        ("aten::add", None, True, True),
    ]


def test_the_help_says_how_significance_and_selection_work(capsys):
    with pytest.raises(SystemExit):
        main(["diff", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for text in (
        "significant when |delta| exceeds",
        "--a-rank",
        "--steps S",
        "only one side",
        "moved",
    ):
        assert text in out


def test_a_real_run_with_20ms_planted_under_a_line(tmp_path, capsys):
    """dc_torch runs: B spins 20 ms per step inside one line. (20 ms, not the
    synthetic test's 5: a stall of one step on a loaded machine widens the
    line's spread by itself, and the plant must stay above it.)"""
    torch = pytest.importorskip("torch")
    import dc_torch
    from dc_core.record.config import StepRange

    def spin(x, seconds):
        end = time.perf_counter() + seconds
        x = x + 1
        while time.perf_counter() < end:  # no operator: the gap is the calling line's
            pass
        return x * 2

    def train(logdir: Path, extra: float) -> Path:
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(128, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128)
        )
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        x = torch.randn(32, 128)
        with dc_torch.profile(logdir=str(logdir), steps=StepRange(start=2, count=4)) as prof:
            for _ in range(7):
                y = spin(model(x), extra)  # the planted line
                loss = y.sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
                prof.step()
        (path,) = prof.written
        return path

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, b = train(tmp_path / "a", 0.0), train(tmp_path / "b", 0.020)
    finally:
        torch.set_num_threads(threads)
    doc = run_json(capsys, a, b)
    first = doc["changes"][0]
    where, _, function = first["path"][-1].partition(" ")
    assert where.startswith("test_cli_diff.py:") and function.endswith("<locals>.train")
    line = int(where.rpartition(":")[2])
    assert Path(__file__).read_text().splitlines()[line - 1].strip().endswith("# the planted line")
    # at least the 20 ms the spin waits for; above it, what a loaded host slowed the rest of B's line by
    # (23.4 ms seen with two suites and a busy loop beside it)
    assert 18e6 <= first["delta_ns"] <= 28e6 and first["significant"] is True
    assert doc["a"]["framework"] == "torch" and doc["only_a"] == [] and doc["step_delta_ns"] > 15e6


def test_the_running_step_delta_leaves_the_hosts_wait_out(tmp_path, capsys):
    from dc_core.model.tree import tree_from_lists
    from dc_core.store.logdir import write_profile
    from dc_core.store.profile import Profile

    def window(times, waits, run):
        tree = tree_from_lists(("forward", f"aten::mm @cpu_time_ns={sum(times)}"))
        return write_profile(
            Profile(tree=tree, steps=(0, 3), step_times_ns=times, step_wait_ns=waits), tmp_path, run
        )

    a = window([10_000_000] * 3, [0] * 3, "a")
    b = window([12_000_000] * 3, [3_000_000] * 3, "b")  # 2 ms slower, 3 ms of it waiting for a CPU
    assert main(["diff", str(a), str(b), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["step_delta_ns"] == 2_000_000 and doc["step_delta_running_ns"] == -1_000_000
    assert doc["a"]["mean_running_ns"] == 10_000_000 and doc["b"]["mean_running_ns"] == 9_000_000
    no_waits = window([12_000_000] * 3, [], "c")
    assert main(["diff", str(a), str(no_waits), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["step_delta_running_ns"] is None
