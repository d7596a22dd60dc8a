"""The wall/monotonic pair that places a window's phases on the JAX trace's clock."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")

from dc_jax import adapter


def test_the_pair_read_without_a_preemption_between_its_reads_wins(monkeypatch):
    # try 1: preempted 5 ms between the monotonic and the wall read; try 2: 400 ns apart
    monotonic = iter([1_000, 5_001_000, 9_000_000, 9_000_400] + [20_000_000, 30_000_000] * 3)
    wall = iter([7_000_000_000, 7_008_000_200] + [7_100_000_000] * 3)
    monkeypatch.setattr(adapter.time, "monotonic_ns", lambda: next(monotonic))
    monkeypatch.setattr(adapter.time, "time_ns", lambda: next(wall))
    assert adapter._clock_pair() == (7_008_000_200, 9_000_200)
