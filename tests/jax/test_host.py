"""A JAX window's host time at the Python that spent it (``dc_jax/host.py``):
the rule on literal dispatches, then an eager loop end to end."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")

import jax
import jax.numpy as jnp

import dc_jax
from dc_core.record.config import StepRange
from dc_core.store.logdir import read_profile
from dc_jax import host
from dc_jax.trace import Dispatch

OTHER, FORWARD = 1, 2  # phase frames
# frames: <module>, the loop's line, two ops, JAX's own zeros
MAIN, LOOP, ADD, PAD, ZEROS = (
    10,
    11,
    20,
    21,
    30,
)

ADD_AT = host.Target((FORWARD, MAIN, LOOP, ADD), True)
PAD_AT = host.Target((FORWARD, MAIN, LOOP, PAD), True)
UNLOCATED = host.Target((OTHER, ZEROS), False, located=False)


def _dispatch(
    start: int, duration: int, module: str = "jit_add", line: int = 0, outer: bool = True
) -> Dispatch:
    return Dispatch(start, duration, module, line, outer)


def _moves(dispatches, targets, marks=(0, 1000), compiles=()):
    return host.moves(
        dispatches, lambda i: targets[i], lambda t: OTHER, list(marks), list(compiles)
    )


def test_a_dispatch_goes_to_its_op_and_the_python_between_two_to_the_line_both_hang_from():
    moved = _moves([_dispatch(100, 30), _dispatch(200, 20)], [ADD_AT, PAD_AT])
    assert moved == [
        host.Move(ADD_AT.frames, OTHER, 0, 30),
        host.Move(PAD_AT.frames, OTHER, 0, 20),
        host.Move((FORWARD, MAIN, LOOP), OTHER, 0, 70),  # 130 → 200: the loop's line
    ]


def test_an_unlocated_dispatch_keeps_its_time_and_the_python_around_it_goes_with_its_neighbours():
    moved = _moves(
        [_dispatch(100, 30), _dispatch(150, 10, "jit_broadcast_in_dim"), _dispatch(200, 20)],
        [ADD_AT, UNLOCATED, PAD_AT],
    )
    assert moved == [
        host.Move(ADD_AT.frames, OTHER, 0, 30),
        host.Move(UNLOCATED.frames, OTHER, 0, 10),
        host.Move(PAD_AT.frames, OTHER, 0, 20),
        host.Move((FORWARD, MAIN, LOOP), OTHER, 0, 60),  # 130 → 200 less the zeros' own 10
    ]


def test_compiles_other_threads_nested_calls_and_step_edges_stay_where_they_were_timed():
    dispatches = [
        _dispatch(100, 30),
        _dispatch(105, 10, outer=False),  # the same call, traced inside it
        _dispatch(140, 50, line=1),  # another thread's
        _dispatch(200, 300),  # compiled a new shape: compiling is a phase of its own
        _dispatch(600, 20),
        _dispatch(990, 20),  # runs past the window's last step
    ]
    moved = _moves(dispatches, [ADD_AT] * 6, compiles=[(250, 400)])
    assert moved == [host.Move(ADD_AT.frames, OTHER, 0, 30), host.Move(ADD_AT.frames, OTHER, 0, 20)]


def test_python_across_a_step_boundary_is_not_moved_and_dispatches_keep_their_steps():
    moved = _moves([_dispatch(100, 30), _dispatch(600, 20)], [ADD_AT, ADD_AT], marks=(0, 500, 1000))
    assert moved == [host.Move(ADD_AT.frames, OTHER, 0, 30), host.Move(ADD_AT.frames, OTHER, 1, 20)]


def test_between_two_calls_sharing_no_frame_below_their_phase_goes_to_the_outermost_frame_before():
    elsewhere = host.Target((FORWARD, 12, ADD), True)
    assert host.between(ADD_AT, elsewhere) == (FORWARD, MAIN)
    assert host.between(host.Target((FORWARD, ADD), True), elsewhere) == (FORWARD, 12)
    assert (
        host.between(host.Target((FORWARD, ADD), True), host.Target((FORWARD, PAD), True)) is None
    )


def test_a_program_of_many_ops_is_billed_to_the_frames_its_ops_share():
    placed = [(FORWARD, MAIN, LOOP, ADD), (FORWARD, MAIN, 13, PAD), (3, MAIN, LOOP, PAD)]
    assert host.program_target(placed, OTHER) == host.Target((OTHER, MAIN), False)
    assert host.program_target(placed[:2], OTHER) == host.Target((FORWARD, MAIN), False)
    assert host.program_target([(FORWARD, ADD), (FORWARD, 13, PAD)], OTHER) is None


def test_bounds_shift_by_the_least_and_greatest_per_step_change():
    assert host.bound_shifts([(5, 0, 30), (5, 2, 10), (7, 1, -40)], steps=3) == {
        5: (0, 30),
        7: (-40, 0),
    }


@pytest.mark.slow
def test_an_eager_loop_s_host_time_is_its_line_s_in_every_step(tmp_path):
    x = jnp.ones((60, 16))

    def rowsum(w):
        h = x @ w
        total = jnp.zeros(16)
        for i in range(h.shape[0]):
            total = total + h[i]
        return total

    grad = jax.grad(lambda w: jnp.square(rowsum(w)).mean())
    w = jnp.ones((16, 16))
    with dc_jax.profile(
        logdir=str(tmp_path), steps=StepRange(start=2, count=4), system_interval_ms=0
    ) as prof:
        for _ in range(7):
            w = w - 1e-3 * grad(w)
            w.block_until_ready()
            prof.step()
    (path,) = prof.written
    profile = read_profile(path)
    tree = profile.tree
    cpu = tree.inclusive("cpu_time_ns")
    lines = [
        n
        for n in tree.preorder(0)
        if tree.node_frame(n).kind == "python"
        and tree.node_frame(n).name.endswith("<locals>.rowsum")
    ]
    line = max(lines, key=cpu.__getitem__)
    loop = tree.node_frame(line).line
    adds = [k for k in tree.children(line) if tree.node_frame(k).name == "add"]
    assert adds and all(tree.value(k, "cpu_time_ns") > 0 for k in adds), (
        "each eager add's dispatch is its host time"
    )
    assert cpu[line] > 0.6 * cpu[0], (cpu[line], cpu[0], loop)  # the loop is the step
    other = tree.find("other")
    assert other is None or tree.value(other, "cpu_time_ns") < 0.3 * cpu[0]
    low, high = profile.step_range("cpu_time_ns")
    steps = len(profile.step_times_ns)
    assert 0 < low[line] <= cpu[line] / steps <= high[line], (
        low[line],
        cpu[line] / steps,
        high[line],
    )
