"""Each live program's id is read once (a serialization of the whole
program), not after every compile of every window: an eager ``lax.scan``
compiles anew each step and JAX keeps each program, and reading every one
after each compile made each profiled window's steps 2.8 ms slower than the
last one's (`dc_jax.programs`)."""

from __future__ import annotations

import gc

import pytest

jax = pytest.importorskip("jax")

import jax.numpy as jnp
from jax import lax

import dc_jax
from dc_core.record.config import StepRange
from dc_jax import programs
from dc_jax.programs import ProgramIds


@pytest.fixture
def reads(monkeypatch) -> list[int]:
    """The program ids read from serialized modules, in order."""
    seen: list[int] = []
    plain = programs.program_id

    def counted(serialized: bytes) -> int:
        seen.append(plain(serialized))
        return seen[-1]

    monkeypatch.setattr(programs, "program_id", counted)
    return seen


def _scaled(k: float):
    def scale(x):
        return x * k + 1.0

    return jax.jit(scale)  # every one a program named jit_scale


def test_a_live_programs_id_is_read_once_and_forgotten_when_it_is_gone(reads):
    ids = ProgramIds()
    kept = [_scaled(float(k)) for k in range(12)]
    for f in kept:
        f(jnp.ones(4)).block_until_ready()
    first = ids.live_modules(["jit_scale"])
    assert len(first) == 12 and len(reads) == 12 and all(reads)  # twelve programs, twelve ids
    assert {program for _, program in first} == set(reads)

    assert ids.live_modules(["jit_scale"]).keys() == first.keys() and len(reads) == 12

    one_more = _scaled(99.0)
    one_more(jnp.ones(4)).block_until_ready()
    (new,) = ids.live_modules(["jit_scale"], new_only=True)
    assert len(reads) == 13 and new == ("jit_scale", reads[-1]) and new not in first

    del kept, one_more
    jax.clear_caches()
    gc.collect()
    assert ids.live_modules(["jit_scale"]) == {}
    assert len(ids) == 0  # the ids of programs JAX let go are let go


def test_each_window_reads_the_ids_of_the_programs_it_compiles_only(reads, tmp_path):
    """Three windows in one process over an eager scan, each a session of its
    own: each compiles the scan's forward and backward programs in each
    step, and reads those ids only, not the ones the windows before kept."""
    x = jnp.arange(40 * 8, dtype=jnp.float32).reshape(40, 8) / 100

    def loss(w):
        total, _ = lax.scan(lambda carry, row: (carry + row, None), jnp.zeros(8), x @ w)
        return jnp.square(total).mean()

    grad = jax.grad(loss)
    per_window = []
    for window in range(3):
        before = len(reads)
        with dc_jax.profile(
            logdir=tmp_path / str(window), steps=StepRange(start=1, count=3)
        ) as prof:
            w = jnp.ones((8, 8))
            for _ in range(5):
                w = w - 1e-3 * grad(w)
                w.block_until_ready()
                prof.step()
        per_window.append(len(reads) - before)
    # the 6 it compiled (3 steps, forward and backward), and the 4 compiled
    # since the last window (its step after, this one's step before), as it
    # resolves its trace; the first also every program compiled before it
    assert per_window[1:] == [10, 10] and per_window[0] > 10, per_window
