"""``deepcontext run`` ends a step where a training engine's ``step()`` returns
(``dc_torch.launch``), also when a window has wrapped that method in its
optimizer phase before the first update (a time range open while DeepSpeed
starts): the engine is followed, each call runs the class's method as it
stands then, exactly once, and closing takes only the engine's wrapper out."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch

from dc_torch import launch


class Engine:
    """An engine whose ``step()`` updates torch's optimizer, then does more."""

    def __init__(self) -> None:
        self.weight = torch.nn.Parameter(torch.ones(2))
        self.optimizer = torch.optim.SGD([self.weight], lr=0.1)
        self.after_update = 0

    def step(self) -> str:
        self.weight.grad = torch.ones(2)
        self.optimizer.step()
        self.after_update += 1  # the engine's own work after torch's update
        return "stepped"


class Launch:
    """What the steps ask of ``deepcontext run``: here the steps are not
    claimed, so no profiler starts; the test stands in its loop."""

    overrides: dict = {}

    def own_file(self, filename: str) -> bool:
        return filename == __file__

    def claim(self, source: str) -> bool:
        return False


class Loop:
    def __init__(self) -> None:
        self.steps = 0

    def step(self) -> None:
        self.steps += 1

    def stop(self) -> None:
        pass


@pytest.fixture
def window_phase(monkeypatch):
    """The class's ``step()`` wrapped as a window's phase wraps it, counting calls."""
    monkeypatch.setattr(launch, "ENGINES", ((Path(__file__).name, "step"),))
    original = Engine.__dict__["step"]
    calls = []

    @functools.wraps(original)
    def phase(*args, **kwargs):
        calls.append("optimizer")
        return phase.__wrapped__(*args, **kwargs)

    monkeypatch.setattr(Engine, "step", phase)
    return original, calls


def test_an_engine_whose_step_a_window_has_wrapped_is_followed(window_phase):
    original, phase_calls = window_phase
    engine = Engine()
    steps = launch.OptimizerSteps(Launch())
    steps.install()
    try:
        assert engine.step() == "stepped"  # the first update: step 0 ends inside it
        assert steps.engine is not None and steps.engine[0] is engine
        loop = steps.loop = Loop()
        assert engine.step() == "stepped"
        # the step ends where the engine's step returns, its work after the update in it
        assert loop.steps == 1 and engine.after_update == 2
        # through the window's phase, once a call
        assert phase_calls == ["optimizer", "optimizer"]
        Engine.step = original  # the window closes: its wrapper comes off the class
        assert engine.step() == "stepped"
        assert loop.steps == 2 and engine.after_update == 3 and len(phase_calls) == 2
    finally:
        steps.close()
    assert "step" not in vars(engine)  # our wrapper was the engine's alone
    assert Engine.step is original
    engine.step()
    assert loop.steps == 2 and engine.after_update == 4
