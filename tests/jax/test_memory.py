"""Memory by context on JAX, against sizes known exactly.

The planted model is ``Dense(1024) → Dense(4096) → Dense(1024)`` on inputs of
256 features in fp32, trained with Adam: its parameters are 8,656,896 floats
(34,627,584 bytes), Adam's state twice that plus its int32 step count. JAX
gives the arrays live at a moment, each with the stack that made it; the
train state handed to ``prof.step(state)`` tells its leaves apart.
"""

from __future__ import annotations

import inspect

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")
pytest.importorskip("optax")

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

import dc_jax
from dc_core.record.config import StepRange
from dc_core.record.memory import MEMORY_METRIC_NAMES
from dc_core.store.logdir import read_profile
from dc_jax import memory
from tests.jax.helpers import nodes
from tests.jax.workloads import make_training

QUIET = {"cpu_sampling_hz": 0, "system_interval_ms": 0}
F32 = 4
WIDTHS = (256, 1024, 4096, 1024)  # input features, then each Dense's
LAYERS = {  # module path → its parameters' bytes (kernel and bias)
    f"Wide/Dense_{i}": (WIDTHS[i] * WIDTHS[i + 1] + WIDTHS[i + 1]) * F32 for i in range(3)
}
PARAMS = sum(LAYERS.values())
ADAM = 2 * PARAMS + 4  # mu and nu, and the int32 count


class Wide(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(WIDTHS[1])(x))
        x = nn.relu(nn.Dense(WIDTHS[2])(x))
        return nn.Dense(WIDTHS[3])(x)


def _train(tmp_path, steps=4, window=StepRange(start=1, count=2), pass_state=True, **config):
    train_step, state, (x, y) = make_training(Wide(), jnp.ones((8, WIDTHS[0])))
    with dc_jax.profile(logdir=str(tmp_path), steps=window, **QUIET, **config) as prof:
        for _ in range(steps):
            state, loss = train_step(state, x, y)
            prof.step(state if pass_state else None)
    [written] = prof.written
    return read_profile(written), state


def _line(function, text: str) -> int:
    lines, first = inspect.getsourcelines(function)
    return first + next(i for i, line in enumerate(lines) if text in line)


def _bytes_at(tree, metric: str) -> dict[tuple[str, ...], int]:
    """Labelled path → ``metric``'s exclusive bytes, for every node that has some."""
    return {
        _from_this_file([f.label() for f in tree.path_frames(n)]): tree.value(n, metric)
        for n in range(1, len(tree))
        if tree.value(n, metric)
    }


def _from_this_file(labels: list[str]) -> tuple[str, ...]:
    """The phase, then the frames from this file's first one down: what runs the
    tests above it (``python -m pytest`` or a ``pytest`` script) is not asserted on."""
    first = next((i for i, label in enumerate(labels) if "test_memory.py:" in label), 1)
    return (labels[0], *labels[max(first, 1) :])


@pytest.mark.slow
def test_parameter_bytes_are_the_params_under_the_step_line_and_their_modules(tmp_path):
    profile, state = _train(tmp_path, memory=True)
    assert PARAMS == sum(leaf.size * F32 for leaf in jax.tree.leaves(state[0])) == 34_627_584
    tree = profile.tree
    parameter = tree.inclusive("peak_live_bytes.parameter")[0]
    assert abs(parameter - PARAMS) <= PARAMS / 100 and parameter == PARAMS
    assert tree.inclusive("peak_live_bytes.optimizer_state")[0] == ADAM
    [device] = profile.memory
    assert device.device == "cpu" and device.peak_bytes == tree.inclusive("peak_live_bytes")[0]
    # the batch (x, y) and the loss are what is left: temporaries
    assert device.peak_bytes - PARAMS - ADAM == (8 * WIDTHS[0] + 8) * 4 + 4
    assert device.peak_step in (1, 2) and device.peak_node == -1
    assert len(device.timeline_bytes) == 2 == len(device.timeline_t_ns)  # one per step end
    assert device.held_at_peak_bytes == 8 * WIDTHS[0] * 4 + 8 * 4  # the batch, made before

    # Each Dense's own parameters and Adam's moments of them, under the line
    # that called the step (which made them) and the module they belong to.
    test = test_parameter_bytes_are_the_params_under_the_step_line_and_their_modules
    lines = (
        f"test_memory.py:{_line(test, '= _train(tmp_path')} {test.__name__}",
        f"test_memory.py:{_line(_train, '= train_step(state')} _train",
    )
    params_at = _bytes_at(tree, "peak_live_bytes.parameter")
    assert params_at == {
        ("other", *lines, "Wide (Wide)", f"{module} (Dense)"): size
        for module, size in LAYERS.items()
    }
    # the optimizer's state: the optimizer phase, on the same lines and modules
    adam_at = _bytes_at(tree, "peak_live_bytes.optimizer_state")
    assert adam_at == {
        **{("optimizer", *path[1:]): 2 * size for path, size in params_at.items()},
        ("optimizer", *lines): 4,  # the count, of no module
    }
    # no allocation history from JAX: the note says what is missing
    assert "alloc_bytes" not in tree.metrics and "free_bytes" not in tree.metrics
    assert profile.memory_missing == ["alloc_bytes", "free_bytes"]
    assert "no alloc_bytes or free_bytes" in profile.memory_note
    assert "prof.step(state)" not in profile.memory_note  # a state was handed over


@pytest.mark.slow
def test_memory_off_leaves_no_memory_metrics(tmp_path):
    profile, _ = _train(tmp_path, memory=False)
    assert not [m for m in profile.tree.metrics if m.split("@")[0] in MEMORY_METRIC_NAMES]
    assert profile.memory == [] and profile.memory_missing == [] and profile.memory_note == ""
    assert nodes(profile.tree, "operator", "dot_general")  # the window itself was recorded


@pytest.mark.slow
def test_without_a_state_init_made_arrays_are_told_by_their_stack(tmp_path):
    """No state handed over and no update: parameters from ``model.init`` and
    Adam's state from ``tx.init`` are told by where they were made."""
    model, x = Wide(), jnp.ones((8, WIDTHS[0]))
    params = model.init(jax.random.PRNGKey(0), x)
    opt = optax.adam(1e-3).init(params)  # alive through the window, as a job's would be
    apply = jax.jit(model.apply)
    with dc_jax.profile(logdir=str(tmp_path), steps=StepRange(1, 2), memory=True, **QUIET) as prof:
        for _ in range(4):
            apply(params, x).block_until_ready()
            prof.step()
    assert len(jax.tree.leaves(opt)) == 13
    profile = read_profile(prof.written[0])
    tree = profile.tree
    assert tree.inclusive("peak_live_bytes.parameter")[0] == PARAMS
    assert tree.inclusive("peak_live_bytes.optimizer_state")[0] == ADAM
    init = _line(test_without_a_state_init_made_arrays_are_told_by_their_stack, "model.init(")
    here = f"test_memory.py:{init} test_without_a_state_init_made_arrays_are_told_by_their_stack"
    params_at = _bytes_at(tree, "peak_live_bytes.parameter")
    # the Wide's lines that made each Dense's parameters, below the init line
    calls = {_line(Wide.__call__, f"nn.Dense(WIDTHS[{i}])") for i in (1, 2, 3)}
    assert {p[-1] for p in params_at} == {f"test_memory.py:{n} Wide.__call__" for n in calls}
    assert all(p[:2] == ("other", here) for p in params_at)
    assert sorted(params_at.values()) == sorted(LAYERS.values())
    # optax's init: the optimizer phase
    assert {p[0] for p in _bytes_at(tree, "peak_live_bytes.optimizer_state")} == {"optimizer"}
    assert profile.memory[0].held_at_peak_bytes == profile.memory[0].peak_bytes
    assert "prof.step(state)" in profile.memory_note


@pytest.mark.slow
def test_the_highest_step_end_is_kept(tmp_path):
    """An array held over one step end only: that step end is the peak, and the
    array's bytes are at the line that made it."""
    x = jnp.ones((256, 256))
    f = jax.jit(lambda a: a * 2)
    # compiled before: a step that compiles is timed without its compile, which
    # shifts where the session places a moment among the steps after it
    spike = jnp.ones((1024, 1024))
    with dc_jax.profile(logdir=str(tmp_path), steps=StepRange(1, 3), memory=True, **QUIET) as prof:
        for step in range(5):
            out = f(x)
            spike = jnp.ones((1024, 1024)) if step == 2 else None  # 4 MiB over step 2's end
            prof.step()
    del spike, out
    profile = read_profile(prof.written[0])
    [device] = profile.memory
    low, high, after = device.timeline_bytes
    assert high - low == 4 << 20 and after == low
    assert device.peak_bytes == high and device.peak_step == 2
    line = _line(test_the_highest_step_end_is_kept, "if step == 2")
    temporary = _bytes_at(profile.tree, "peak_live_bytes.temporary")
    assert temporary[("other", f"test_memory.py:{line} test_the_highest_step_end_is_kept")] == (
        4 << 20
    )


def test_state_leaves_name_categories_and_modules_of_a_train_state():
    from flax.training import train_state

    model, x = Wide(), jnp.ones((1, WIDTHS[0]))
    variables = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)
    params = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), variables["params"])
    state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.adam(1e-3))
    leaves = memory.state_leaves(state)
    kernel = state.params["Dense_1"]["kernel"]
    mu = state.opt_state[0].mu["Dense_1"]["kernel"]
    assert leaves[id(kernel)][1:] == ("parameter", ("Dense_1",))
    assert leaves[id(mu)][1:] == ("optimizer_state", ("Dense_1",))
    assert leaves[id(state.opt_state[0].count)][1:] == ("optimizer_state", ())
    assert id(state.step) not in leaves  # the step counter is neither
    assert len(leaves) == 6 + 1 + 12  # params, Adam's count, mu and nu
    assert leaves[id(kernel)][0]() is kernel  # a weak reference: the state is not kept


def test_a_failed_readout_writes_the_window_without_memory(tmp_path, monkeypatch):
    def broken(*args):
        raise RuntimeError("planted")

    monkeypatch.setattr(memory, "_readout", broken)
    f = jax.jit(lambda a: a + 1)
    x = jnp.ones(4)
    with dc_jax.profile(logdir=str(tmp_path), steps=StepRange(0, 1), memory=True, **QUIET) as prof:
        for _ in range(3):
            x = f(x)
            prof.step()
    assert float(x[0]) == 4.0  # training went on
    profile = read_profile(prof.written[0])
    assert profile.memory == [] and profile.memory_missing == list(MEMORY_METRIC_NAMES)
    assert profile.memory_note == "the memory readout failed: RuntimeError"


@pytest.mark.slow
def test_deepcontext_run_tells_the_state_by_what_the_step_returns(tmp_path):
    """``deepcontext run --memory`` on a script that knows no profiler: the
    state its jitted step returns (donated to the next call) holds the
    parameters of MLP 16 → 64 → 10, under the loop's line and their modules."""
    from tests.launch.conftest import SCRIPTS, deepcontext_run, run_profiles

    script = SCRIPTS / "jax_linen.py"
    done = deepcontext_run(tmp_path, "--steps", "2:3", "--memory", str(script))
    assert done.returncode == 0, done.stderr
    [profile] = run_profiles(tmp_path)
    lines = script.read_text().splitlines()
    loop, main = (
        next(n for n, t in enumerate(lines, 1) if t.startswith(text))
        for text in ("        state, loss = train_step(state", "    main()")
    )
    where = ("other", f"jax_linen.py:{main} <module>", f"jax_linen.py:{loop} main", "MLP (MLP)")
    assert _bytes_at(profile.tree, "peak_live_bytes.parameter") == {
        (*where, "MLP/Dense_0 (Dense)"): (16 * 64 + 64) * F32,
        (*where, "MLP/Dense_1 (Dense)"): (64 * 10 + 10) * F32,
    }
    assert "no alloc_bytes or free_bytes" in profile.memory_note
