"""DDP's wait for its buckets when backward ends, as the analyzer reads it:
the finding at the module whose gradients came last, its saving, and the
bucket cap its advice names from the settings the run had (the profile's
``ddp`` entry)."""

from __future__ import annotations

import pytest

from dc_core.analyzer import analyze
from dc_core.model.comm import DDP_ENV, END_OF_BACKWARD, by_module, ddp_entry, ddp_settings
from dc_core.model.tree import Frame
from tests.analyzer.helpers import MS, line, only, profile, rules

TRAIN = line("train", "train.py:20")
STEPS = 3


def ddp_step(wait: int):
    """DDP over 3 steps: two Linears, a bucket each, launched in backward under
    the module whose gradients completed it; the reducer waits ``wait`` ns a
    step for them when backward ends, after ``0``'s gradients."""
    reduce_ = (
        f"c10d::allreduce_ [backward] @cpu_time_ns={STEPS * 100_000},count={STEPS},"
        f"comm_time_ns={STEPS * 8 * MS},exposed_comm_ns={STEPS * 100_000},comm_bytes={STEPS << 20}"
    )
    p = profile(
        (
            "forward",
            (
                TRAIN,
                ("module:0", f"aten::addmm @cpu_time_ns={30 * MS},count={STEPS}"),
                ("module:1", f"aten::addmm @cpu_time_ns={30 * MS},count={STEPS}"),
            ),
        ),
        (
            "backward",
            (
                TRAIN,
                (
                    "module:1",
                    f"aten::addmm [backward] @cpu_time_ns={60 * MS},count={STEPS}",
                    reduce_,
                ),
                (
                    "module:0",
                    f"aten::addmm [backward] @cpu_time_ns={60 * MS},count={STEPS}",
                    reduce_,
                    f"operator:ended [backward] @cpu_time_ns={STEPS * wait},count={STEPS},"
                    f"exposed_comm_ns={STEPS * wait}",
                ),
            ),
        ),
        steps=(1, 1 + STEPS),
        env={"torch": "2.13.0"},
    )
    (node,) = p.tree.find_all(lambda f: f.name == "ended")
    frame = p.tree.node_frame(node)  # the reducer's wait, named as the capture names it
    p.tree.frames[p.tree.frame[node]] = Frame(
        frame.kind, "c10d::allreduce_", detail=END_OF_BACKWARD, backward=True
    )
    return p


def test_ddps_wait_when_backward_ends_is_found_at_the_last_module_with_its_saving():
    p = ddp_step(wait=30 * MS)
    rows = {row.name: row for row in by_module(p.tree)}
    assert rows["0"].exposed_ns == STEPS * (30 * MS + 100_000) and rows["0"].calls == STEPS
    f = only(analyze(p), "exposed_communication")
    assert f["path"][-1] == "0" and f["evidence"]["exposed_all_reduce_ns"] == 30 * MS
    assert f["gain_ns"] == 30 * MS and f["evidence"]["buckets"] == 2
    assert f["evidence"]["all_reduce_bytes"] == 2 << 20
    assert f["severity"] == "warning" and "bucket_cap_mb" in f["suggestion"]
    assert "no_sync()" in f["suggestion"], f["suggestion"]
    assert "waits 30.0 ms per step" in f["message"] and "after `0`'s gradients" in f["message"]


@pytest.mark.parametrize(
    ("settings", "advised"),
    [
        # its 2 MiB of gradients a step in 1 bucket: a quarter of them
        (
            {"bucket_cap_mb": 100, "buckets": 1},
            "bucket_cap_mb=1)`, now 100, its 2.0 MiB of gradients in 1 bucket",
        ),
        # at most half the cap it had
        ({"bucket_cap_mb": 1.5}, "bucket_cap_mb=1)`, now 1.5"),
        ({"bucket_cap_mb": 1, "buckets": 3}, "`bucket_cap_mb` is 1 already, as small as pays"),
    ],
)
def test_ddps_advice_names_a_bucket_cap_from_the_settings_the_run_had(settings, advised):
    p = ddp_step(wait=30 * MS)
    p.env[DDP_ENV] = ddp_entry(settings)
    f = only(analyze(p), "exposed_communication")
    assert advised in f["suggestion"], f["suggestion"]


def test_the_ddp_entry_reads_back_as_written():
    entry = ddp_entry(
        {
            "comm_hook": "fp16_compress_hook",
            "bucket_cap_mb": "25",
            "buckets": 4,
            "static_graph": False,
        }
    )
    assert entry == "bucket_cap_mb=25, buckets=4, static_graph=False, comm_hook=fp16_compress_hook"
    assert ddp_settings({DDP_ENV: entry}) == {
        "bucket_cap_mb": "25",
        "buckets": "4",
        "static_graph": "False",
        "comm_hook": "fp16_compress_hook",
    }
    assert ddp_settings({}) == {}
    # without an entry (an older profile) the advice names the argument and its default
    f = only(analyze(ddp_step(wait=30 * MS)), "exposed_communication")
    assert "`DistributedDataParallel(..., bucket_cap_mb=...)`, 25 by default" in f["suggestion"]


def test_a_short_wait_when_backward_ends_is_no_finding():
    # 1 ms of a ~200 ms step: under exposed_communication.min_share
    assert "exposed_communication" not in rules(analyze(ddp_step(wait=1 * MS)))
