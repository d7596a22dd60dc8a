"""Communication by module (`dc_core.model.comm`) and the rule over it,
``exposed_communication``, on literal trees with known sums."""

from __future__ import annotations

import dataclasses

import pytest

from dc_core.analyzer import analyze
from dc_core.analyzer.base import Window
from dc_core.analyzer.thresholds import Thresholds
from dc_core.model.comm import (
    FSDP1_ENV,
    WAITED,
    ZERO_ENV,
    by_module,
    fsdp1_entry,
    fsdp1_settings,
    operation,
    zero_entry,
    zero_settings,
)
from dc_core.model.tree import Frame
from tests.analyzer.helpers import MS, line, only, profile, rules

TRAIN = line("train", "train.py:20")
GATHER, REDUCE = "c10d::_allgather_base_", "c10d::_reduce_scatter_base_"
STEPS = 3


def gather(ns: int, exposed: int, moved: int, backward: bool = False) -> str:
    flag = " [backward]" if backward else ""
    return (
        f"{GATHER}{flag} @cpu_time_ns={ns},count={STEPS},comm_time_ns={ns},"
        f"exposed_comm_ns={exposed},comm_bytes={moved}"
    )


def fsdp_step(
    big_exposed: int, compute: int = 30 * MS, runtime: str = "FSDP::", beside: tuple = ()
):
    """Two FSDP blocks over 3 steps: ``blocks.1`` is big and its gathers are
    ``big_exposed`` exposed in forward and again in backward; its gradients'
    reduction runs inside FSDP's autograd function, placed under a submodule.
    ``runtime``: what its sharding frames' names begin with, the runtime's
    (``ZeRO::``; FSDP1's records' ``FullyShardedDataParallel._``). ``beside``:
    phases after the step's (``other``)."""
    big, small = "module:blocks.1", "module:blocks.0"
    return profile(
        (
            "forward",
            (
                TRAIN,
                (
                    small,
                    (f"sharding:{runtime}pre_forward", gather(MS, MS, 3 * 1024)),
                    f"aten::addmm @cpu_time_ns={compute},count={STEPS}",
                ),
                (
                    big,
                    (
                        f"sharding:{runtime}pre_forward @cpu_time_ns=" + str(2 * MS),
                        gather(big_exposed, big_exposed, 3 * 64 << 20),
                    ),
                    ("module:blocks.1.fc", f"aten::addmm @cpu_time_ns={compute},count={STEPS}"),
                ),
            ),
        ),
        (
            "backward",
            (
                TRAIN,
                (
                    big,
                    (
                        f"sharding:{runtime}pre_backward [backward]",
                        gather(big_exposed, big_exposed, 3 * 64 << 20, backward=True),
                    ),
                    (
                        "module:blocks.1.fc",
                        f"aten::addmm [backward] @cpu_time_ns={2 * compute},count={STEPS}",
                        (
                            f"operator:RegisterPostBackwardFunction [backward] @cpu_time_ns={5 * MS},"
                            f"count={STEPS}",
                            f"{REDUCE} [backward] @cpu_time_ns={4 * MS},count={STEPS},"
                            f"comm_time_ns={4 * MS},exposed_comm_ns={4 * MS},"
                            f"comm_bytes={3 * 64 << 20}",
                        ),
                    ),
                ),
            ),
        ),
        *beside,
        steps=(1, 1 + STEPS),
        env={"torch": "2.13.0"},
    )


def test_each_modules_communication_compute_and_runtime_add_up():
    p = fsdp_step(big_exposed=60 * MS)
    rows = {r.module.name: r for r in by_module(p.tree)}
    assert list(rows) == ["blocks.1", "blocks.0"]  # most exposed first
    big = rows["blocks.1"]
    # its reduce-scatter ran under a submodule, inside FSDP's autograd function:
    # still the sharded block's
    assert big.calls == 3 * STEPS
    assert big.exposed_by == {
        "forward all-gather": 60 * MS,
        "backward all-gather": 60 * MS,
        "backward reduce-scatter": 4 * MS,
    }
    assert big.bytes_by["backward reduce-scatter"] == 3 * 64 << 20
    assert big.comm_ns == big.exposed_ns == 124 * MS
    # compute: the submodule's operators (forward and backward), not FSDP's
    # frame, nor the autograd function that issues the reduction
    assert big.compute_ns == 90 * MS
    # the runtime: the pre-forward's own 2 ms and the autograd function's 5 ms
    assert big.runtime_ns == 7 * MS
    host = sum(p.tree.inclusive("cpu_time_ns")[n] for n in big.nodes)
    assert big.compute_ns + big.runtime_ns + big.exposed_ns == host
    assert [p.tree.node_frame(n).backward for n in big.nodes] == [False, False]
    assert [p.tree.path_frames(n)[0].name for n in big.nodes] == ["forward", "backward"]


def test_a_backends_work_beside_the_step_is_no_modules_time():
    """gloo's worker copies a gathered tensor into place on a thread of its
    own: its operators are in the ``other`` phase, under a mirror of the
    gather's context. The module's row is what the step's thread spent."""
    backend = (
        "other",
        (
            TRAIN,
            (
                "module:blocks.1",
                (
                    "sharding:FSDP::pre_forward",
                    (GATHER, f"aten::copy_ @cpu_time_ns={50 * MS},count=6"),
                ),
            ),
        ),
    )

    def sums(p) -> dict:
        return {
            r.name: (r.compute_ns, r.runtime_ns, r.exposed_ns, r.comm_ns, r.bytes, r.calls)
            for r in by_module(p.tree)
        }

    p = fsdp_step(big_exposed=60 * MS, beside=(backend,))
    assert p.tree.inclusive("cpu_time_ns")[p.tree.find("other")] == 50 * MS
    assert sums(p) == sums(fsdp_step(big_exposed=60 * MS))
    (big,) = [r for r in by_module(p.tree) if r.name == "blocks.1"]
    assert [p.tree.path_frames(n)[0].name for n in big.nodes] == ["forward", "backward"]


def test_ddps_reducer_is_runtime_not_the_modules_compute():
    """DDP's reducer copies each gradient into its bucket and divides the
    bucket by the world size, under the module whose gradient it is: DDP's
    work, like a sharding frame's, not the layer's backward."""
    layer = "module:module.0"
    p = profile(
        ("forward", (TRAIN, (layer, f"aten::addmm @cpu_time_ns={10 * MS},count={STEPS}"))),
        (
            "backward",
            (
                TRAIN,
                (
                    layer,
                    f"aten::addmm [backward] @cpu_time_ns={20 * MS},count={STEPS}",
                    f"torch::distributed::reducer::copy_ @cpu_time_ns={2 * MS},count={STEPS}",
                    f"torch::distributed::reducer::mul_out @cpu_time_ns={3 * MS},count={STEPS}",
                    f"c10d::allreduce_ [backward] @cpu_time_ns={MS},count={STEPS},"
                    f"comm_time_ns={4 * MS},exposed_comm_ns={MS},comm_bytes=4096",
                ),
            ),
        ),
        steps=(1, 1 + STEPS),
    )
    (row,) = by_module(p.tree)
    assert (row.compute_ns, row.runtime_ns, row.exposed_ns) == (30 * MS, 5 * MS, MS)
    host = sum(p.tree.inclusive("cpu_time_ns")[n] for n in row.nodes)
    assert row.compute_ns + row.runtime_ns + row.exposed_ns == host


def test_operations_by_name():
    assert operation("c10d::_allgather_base_") == "all-gather"
    assert operation("c10d::reduce_scatter_tensor_coalesced_") == "reduce-scatter"
    assert operation("c10d::allreduce_") == "all-reduce"
    assert operation("c10d::broadcast_") == "other"


def test_a_module_waiting_for_its_all_gathers_is_found_with_the_saving_and_the_fix():
    p = fsdp_step(big_exposed=60 * MS)
    f = only(analyze(p), "exposed_communication")
    assert f["severity"] == "warning"
    assert f["path"][-1] == "blocks.1"
    # both gathers, per step, exposed: the reduce-scatter is said, not counted
    assert f["gain_ns"] == 2 * 60 * MS / STEPS
    assert f["evidence"]["forward_ns"] == f["evidence"]["backward_ns"] == 20 * MS
    assert f["evidence"]["all_gather_bytes"] == 2 * 64 << 20
    assert "for its gradients' reduce-scatters" in f["message"]
    advice = f["suggestion"]
    assert "set_modules_to_forward_prefetch([blocks.1])" in advice
    assert "reshard_after_forward=False" in advice and "64.0 MiB more held" in advice
    # not the model's own operator: FSDP's autograd function is no hotspot
    assert all("RegisterPostBackwardFunction" not in f["message"] for f in analyze(p))


def test_on_a_loaded_host_the_saving_is_the_whole_wait():
    """The step's thread waited for a CPU 40% of the window: a compute
    finding's saving loses that share, an exposed gather's keeps its whole
    wait: the thread was blocked on the work, and hiding it takes all of it
    off the step, however long the load made the transfer."""
    p = fsdp_step(big_exposed=60 * MS)
    loaded = dataclasses.replace(p, step_wait_ns=[t * 2 // 5 for t in p.step_times_ns])
    f = only(analyze(loaded), "exposed_communication")
    assert f["gain_ns"] == 2 * 60 * MS / STEPS and "waited for a CPU" not in f["gain_basis"]
    window = Window(loaded, Thresholds())
    assert window.running_share == pytest.approx(0.6)
    compute = {"rule": "python_overhead", "gain_ns": 10 * MS, "gain_basis": "its Python"}
    window.on_this_host([compute])
    assert compute["gain_ns"] == 6 * MS
    assert (
        compute["gain_basis"]
        == "its Python; less the 40.0% of the window the step waited for a CPU"
    )


def test_on_gloo_the_advice_says_prefetches_must_be_asynchronous():
    p = fsdp_step(big_exposed=60 * MS)
    p.env = {"torch": "2.13.0"}  # no cuda: a CPU run
    advice = only(analyze(p), "exposed_communication")["suggestion"]
    assert "_set_unshard_async_op(True)" in advice
    assert "reduce-scatter synchronously" in advice


def test_under_fsdp1_the_advice_is_the_wrappers_settings():
    p = fsdp_step(big_exposed=60 * MS, runtime="FullyShardedDataParallel._")
    assert [r.sharded_by for r in by_module(p.tree)] == ["FullyShardedDataParallel"] * 2
    p.env = {"torch": "2.13.0", "cuda": "12.4"}
    f = only(analyze(p), "exposed_communication")
    assert f["path"][-1] == "blocks.1" and f["gain_ns"] == 2 * 60 * MS / STEPS
    advice = f["suggestion"]
    assert "`FullyShardedDataParallel(..., forward_prefetch=True)`" in advice
    assert "`sharding_strategy=ShardingStrategy.SHARD_GRAD_OP`" in advice
    assert "64.0 MiB more held per unit" in advice
    assert "`backward_prefetch=BackwardPrefetch.BACKWARD_PRE`" in advice
    assert "fully_shard" not in advice and "set_modules_to" not in advice
    # on CPU a prefetch hides nothing: only the settings that spare gathers,
    # and the saving is the backward's unshard, which SHARD_GRAD_OP spares
    p.env = {"torch": "2.13.0"}
    f = only(analyze(p), "exposed_communication")
    advice = f["suggestion"]
    assert "fewer gathers are what saves" in advice and "SHARD_GRAD_OP" in advice
    assert "forward_prefetch" not in advice and "backward_prefetch" not in advice
    assert f["gain_ns"] == 60 * MS / STEPS
    assert f["gain_basis"].startswith("blocks.1's unshards in backward per step")


def test_under_fsdp1_the_advice_follows_the_settings_the_run_had():
    p = fsdp_step(big_exposed=60 * MS, runtime="FullyShardedDataParallel._")
    ran = {"sharding_strategy": "FULL_SHARD", "forward_prefetch": True}
    p.env = {"torch": "2.13.0", "cuda": "12.4"}

    def advice(**settings: object) -> str:
        p.env[FSDP1_ENV] = fsdp1_entry({**ran, **settings})
        return only(analyze(p), "exposed_communication")["suggestion"]

    # a prefetch already on is not advised again: the unit before is too short
    on = advice(backward_prefetch="BACKWARD_PRE")
    assert "forward prefetch is on and the step still waits for `blocks.1`'s gather" in on
    assert "forward_prefetch=True)`" not in on and "BackwardPrefetch" not in on
    assert (
        "(`sharding_strategy=ShardingStrategy.SHARD_GRAD_OP`, now `FULL_SHARD`; no backward "
        "all-gather, 64.0 MiB more held per unit until its backward)" in on
    )
    # off, each is advised with its value in the run
    off = advice(forward_prefetch=False, backward_prefetch=None)
    assert "(`FullyShardedDataParallel(..., forward_prefetch=True)`, now `False`)" in off
    assert "(`backward_prefetch=BackwardPrefetch.BACKWARD_PRE`, now `None`)" in off
    # hybrid sharding keeps its parameters from forward to backward in its ZeRO-2 form
    hybrid = advice(sharding_strategy="HYBRID_SHARD")
    assert "`sharding_strategy=ShardingStrategy._HYBRID_SHARD_ZERO2`" in hybrid
    assert "SHARD_GRAD_OP" not in hybrid


def test_the_fsdp1_entry_reads_back_as_written():
    entry = fsdp1_entry(
        {"param_dtype": "bfloat16", "sharding_strategy": "FULL_SHARD", "backward_prefetch": None}
    )
    assert entry == "sharding_strategy=FULL_SHARD, backward_prefetch=None, param_dtype=bfloat16"
    assert fsdp1_settings({FSDP1_ENV: entry}) == {
        "sharding_strategy": "FULL_SHARD",
        "backward_prefetch": "None",
        "param_dtype": "bfloat16",
    }
    assert fsdp1_settings({}) == fsdp1_settings({FSDP1_ENV: "garbled"}) == {}


def test_under_zero_the_advice_is_deepspeed_s_settings_with_their_values_in_the_run():
    p = fsdp_step(big_exposed=60 * MS, runtime="ZeRO::")
    settings = {
        "overlap_comm": False,
        "reduce_bucket_size": 500_000_000,
        "stage3_prefetch_bucket_size": 0,
        "stage3_max_reuse_distance": 1000,
        "stage3_param_persistence_threshold": 100_000,
    }
    p.env = {"torch": "2.13.0", "cuda": "12.4", ZERO_ENV: zero_entry(3, "bfloat16", settings)}
    assert [r.sharded_by for r in by_module(p.tree)] == ["ZeRO", "ZeRO"]
    f = only(analyze(p), "exposed_communication")
    assert f["path"][-1] == "blocks.1" and f["gain_ns"] == 2 * 60 * MS / STEPS
    advice = f["suggestion"]
    # 64 MiB a gather of bfloat16: 32 Mi elements
    assert (
        "prefetching is off (`stage3_prefetch_bucket_size` 0); 33554432 elements or more" in advice
    )
    assert "`stage3_max_reuse_distance` (now 1000)" in advice
    assert (
        "with `stage3_param_persistence_threshold` (now 100000) above 33554432 elements its "
        "parameters stay whole on every rank (no gathers, 64.0 MiB more per rank)"
    ) in advice
    assert "`overlap_comm: true`" in advice
    assert "fully_shard" not in advice and "set_modules_to" not in advice


def test_under_zero_a_module_whose_gathers_are_prefetches_for_others_is_told_so():
    """ZeRO-3's prefetch, one coalesced gather of the next modules' parameters,
    stays in the fetch that issued it: the settings of the issuer's own gathers
    are no advice for it."""
    p = profile(
        (
            "forward",
            (
                TRAIN,
                (
                    "module:model",
                    (
                        "sharding:ZeRO::pre_forward",
                        ("sharding:ZeRO::forward_prefetch", gather(60 * MS, 60 * MS, 3 << 20)),
                    ),
                    f"aten::addmm @cpu_time_ns={60 * MS},count={STEPS}",
                ),
            ),
        ),
        steps=(1, 1 + STEPS),
        env={
            "torch": "2.13.0",
            ZERO_ENV: zero_entry(3, "float32", {"stage3_prefetch_bucket_size": 5}),
        },
    )
    prefetch = p.tree.find_all(lambda f: f.name == "ZeRO::forward_prefetch")[0]
    detail = "11 parameters of model.0, model.1, issued in model"
    frame = p.tree.node_frame(prefetch)
    p.tree.frames[p.tree.frame[prefetch]] = Frame(frame.kind, frame.name, detail=detail)
    advice = only(analyze(p), "exposed_communication")["suggestion"]
    assert advice.startswith(
        "`model`'s gathers are ZeRO-3 prefetches issued in its fetch for 11 parameters of "
        "model.0, model.1 (`stage3_prefetch_bucket_size` (now 5)): those modules wait for them"
    )
    assert "persistence" not in advice


def test_under_zero_a_module_that_waits_for_a_prefetch_is_told_to_have_it_requested_earlier():
    """The wait for a prefetch is timed where the module that needs it waits
    (`WAITED`); the gather and its bytes stay where it was launched."""
    p = profile(
        (
            "forward",
            (
                TRAIN,
                (
                    "module:model",
                    ("sharding:ZeRO::pre_forward", gather(MS, MS, 3 << 20)),
                    (
                        "module:model.1",
                        (
                            "sharding:ZeRO::pre_forward",
                            f"{GATHER} @cpu_time_ns={60 * MS},count={STEPS},"
                            f"exposed_comm_ns={60 * MS}",
                        ),
                        f"aten::addmm @cpu_time_ns={60 * MS},count={STEPS}",
                    ),
                ),
            ),
        ),
        steps=(1, 1 + STEPS),
        env={
            "torch": "2.13.0",
            ZERO_ENV: zero_entry(3, "float32", {"stage3_prefetch_bucket_size": 5}),
        },
    )
    wait = p.tree.find_all(lambda f: f.name == GATHER)[-1]
    frame = p.tree.node_frame(wait)
    p.tree.frames[p.tree.frame[wait]] = Frame(frame.kind, frame.name, detail=WAITED)
    row = {r.name: r for r in by_module(p.tree)}["model.1"]
    assert (row.calls, row.bytes, row.exposed_ns) == (0, 0, 60 * MS)
    f = only(analyze(p), "exposed_communication")
    assert f["path"][-1] == "model.1"
    assert f["message"].endswith(
        "(forward 20.0 ms; 20.0 ms of it for a prefetch another module's fetch launched)"
    )
    assert f["suggestion"] == (
        "`model.1`'s parameters were prefetched and the step still waits for them here: a "
        "larger `stage3_prefetch_bucket_size` (now 5) requests them further ahead, behind more "
        "work, as far as `stage3_max_live_parameters` allows"
    )


def test_the_zero_entry_reads_back_as_written():
    entry = zero_entry(2, "float16", {"overlap_comm": True, "reduce_bucket_size": 16640})
    assert entry == "stage 2, float16: overlap_comm=True, reduce_bucket_size=16640"
    assert zero_settings({ZERO_ENV: entry}) == {
        "stage": "2",
        "dtype": "float16",
        "overlap_comm": "True",
        "reduce_bucket_size": "16640",
    }
    assert zero_settings({}) == zero_settings({ZERO_ENV: "garbled"}) == {}


def test_hidden_or_small_gathers_are_no_finding():
    # 2 ms exposed per gather: 4 ms of a ~100 ms step
    assert "exposed_communication" not in rules(analyze(fsdp_step(big_exposed=2 * MS)))


def test_too_few_steps_make_it_a_note():
    p = fsdp_step(big_exposed=60 * MS)
    p.step_times_ns = p.step_times_ns[:2]
    p.steps = (1, 3)
    assert only(analyze(p), "exposed_communication")["severity"] == "info"


def test_the_report_prints_each_modules_communication_per_step():
    from rich.console import Console

    from dc_core.cli.present import communication_json
    from dc_core.cli.report import communication_table

    rows = communication_json(fsdp_step(big_exposed=60 * MS))
    assert [r["module"] for r in rows] == ["blocks.1", "blocks.0"]
    big = rows[0]
    assert big["compute_ns"] == 30 * MS and big["runtime_ns"] == round(7 * MS / STEPS)
    assert big["exposed_ns"] == round(124 * MS / STEPS)
    assert big["bytes"] == 3 * 64 << 20 and big["calls"] == 3
    assert big["exposed_by"]["forward all-gather"] == 20 * MS
    console = Console(width=120, record=True)
    console.print(communication_table(120, rows))
    text = console.export_text()
    assert "communication by module (per step)" in text
    line = next(t for t in text.splitlines() if t.startswith("blocks.1"))
    assert line.split()[1:] == [
        "30.00",
        "ms",
        "41.33",
        "ms",
        "2.33",
        "ms",
        "41.33",
        "ms",
        "192.0",
        "MiB",
    ]
