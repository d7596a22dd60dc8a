"""End to end: a Flax model trained with a jitted value_and_grad step on CPU,
profiled with ``dc_jax.profile``; assertions on the written profile's tree."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")
pytest.importorskip("optax")

import jax

import dc_jax
from dc_core.record.config import StepRange
from dc_core.store.logdir import read_profile
from tests.jax import workloads
from tests.jax.helpers import nodes as _nodes


def _train(tmp_path, training, steps: int, window: StepRange, **overrides):
    train_step, state, (x, y) = training
    with dc_jax.profile(
        logdir=str(tmp_path), steps=window, cpu_sampling_hz=0, system_interval_ms=0, **overrides
    ) as prof:
        for _ in range(steps):
            state, loss = train_step(state, x, y)
            prof.step()
    return prof, [read_profile(p) for p in prof.written]


def _under(tree, node, kind, name):
    """The nearest ancestor of ``node`` with this kind and name, or None."""
    for n in reversed(tree.path(node)[:-1]):
        f = tree.node_frame(n)
        if f.kind == kind and f.name == name:
            return n
    return None


@pytest.mark.slow
def test_mlp_window_places_timed_matmuls_under_loss_fn_and_dense_0(tmp_path):
    train_step, state, (x, y) = training = workloads.mlp_training()
    train_step(state, x, y)  # compiled before the window, as in most jobs
    prof, profiles = _train(tmp_path, training, steps=7, window=StepRange(start=2, count=3))
    assert len(profiles) == 1
    profile = profiles[0]
    tree = profile.tree
    assert profile.steps == (2, 5) and len(profile.step_times_ns) == 3
    assert profile.framework == "jax" and profile.env["backend"] == "cpu"
    op_time = tree.inclusive("device_time_ns")  # XLA op time (the CPU device's)

    matmuls = {}
    for backward in (False, True):
        ops = [
            n
            for n in _nodes(tree, "operator", "dot_general", backward)
            if _under(tree, n, "module", "MLP/Dense_0")
        ]
        assert len(ops) == 1, (backward, [tree.path_frames(n) for n in ops])
        matmuls[backward] = op = ops[0]
        path = tree.path_frames(op)
        assert path[0].kind == "phase" and path[0].name == ("backward" if backward else "forward")
        # qualnames: make_training.<locals>.train_step
        names = [f.name.rsplit(".<locals>.", 1)[-1] for f in path]
        # train_step → my_loss_fn → MLP → MLP.__call__ → MLP/Dense_0 → dot_general
        assert names[1:3] == ["train_step", "my_loss_fn"] and path[2].file.endswith("workloads.py")
        assert names[3:6] == ["MLP", "MLP.__call__", "MLP/Dense_0"]
        assert path[5].kind == "module" and path[5].detail == "Dense"
        assert path[-1].backward is backward
        kernels = tree.children(op)
        assert len(kernels) == 1 and tree.node_frame(kernels[0]).kind == "kernel"
        assert tree.node_frame(kernels[0]).detail == "cpu:0"
        assert tree.value(op, "count") == 3  # one execution per step of the window
        assert tree.inclusive("count")[op] == 3  # its kernel does not count it again
        assert tree.value(op, "count") == 3
        assert op_time[op] > 0
    # Forward and backward matmuls of Dense_0 share the forward context.
    assert [f.name for f in tree.path_frames(matmuls[False])[1:-1]] == [
        f.name for f in tree.path_frames(matmuls[True])[1:-1]
    ]
    optimizer = tree.find("optimizer")
    assert optimizer is not None and op_time[optimizer] > 0
    assert tree.find("compile") is None  # compiled before the window
    # executions are counted on the op, once: its kernel adds none to its inclusive count
    count = tree.inclusive("count")
    assert all(count[n] == 0 and count[tree.parent[n]] == 3 for n in _nodes(tree, "kernel"))


@pytest.mark.slow
def test_transformer_block_modules_match_the_flax_module_tree(tmp_path):
    train_step, state, (x, y) = training = workloads.block_training()
    train_step(state, x, y)
    _, (profile,) = _train(tmp_path, training, steps=3, window=StepRange(start=1, count=2))
    tree = profile.tree
    assert profile.steps == (1, 3)
    modules = {tree.node_frame(n).name: tree.node_frame(n).detail for n in _nodes(tree, "module")}
    attention = "Classifier/Block_0/MultiHeadDotProductAttention_0"
    assert modules["Classifier/Block_0"] == "Block"
    assert modules[attention] == "MultiHeadDotProductAttention"
    assert modules[f"{attention}/query"] == "DenseGeneral"
    assert modules["Classifier/Block_0/proj"] == "Dense"
    assert modules["Classifier/Block_0/LayerNorm_0"] == "LayerNorm"
    for module in (f"{attention}/query", "Classifier/Block_0/proj"):
        forward = [
            n
            for n in _nodes(tree, "operator", "dot_general", False)
            if _under(tree, n, "module", module)
        ]
        backward = [
            n
            for n in _nodes(tree, "operator", "dot_general", True)
            if _under(tree, n, "module", module)
        ]
        assert forward and backward, module
        assert tree.path_frames(backward[0])[0].name == "backward"
        assert sum(tree.inclusive("device_time_ns")[n] for n in forward) > 0
    # Attention's own matmuls (scores, weighted values) sit under the attention module.
    assert [
        n
        for n in _nodes(tree, "operator", "dot_general")
        if _under(tree, n, "module", attention)
        and not any(
            _under(tree, n, "module", f"{attention}/{p}") for p in ("query", "key", "value", "out")
        )
    ]


@pytest.mark.slow
def test_window_over_the_first_step_reports_compile_and_records_flax_classes(tmp_path):
    train_step, state, (x, y) = training = workloads.block_training()
    prof, (profile,) = _train(tmp_path, training, steps=2, window=StepRange(start=0, count=1))
    tree = profile.tree
    assert profile.steps == (0, 1)
    compiled = {
        (tree.node_frame(n).name, tree.node_frame(n).detail) for n in _nodes(tree, "compiled")
    }
    assert {
        ("train_step", "trace"),
        ("train_step", "lower"),
        ("train_step", "backend_compile"),
    } <= compiled
    compile_node = tree.find("compile")
    # compiling takes milliseconds at least
    assert tree.inclusive("cpu_time_ns")[compile_node] > 10_000_000
    # Compile time is its own phase, out of the step's host phase and out of its
    # step time: a step that compiled is not reported as a slow step.
    step_ns = profile.step_times_ns[0]
    compile_ns = tree.inclusive("cpu_time_ns")[compile_node]
    assert step_ns < compile_ns  # running the block once is far quicker than compiling it
    other_ns = tree.value(tree.find("other"), "cpu_time_ns")
    assert abs(other_ns - step_ns) < 0.05 * compile_ns, (other_ns, step_ns, compile_ns)
    # The model was traced inside the window, so the Flax hooks saw its modules.
    assert prof.adapter._flax.classes["Classifier/Block_0/proj"] == "Dense"


@pytest.mark.slow
def test_marked_phase_holds_the_runs_dispatched_in_it(tmp_path):
    train_step, state, (x, y) = workloads.mlp_training()
    augment = jax.jit(lambda batch: batch * 0.5 + 1.0)
    augment(x), train_step(state, x, y)
    with dc_jax.profile(
        logdir=str(tmp_path),
        steps=StepRange(start=1, count=2),
        cpu_sampling_hz=0,
        system_interval_ms=0,
    ) as prof:
        for _ in range(4):
            with prof.phase("dataloader"):
                batch = augment(x)
            state, loss = train_step(state, batch, y)
            prof.step()
    tree = read_profile(prof.written[0]).tree
    loader = tree.find("dataloader")
    assert loader is not None
    ops = [n for n in _nodes(tree, "kernel") if tree.path_frames(n)[0].name == "dataloader"]
    assert ops and all(tree.value(tree.parent[n], "count") == 2 for n in ops)
    assert not [
        n
        for n in _nodes(tree, "kernel")
        if tree.path_frames(n)[0].name == "forward" and _under(tree, n, "python", "<lambda>")
    ]


@pytest.mark.slow
def test_outside_windows_no_trace_runs_and_conversion_errors_fail_open(
    tmp_path, monkeypatch, caplog
):
    import dc_jax.adapter as adapter_mod

    train_step, state, (x, y) = training = workloads.mlp_training()
    starts = []
    real_start = jax.profiler.start_trace
    monkeypatch.setattr(
        jax.profiler, "start_trace", lambda *a, **k: (starts.append(a), real_start(*a, **k))
    )
    _, profiles = _train(tmp_path / "none", training, steps=3, window=StepRange(start=50, count=2))
    assert profiles == [] and starts == []

    def broken(*args, **kwargs):
        raise RuntimeError("unreadable trace")

    monkeypatch.setattr(adapter_mod.trace, "read", broken)
    train_step, state, (x, y) = training
    with dc_jax.profile(
        logdir=str(tmp_path / "broken"),
        steps=StepRange(start=1, count=1, every=2, repeat=0),
        cpu_sampling_hz=0,
        system_interval_ms=0,
    ) as prof:
        for _ in range(5):
            state, loss = train_step(state, x, y)  # training goes on after the failure
            prof.step()
    assert float(loss) == float(loss)
    assert prof.session.disabled and len(starts) == 1  # disabled after the first window
    assert "unreadable trace" in caplog.text
    # The window's host data was still written (by the failure path, then again
    # by the window close it interrupted: the same file, replaced atomically).
    (profile,) = [read_profile(p) for p in set(prof.written)]
    assert profile.steps == (1, 2)


def test_importing_dc_jax_does_not_import_jax():
    code = "import sys, dc_jax; dc_jax.Profiler; assert dc_jax.is_available(); print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_jax_is_asked_for_the_rank_at_start_not_at_construction(tmp_path):
    # jax.distributed.initialize() must come before JAX's backends start: a
    # Profiler made before it must not start them (asking the process index does)
    code = (
        "import sys, dc_jax; p = dc_jax.Profiler(logdir=sys.argv[1]); print('jax' in sys.modules);"
        "p.start(); print('jax' in sys.modules, p.current_step); p.stop()"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["False", "True", "0"]


def test_a_given_rank_names_the_profile(tmp_path):
    # Regression: rank= collided with the rank read from JAX (a TypeError)
    prof, (profile,) = _train(
        tmp_path,
        workloads.mlp_training(),
        steps=2,
        window=StepRange(start=1, count=1),
        rank=2,
        world_size=4,
    )
    assert (profile.rank, profile.world_size) == (2, 4) and prof.written[0].parent.name.startswith(
        "2-"
    )


def test_a_users_own_trace_skips_that_window_with_one_warning_and_later_windows_record(
    tmp_path, caplog
):
    double = jax.jit(lambda v: v * 2)
    x = jax.numpy.ones(4)
    theirs = tmp_path / "theirs"
    jax.profiler.start_trace(str(theirs))
    try:
        with caplog.at_level("WARNING", logger="deepcontext"):
            prof = dc_jax.profile(
                logdir=str(tmp_path / "logs"),
                steps=StepRange(start=1, count=2, every=4, repeat=2),
                cpu_sampling_hz=0,
                system_interval_ms=0,
            ).start()
            for step in range(8):
                double(x).block_until_ready()
                if step == 3:
                    jax.profiler.stop_trace()  # the user's trace ends: the next window records
                prof.step()
            prof.stop()
    finally:
        try:
            jax.profiler.stop_trace()
        except RuntimeError:
            pass  # already stopped by the loop
    skips = [r for r in caplog.records if "skips the window" in r.getMessage()]
    assert (
        len(skips) == 1
        and "steps 1–2" in skips[0].getMessage()
        and "jax.profiler" in skips[0].getMessage()
    )
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
    assert not prof.session.disabled
    assert [read_profile(p).steps for p in prof.written] == [(5, 7)]
    assert list(theirs.rglob("*.xplane.pb"))  # their trace was written, untouched


@pytest.mark.slow
def test_a_step_that_recompiles_is_not_a_slow_step(tmp_path):
    train_step, state, _ = workloads.block_training()
    # the second shape compiles anew
    batches = [
        jax.numpy.ones((4, 6, 16)),
        jax.numpy.ones((4, 7, 16)),
    ]
    y = jax.numpy.arange(4) % 10
    state, loss = train_step(state, batches[0], y)
    with dc_jax.profile(
        logdir=str(tmp_path),
        steps=StepRange(start=1, count=4),
        cpu_sampling_hz=0,
        system_interval_ms=0,
    ) as prof:
        for step in range(5):
            state, loss = train_step(state, batches[1 if step == 2 else 0], y)
            loss.block_until_ready()
            prof.step()
    profile = read_profile(prof.written[0])
    compile_ns = profile.tree.inclusive("cpu_time_ns")[profile.tree.find("compile")]
    assert len(profile.step_times_ns) == 4
    # the recompiling step's time is its run, not its compile
    assert max(profile.step_times_ns) < compile_ns
