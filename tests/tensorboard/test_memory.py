"""The Memory view's routes: the tree by bytes live at the peak with each
node's split by category, the device's peak, header line and timeline,
another device, and what a window without memory says."""

from __future__ import annotations

from pathlib import Path

import pytest

from dc_core.cli import main
from dc_core.model.kinds import MEMORY_CATEGORIES
from dc_core.store.logdir import write_profile
from dc_core.tensorboard import memory
from dc_core.tensorboard.params import Ref
from dc_core.tensorboard.store import ProfileStore
from tests.tensorboard.conftest import MIB, Api, make_profile, memory_profile

M = {"run": "mem", "rank": 0, "window": "5-7"}
LINE = (
    "peak 41.0 MiB at step 6, optimizer, in aten::add_ \u2014 parameter 8.0 MiB, gradient "
    "8.0 MiB, optimizer_state 16.0 MiB, saved_for_backward 8.0 MiB, temporary 1.0 MiB"
)

CPU_LINE = "peak 1.0 MiB at step 5, dataloader, in data.py:9 __next__ \u2014 input 1.0 MiB"


@pytest.fixture
def mem_api(api: Api, logdir: Path, src: Path) -> Api:
    write_profile(memory_profile(src), logdir, "mem")
    return api


def split(**mib: int) -> dict[str, int]:
    """A row's split: the categories named, in MiB; the others 0."""
    return {c: mib.get(c, 0) * MIB for c in MEMORY_CATEGORIES}


def table(rows) -> list[tuple[str, int, int]]:
    """(label, bytes live at the peak in MiB, its own in MiB) per row."""
    return [(r["label"], r["bytes"] / MIB, r["self"] / MIB) for r in rows]


def test_memory_opens_the_tree_along_the_most_bytes(mem_api: Api):
    body = mem_api.json("/memory", **M)
    assert body["collected"] and body["devices"] == ["cuda:0", "cpu"]
    assert (body["device"], body["metric"]) == ("cuda:0", "peak_live_bytes")
    assert body["categories"] == list(MEMORY_CATEGORIES)
    root = body["root"]
    assert (root["label"], root["bytes"], root["kids"]) == ("steps 5\u20136", 41 * MIB, 3)
    assert root["split"] == split(
        parameter=8, gradient=8, optimizer_state=16, saved_for_backward=8, temporary=1
    )
    # the dataloader holds nothing on this device: no row; the most bytes first
    top = body["children"]["0"]
    assert table(top) == [("optimizer", 17, 0), ("forward", 16, 0), ("backward", 8, 0)]
    assert top[1]["split"] == split(parameter=8, saved_for_backward=8)
    # the heaviest path, while a child holds 5% of the peak: optimizer's step (1 MiB of 41 is less)
    labels = {r["id"]: r["label"] for rows in body["children"].values() for r in rows}
    chain = [labels.get(n, "root") for n in body["chain"]]
    assert chain == ["root", "optimizer", "optim.py:1 step"]
    step = body["children"][str(top[0]["id"])]
    assert table(step) == [("optim.py:1 step", 17, 16)]
    assert step[0]["split"] == split(optimizer_state=16, temporary=1) and step[0]["kids"] == 1


def test_children_leave_out_contexts_holding_nothing(mem_api: Api):
    top = mem_api.json("/memory", **M)["children"]["0"]
    forward = next(r for r in top if r["label"] == "forward")
    body = mem_api.json("/memory/children", **M, node=forward["id"])
    encoder = body["children"][str(forward["id"])]
    assert table(encoder) == [("encoder", 16, 8)]  # the head holds no bytes
    assert encoder[0]["kids"] == 1 and body["total"] == 41 * MIB
    line = mem_api.json("/memory/children", **M, node=encoder[0]["id"])["children"]
    (row,) = line[str(encoder[0]["id"])]
    ops = mem_api.json("/memory/children", **M, node=row["id"])["children"][str(row["id"])]
    assert table(ops) == [("aten::mm", 6, 6), ("aten::relu", 2, 2)]
    assert [o["split"] for o in ops] == [split(saved_for_backward=6), split(saved_for_backward=2)]
    by_name = mem_api.json("/memory/children", **M, node=row["id"], sort="name")
    assert [r["label"] for r in by_name["children"][str(row["id"])]] == ["aten::mm", "aten::relu"]
    # ordered by one category's bytes: the gradients' holder first, then the others in node order
    by_grad = mem_api.json("/memory/children", **M, node=0, sort="gradient")["children"]["0"]
    assert [r["label"] for r in by_grad] == ["backward", "forward", "optimizer"]


def test_the_header_is_the_reports_line_and_the_peak_is_located(
    mem_api: Api, logdir: Path, capsys, monkeypatch
):
    body = mem_api.json("/memory", **M)
    assert body["line"] == LINE
    monkeypatch.setenv("COLUMNS", "240")
    assert main(["report", str(logdir / "mem")]) == 0
    said = [x for x in capsys.readouterr().out.splitlines() if x.startswith("memory (cuda:0)")]
    assert said == [f"memory (cuda:0): {LINE}"]  # one implementation, the same bytes
    peak = body["peak"]
    assert (peak["bytes"], peak["t_ns"], peak["step"], peak["phase"]) == (
        41 * MIB,
        15_000_000,
        6,
        "optimizer",
    )
    assert [p["label"] for p in peak["path"]] == ["optimizer", "optim.py:1 step", "aten::add_"]
    assert peak["path"][-1]["id"] == peak["node"] and (peak["frame"], peak["module"]) == (
        "aten::add_",
        "",
    )
    assert body["by_category"] == split(
        parameter=8, gradient=8, optimizer_state=16, saved_for_backward=8, temporary=1
    )
    assert (
        body["held_at_peak_bytes"],
        body["allocator_peak_bytes"],
        body["max_reserved_bytes"],
    ) == (24 * MIB, 41 * MIB, 64 * MIB)
    assert body["timeline"] == {
        "t_ns": [0, 5_000_000, 10_000_000, 15_000_000, 20_000_000],
        "bytes": [24 * MIB, 32 * MIB, 36 * MIB, 41 * MIB, 30 * MIB],
    }
    assert body["duration_ns"] == 25_000_000 and body["missing"] == ""


def test_another_device_has_its_own_tree_and_peak(mem_api: Api):
    body = mem_api.json("/memory", **M, device="cpu")
    assert (body["device"], body["metric"]) == ("cpu", "peak_live_bytes@cpu")
    assert body["line"] == CPU_LINE
    assert table(body["children"]["0"]) == [("dataloader", 1, 0)]
    assert body["children"]["0"][0]["split"] == split(input=1)
    assert body["timeline"]["bytes"] == [0, MIB]
    loader = body["children"]["0"][0]["id"]
    kids = mem_api.json("/memory/children", **M, device="cpu", node=loader)["children"]
    assert table(kids[str(loader)]) == [("data.py:9 __next__", 1, 1)]


def test_unknown_devices_and_sorts_are_refused(mem_api: Api):
    missing = mem_api.json("/memory", status=404, **M, device="cuda:7")["error"]
    assert "cuda:7" in missing and "cuda:0, cpu" in missing
    assert mem_api.json("/memory/children", status=404, **M, device="tpu", node=0)["error"]
    assert "sort" in mem_api.json("/memory", status=400, **M, sort="bytes; drop")["error"]
    mem_api.json("/memory/children", status=400, **M, node="99999")
    mem_api.json("/memory", status=400, **M, device="cpu\x01")


def test_a_window_without_memory_says_how_to_collect_it(api: Api):
    body = api.json("/memory", run="run-a", rank=0, window="5-8")
    assert not body["collected"] and body["devices"] == []
    assert body["message"] == (
        "memory was not collected: run with memory=True (or deepcontext run --memory)"
    )
    assert body["message"] == memory.NOT_COLLECTED and body["missing"] == ""
    # its tree's rows, asked for anyway, are none
    children = api.json("/memory/children", run="run-a", rank=0, window="5-8", node=0)
    assert children == {"children": {"0": []}, "more": {}, "total": 0}


def test_memory_asked_for_and_missing_says_why(api: Api, logdir: Path, src: Path):
    lost = make_profile(src, 0, (20, 22))
    lost.memory_missing = ["alloc_bytes", "peak_live_bytes"]
    lost.memory_note = "memory is read on the native capture path only (capture=python)"
    write_profile(lost, logdir, "lost")
    body = api.json("/memory", run="lost", rank=0, window="20-22")
    assert not body["collected"]
    assert body["message"] == (
        "memory was asked for but not collected: alloc_bytes, peak_live_bytes "
        "(memory is read on the native capture path only (capture=python))"
    )
    # a window with memory that lacks some of it says so beside the view, as the report does
    partial = memory_profile(src, (30, 32))
    partial.memory_missing = ["peak_live_bytes.saved_for_backward"]
    partial.memory_note = "no saved-tensor hooks"
    write_profile(partial, logdir, "partial")
    body = api.json("/memory", run="partial", rank=0, window="30-32")
    assert body["collected"] and body["memory_missing"] == ["peak_live_bytes.saved_for_backward"]
    said = "not collected: peak_live_bytes.saved_for_backward (no saved-tensor hooks)"
    assert body["missing"] == said


def test_children_past_the_limit_are_counted(logdir: Path, src: Path):
    write_profile(memory_profile(src), logdir, "mem")
    index = ProfileStore(logdir, listing_ttl_s=0).index(Ref("mem", 0, (5, 7)))
    device = memory.device_of(index)
    body = memory.memory_children(index, device, [0], limit=2)
    assert [r["label"] for r in body["children"]["0"]] == ["optimizer", "forward"]
    assert body["more"] == {"0": 1}
    assert memory.device_of(index, "cpu").device == "cpu"
