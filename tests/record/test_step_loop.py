"""The plain-loop base dc_torch and dc_jax share, on a framework-free subclass."""

from __future__ import annotations

import pytest

from dc_core.record.loop import StepLoop
from dc_core.record.phase_scopes import NO_PHASE
from dc_core.store.logdir import load_profiles

QUIET = dict(cpu_sampling_hz=0, system_interval_ms=0)


class Loop(StepLoop):
    def __init__(self, **overrides):
        super().__init__(
            None, framework="python", default_phase="forward", **{**QUIET, **overrides}
        )
        self.events = []

    def _on_start(self):
        self.events.append(("start", self.current_step))

    def _on_stop(self):
        self.events.append(("stop", self.current_step))


def test_steps_count_from_zero_and_the_window_holds_its_steps(tmp_path):
    with Loop(logdir=str(tmp_path), steps={"start": 2, "count": 2}) as prof:
        assert prof.start() is prof and prof.current_step == 0
        for _ in range(5):
            with prof.phase("optimizer"):
                sum(range(100))
            prof.step()
    assert prof.current_step == 5 and prof.events == [("start", 0), ("stop", 5)]
    (profile,), errors = load_profiles(tmp_path)
    assert errors == [] and profile.steps == (2, 4) and len(profile.step_times_ns) == 2
    assert profile.tree.find("optimizer") is not None
    assert prof.written == [
        tmp_path / "plugins" / "deepcontext" / prof.written[0].parent.name / "steps-2-3.pb"
    ]


def test_outside_a_window_a_phase_does_nothing(tmp_path):
    prof = Loop(logdir=str(tmp_path), steps={"start": 100, "count": 1}).start()
    assert prof.phase("dataloader") is NO_PHASE
    prof.stop()
    prof.stop()  # idempotent
    assert prof.written == [] and prof.events == [("start", 0), ("stop", 0), ("stop", 0)]


def test_a_bad_config_fails_at_construction_and_user_errors_pass_through(tmp_path):
    with pytest.raises(ValueError, match="steps.count"):
        Loop(logdir=str(tmp_path), steps={"start": 0, "count": 0})
    with pytest.raises(KeyError, match="theirs"):
        with Loop(logdir=str(tmp_path), steps={"start": 0, "count": 3}) as prof:
            prof.step()
            raise KeyError("theirs")
    assert [p.name for p in prof.written] == ["steps-0-1.pb"]  # the steps seen are written
    assert prof.events[-1] == ("stop", 1)
