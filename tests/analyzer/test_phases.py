"""optimizer_unfused, dataloader_bottleneck, gpu_idle on literal trees."""

from dc_core.analyzer import analyze
from dc_core.model.comm import ZERO_ENV, zero_entry
from tests.analyzer.helpers import MS, line, only, profile, rules

TRAIN = line("train", "train.py:20")
FORWARD = (
    "forward",
    (TRAIN, (line("forward", "model.py:12"), f"aten::addmm @cpu_time_ns={60 * MS},count=3")),
)


def test_optimizer_unfused_counts_per_parameter_ops():
    p = profile(
        FORWARD,
        (
            "optimizer",
            f"aten::add_ @cpu_time_ns={10 * MS},count=150",
            f"aten::mul_ @cpu_time_ns={10 * MS},count=150",
        ),
    )
    f = only(analyze(p), "optimizer_unfused")
    assert f["path"] == ["optimizer"] and f["evidence"]["ops_per_step"] == 100.0
    assert f["evidence"]["share"] == 0.25 and "foreach=True" in f["suggestion"]
    assert f["evidence"]["optimizer"] == "" and f["gain_ns"] == 0  # no Python between them


def test_optimizer_unfused_advises_fused_for_an_optimizer_that_has_it():
    """Torch's AdamW step (its frame names the class the user built): a fused
    pass costs about one of its operators per parameter, the rest of the step
    goes; the gradient clipping beside it in the phase stays."""
    step = line("AdamW.step", "/venv/torch/optim/adam.py:214") + f" @cpu_time_ns={30 * MS}"
    clip = line("clip_grad_norm_", "/venv/torch/nn/utils/clip_grad.py:30")
    p = profile(
        FORWARD,
        (
            "optimizer",
            (clip, f"aten::stack @cpu_time_ns={6 * MS},count=3"),  # once a step
            (
                step,
                f"aten::add_ @cpu_time_ns={6 * MS},count=300",  # the step count and eps: 2 a parameter
                f"aten::lerp_ @cpu_time_ns={3 * MS},count=150",
                f"aten::addcdiv_ @cpu_time_ns={3 * MS},count=150",
                "aten::zeros_like @count=2",  # a new state's, once: not a parameter's
            ),
        ),
    )
    f = only(analyze(p), "optimizer_unfused")
    assert (
        f["evidence"]["optimizer"] == "AdamW"
        and "construct AdamW with fused=True" in f["suggestion"]
    )
    # the step: 42 ms of host time in 3 steps; its 602 calls took 12 ms, 50 parameters a step
    assert f["gain_ns"] == int((42 - 12 * 150 / 602) * MS / 3)
    assert "each of its 50 parameters" in f["gain_basis"]


def test_optimizer_unfused_advises_foreach_for_a_subclass():
    """A user's subclass of Adam may step without ``fused``: foreach it is."""
    step = line("MyAdam.step", "/venv/torch/optim/adam.py:214")
    ops = (step, f"aten::add_ @cpu_time_ns={10 * MS},count=150")
    f = only(
        analyze(profile(FORWARD, ("optimizer @cpu_time_ns=" + str(10 * MS), ops))),
        "optimizer_unfused",
    )
    assert f["evidence"]["optimizer"] == "" and "foreach=True" in f["suggestion"]
    assert f["gain_ns"] == 10 * MS // 3  # the Python around the operators


def test_optimizer_unfused_is_torch_advice_not_given_to_jax():
    """XLA compiles a JAX update into the step's program: foreach=True means nothing there."""
    ops = (
        "optimizer",
        f"aten::add_ @cpu_time_ns={10 * MS},count=150",
        f"aten::mul_ @cpu_time_ns={10 * MS},count=150",
    )
    assert "optimizer_unfused" not in rules(analyze(profile(FORWARD, ops, framework="jax")))
    assert "optimizer_unfused" in rules(analyze(profile(FORWARD, ops, framework="torch")))


def test_optimizer_unfused_is_no_advice_for_deepspeed_zero():
    """ZeRO's step updates flat partitions; its per-parameter operators are
    the runtime's gathering of the updated parameters."""
    ops = (
        "optimizer",
        f"aten::narrow @cpu_time_ns={10 * MS},count=150",
        f"aten::copy_ @cpu_time_ns={10 * MS},count=150",
    )
    env = {"torch": "2.13.0", ZERO_ENV: zero_entry(3, "float32", {"overlap_comm": True})}
    assert "optimizer_unfused" not in rules(analyze(profile(FORWARD, ops, env=env)))
    assert "optimizer_unfused" in rules(analyze(profile(FORWARD, ops, env={"torch": "2.13.0"})))


def test_optimizer_unfused_quiet_with_foreach_kernels():
    p = profile(
        FORWARD,
        (
            "optimizer",
            f"aten::_foreach_add_ @cpu_time_ns={20 * MS},count=3",
            f"aten::add_ @cpu_time_ns={10 * MS},count=150",
        ),
    )
    assert "optimizer_unfused" not in rules(analyze(p))


def test_optimizer_unfused_quiet_for_a_small_optimizer_share():
    p = profile(FORWARD, ("optimizer", f"aten::add_ @cpu_time_ns={2 * MS},count=150"))
    assert "optimizer_unfused" not in rules(analyze(p))


def test_dataloader_bottleneck_names_getitem():
    p = profile(
        FORWARD,
        (
            "dataloader",
            (
                "python:_next_data|dataloader.py:700",
                (line("__getitem__", "data.py:18"), f"aten::randn @cpu_time_ns={36 * MS},count=96"),
                (line("collate", "data.py:30"), f"aten::stack @cpu_time_ns={4 * MS},count=3"),
            ),
        ),
    )
    f = only(analyze(p), "dataloader_bottleneck")
    assert f["path"][-1] == "data.py:18 __getitem__" and f["severity"] == "warning"
    assert f["evidence"]["share"] == 0.4 and f["evidence"]["per_step_ns"] == 40 * MS // 3
    assert "num_workers" in f["suggestion"]


def test_dataloader_bottleneck_is_critical_past_half_and_uses_sampler_hits():
    # no operators in __getitem__ (pure Python): the sampler's hits show where
    p = profile(
        FORWARD,
        (
            f"dataloader @cpu_time_ns={200 * MS}",
            (line("__getitem__", "data.py:18"), "python:decode|data.py:40 @samples=20"),
        ),
    )
    f = only(analyze(p), "dataloader_bottleneck")
    assert f["severity"] == "critical" and f["path"] == [
        "dataloader",
        "data.py:18 __getitem__",
        "data.py:40 decode",
    ]


def test_a_wait_for_batches_the_workers_waited_as_long_for_a_cpu_is_a_note():
    """40 ms of loading over 3 steps is 13.3 ms a step: workers that waited 14
    ms a step for a CPU may explain all of it; 12 ms a step, not all of it."""
    loading = (
        "dataloader",
        ("python:_next_data|dataloader.py:700", f"python:get|queues.py:103 @cpu_time_ns={40 * MS}"),
    )
    note = only(analyze(profile(FORWARD, loading, loader_wait_ns=42 * MS)), "dataloader_bottleneck")
    assert note["severity"] == "info"
    assert note["message"].endswith(
        "(the data loader's worker processes waited 14.0 ms per step for a CPU, as much as the "
        "step waited for their batches: the host's load may be all of it)"
    )
    for known in (36 * MS, -1):
        f = only(analyze(profile(FORWARD, loading, loader_wait_ns=known)), "dataloader_bottleneck")
        assert f["severity"] == "warning" and "worker processes" not in f["message"]


def test_workers_a_core_each_would_keep_up_with_are_the_hosts_and_slower_ones_a_warning():
    """The same 13.3 ms a step of loading, behind 20 ms of the step's own,
    where the window knows its workers' CPU time: one worker running 21 ms
    a step would keep the step waiting 1 ms with a core to itself (under
    the rule's 10%), so a wait for a CPU of 12.6 ms a step may be all the
    rest; 30 ms a step would keep it waiting 10 ms on any host (a warning,
    however long the worker waited for a CPU), unless two workers share it."""
    loading = (
        "dataloader",
        ("python:_next_data|dataloader.py:700", f"python:get|queues.py:103 @cpu_time_ns={40 * MS}"),
    )

    def judged(cpu_ms: int, workers: int, waited_ms: float) -> dict:
        fields = {"loader_cpu_ns": 3 * cpu_ms * MS, "loader_workers": workers}
        p = profile(FORWARD, loading, loader_wait_ns=int(3 * waited_ms * MS), **fields)
        return only(analyze(p), "dataloader_bottleneck")

    note = judged(21, 1, 12.6)
    assert note["severity"] == "info"
    assert note["message"].endswith(
        "(the data loader's worker processes waited 12.6 ms per step for a CPU, and with a core "
        "each would keep the step waiting only 1.0 ms: the host's load may be the rest)"
    )
    workers = note["evidence"]["workers"]
    assert workers == {
        "workers": 1,
        "cpu_ns": 21 * MS,
        "own_ns": 20 * MS,
        "idle_host_wait_ns": 1 * MS,
    }
    assert judged(21, 1, 12.0)["severity"] == "warning"  # the host explains less than the rest

    slow = judged(30, 1, 14)
    assert slow["severity"] == "warning"
    assert slow["message"].endswith(
        "(its 1 worker process runs 30.0 ms of CPU per step, the step 20.0 ms of its own)"
    )
    assert slow["evidence"]["workers"]["idle_host_wait_ns"] == 10 * MS
    shared = judged(30, 2, 14)
    assert shared["severity"] == "info" and shared["evidence"]["workers"]["idle_host_wait_ns"] == 0


def test_a_window_whose_edge_step_loaded_no_batch_weighs_the_loads_it_has():
    """A trainer fetches a step's batch before the step begins: 2 loads of
    20 ms in 3 steps, one step with none (its quietest step's wait is 0).
    The loads' mean, 20 ms, against the steps' 20 ms each besides: 50%."""
    loading = (
        "dataloader @count=2",
        ("python:_next_data|dataloader.py:700", f"python:get|queues.py:103 @cpu_time_ns={40 * MS}"),
    )
    p = profile(FORWARD, loading)
    edge = [0 if n in (5, 6, 7) else v for n, v in enumerate(p.step_bounds["cpu_time_ns.min"])]
    p.step_bounds["cpu_time_ns.min"] = edge
    f = only(analyze(p), "dataloader_bottleneck")
    assert f["severity"] == "critical" and f["evidence"]["share"] == 0.5, f
    assert f["message"].startswith("data loading takes 50.0% of step time (20.0 ms per step)")
    assert f["gain_ns"] == round(40 * MS / 3)  # the mean step's wait
    full = profile(FORWARD, ("dataloader @count=3", *loading[1:]))  # every step loaded one
    full.step_bounds["cpu_time_ns.min"] = edge
    assert "dataloader_bottleneck" not in rules(analyze(full))  # its quietest step waited 0


def test_dataloader_bottleneck_quiet_below_ten_percent():
    p = profile(
        FORWARD,
        ("dataloader", (line("__getitem__", "data.py:18"), f"aten::randn @cpu_time_ns={5 * MS}")),
    )
    assert "dataloader_bottleneck" not in rules(analyze(p))


def test_gpu_idle_when_the_host_launches_small_kernels():
    ops = [
        (
            f"aten::add @cpu_time_ns={30 * MS},count=3000",
            "kernel:vectorized_add @device_time_ns=3000000",
        )
    ]
    p = profile(
        ("forward", (TRAIN, (line("step", "model.py:8"), *ops))),
        step_times=[11 * MS, 11 * MS, 11 * MS],
    )
    f = only(analyze(p), "gpu_idle")
    assert f["evidence"]["idle"] == round(1 - 3 / 33, 4) and f["severity"] == "critical"
    assert f["path"] == ["forward", "train.py:20 train", "model.py:8 step"]
    assert "CUDA graphs" in f["suggestion"]


def test_gpu_idle_quiet_when_the_device_is_busy():
    ops = [(f"aten::mm @cpu_time_ns={3 * MS},count=3", "kernel:sgemm @device_time_ns=28000000")]
    p = profile(("forward", (TRAIN, (line("step", "model.py:8"), *ops))), step_times=[10 * MS] * 3)
    assert "gpu_idle" not in rules(analyze(p))


def test_gpu_idle_never_on_cpu_profiles():
    p = profile(FORWARD, step_times=[100 * MS] * 3)
    assert "gpu_idle" not in rules(analyze(p))
