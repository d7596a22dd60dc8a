"""Programs kept apart and op time judged as op time, checked against the raw
``jax.profiler`` trace of the same window (read here, not through ``dc_jax.trace``)."""

from __future__ import annotations

import inspect

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import nnx

from dc_core.analyzer import analyze
from dc_core.record.config import StepRange
from tests.jax import nnx_workloads
from tests.jax.helpers import assert_ops_match_the_trace, nodes
from tests.jax.helpers import profile_with_trace as _profile
from tests.jax.helpers import raw_op_times as _raw_op_times


class Teacher(nn.Module):
    @nn.compact
    def __call__(self, x):
        hidden = nn.relu(nn.Dense(2048)(x))  # Dense_0: the wide one
        return nn.Dense(10)(hidden)


class Student(nn.Module):
    @nn.compact
    def __call__(self, x):
        hidden = nn.relu(nn.Dense(16)(x))
        return nn.Dense(10)(hidden)


def _op_time_under(tree, name: str) -> dict[str, int]:
    """XLA op name → device time of the op nodes below the frame called ``name``."""
    time = tree.inclusive("device_time_ns")
    out: dict[str, int] = {}
    for op in nodes(tree, "operator"):
        if any(f.name == name for f in tree.path_frames(op)):
            detail = tree.node_frame(op).detail
            out[detail] = out.get(detail, 0) + time[op]
    return out


@pytest.mark.slow
def test_two_jitted_applies_of_one_name_keep_their_own_modules_and_times(tmp_path):
    teacher, student = Teacher(), Student()
    x = jnp.ones((64, 256))
    tp, sp = teacher.init(jax.random.PRNGKey(0), x), student.init(jax.random.PRNGKey(1), x)
    t_apply, s_apply = jax.jit(teacher.apply), jax.jit(student.apply)  # both compile to `jit_apply`

    def step():
        jnp.mean((t_apply(tp, x) - s_apply(sp, x)) ** 2).block_until_ready()

    step()  # compiled before the window, as in most jobs
    profile, raw = _profile(tmp_path, step)
    tree = profile.tree
    programs = _raw_op_times(raw)
    by_size = sorted(((sum(ops.values()), p) for p, ops in programs.items()), reverse=True)
    # the 2048-wide one is by far the heaviest
    teacher_id, student_id = (
        by_size[0][1],
        by_size[1][1],
    )

    assert _op_time_under(tree, "Teacher") == programs[teacher_id]
    assert _op_time_under(tree, "Student") == programs[student_id]
    wide = [
        n
        for n in nodes(tree, "operator", "dot_general")
        if any(f.name == "Teacher/Dense_0" for f in tree.path_frames(n))
    ]
    assert len(wide) == 1 and not any(
        f.name.startswith("Student") for f in tree.path_frames(wide[0])
    )
    # FLOPs from the program's shapes: 2·M·K·N per run, 2 runs in the window
    assert tree.value(wide[0], "count") == 2
    assert tree.value(wide[0], "flops") == 2 * (2 * 64 * 256 * 2048)

    # Op time is its own quantity: the shares of the window add to 100% of the ops'
    # time, and the step's host wall time (phase `other`) carries none of it.
    time = tree.inclusive("device_time_ns")
    assert time[0] == sum(sum(ops.values()) for ops in programs.values())
    assert sum(time[n] for n in tree.children(0)) == time[0]
    other = tree.find("other")
    assert other is not None and time[other] == 0 and tree.inclusive("cpu_time_ns")[other] > 0


@pytest.mark.slow
def test_a_jit_made_anew_each_step_keeps_its_line(tmp_path):
    x = jnp.ones((32, 32))

    def step():
        y = jax.jit(lambda v: jnp.tanh(v @ v))(x)  # a new function each step: compiled and dropped
        y.block_until_ready()

    line = inspect.getsourcelines(step)[1] + 1
    profile, raw = _profile(tmp_path, step)
    tree = profile.tree
    ops = nodes(tree, "operator")
    assert ops
    for op in ops:
        frames = tree.path_frames(op)
        assert any(
            f.kind == "python" and f.line == line and f.file.endswith("test_programs.py")
            for f in frames
        ), [f.label() for f in frames]
        # a bare program name: context was lost
        assert not any(f.kind == "compiled" for f in frames)
    assert_ops_match_the_trace(tree, raw)


class _Stack(nnx.Module):
    """An NNX transformer stack, trained with ``nnx.Optimizer``."""

    def __init__(self, dim: int, depth: int, rngs: nnx.Rngs):
        self.blocks = nnx.List([nnx_workloads.Block(dim, 4, rngs) for _ in range(depth)])
        self.head = nnx.Linear(dim, 10, rngs=rngs)

    def __call__(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean(axis=1))


@pytest.mark.slow
def test_attention_hotspot_is_judged_against_op_time_at_its_line(tmp_path):
    train_step, state, (x, y) = nnx_workloads.nnx_training(
        _Stack(64, 2, nnx.Rngs(0)), jnp.ones((8, 32, 64))
    )
    train_step(state, x, y)[1].block_until_ready()
    box = [state]

    def step():
        box[0], loss = train_step(box[0], x, y)
        loss.block_until_ready()

    profile, raw = _profile(tmp_path, step, steps=5, window=StepRange(start=1, count=3))
    tree = profile.tree
    time = tree.inclusive("device_time_ns")
    assert_ops_match_the_trace(tree, raw)
    source, first = inspect.getsourcelines(nnx_workloads.Block.__call__)
    line = first + next(i for i, text in enumerate(source) if "self.attn(" in text)
    label = f"nnx_workloads.py:{line} Block.__call__"
    (summary,) = [f for f in analyze(profile) if f["rule"] == "hotspot"]
    assert summary["evidence"]["metric"] == "device_time_ns"
    attention = [place for place in summary["evidence"]["lines"] if place["label"] == label]
    assert attention, [place["label"] for place in summary["evidence"]["lines"]]
    for place in attention:
        # a share of op time, not of op time plus the steps' host wall time
        assert place["share"] == round(place["time_ns"] / time[0], 4)
        assert place["time_ns"] <= time[0]
