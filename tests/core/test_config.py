"""Config validation, step windows and DEEPCONTEXT_CONFIG precedence."""

from __future__ import annotations

import json

import pytest

from dc_core.config import ENV_VAR, ProfilerConfig, StepRange, TimeRange, resolve


def test_count_zero_names_field_and_range():
    with pytest.raises(ValueError, match=r"steps\.count must be >= 1, got 0"):
        StepRange(count=0)


def test_every_smaller_than_count_is_rejected():
    with pytest.raises(ValueError, match=r"steps\.every must be >= 3"):
        StepRange(start=0, count=3, every=2)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("mode", "full", r"mode must be one of lightweight, comprehensive"),
        ("cpu_sampling_hz", -1, r"cpu_sampling_hz must be in \[0.0, 10000.0\]"),
        ("system_interval_ms", 5, r"system_interval_ms must be 0 or in \[10"),
        ("run", "../escape", r"run must be a relative name"),
        ("native", "yes", r"native must be true or false"),
    ],
)
def test_bad_fields_name_themselves(field, value, message):
    with pytest.raises(ValueError, match=message):
        ProfilerConfig(**{field: value})


def test_single_window_from_start_zero():
    steps = StepRange(start=0, count=2)
    assert [steps.window_of(s) for s in range(4)] == [(0, 2), (0, 2), None, None]


def test_every_and_repeat():
    steps = StepRange(start=2, count=2, every=5, repeat=2)
    windows = {s: steps.window_of(s) for s in range(15)}
    assert [s for s, w in windows.items() if w] == [2, 3, 7, 8]
    assert windows[8] == (7, 9)
    assert steps.next_active(4) == 7 and steps.next_active(9) == 1 << 62


def test_repeat_zero_is_unbounded():
    steps = StepRange(start=0, count=1, every=10, repeat=0)
    assert steps.window_of(10_000) == (10_000, 10_001)
    assert steps.window_of(10_001) is None
    assert steps.next_active(10_001) == 10_010


def test_time_range_validated():
    with pytest.raises(ValueError, match=r"time_range\.duration_s"):
        TimeRange(duration_s=0)


def test_env_inline_json_wins_over_code(monkeypatch):
    monkeypatch.setenv(ENV_VAR, json.dumps({"steps": {"count": 7}, "mode": "comprehensive"}))
    config = resolve(ProfilerConfig(steps=StepRange(start=1, count=2)), cpu_sampling_hz=50)
    assert config.steps == StepRange(start=1, count=7)  # nested fields merge
    assert config.mode == "comprehensive"
    assert config.cpu_sampling_hz == 50


def test_env_yaml_file(monkeypatch, tmp_path):
    path = tmp_path / "dc.yaml"
    path.write_text("logdir: /tmp/x\nsteps:\n  start: 9\n")
    monkeypatch.setenv(ENV_VAR, str(path))
    config = resolve()
    assert config.logdir == "/tmp/x" and config.steps.start == 9


def test_env_unknown_key_is_named(monkeypatch):
    monkeypatch.setenv(ENV_VAR, '{"stepz": 3}')
    with pytest.raises(ValueError, match=r"unknown config field 'stepz'"):
        resolve()


def test_env_unknown_nested_key_is_named(monkeypatch):
    monkeypatch.setenv(ENV_VAR, '{"steps": {"cnt": 3}}')
    with pytest.raises(ValueError, match=r"unknown config field 'steps\.cnt'"):
        resolve()


def test_env_wrong_type_names_dotted_field(monkeypatch):
    monkeypatch.setenv(ENV_VAR, '{"steps": {"count": "three"}}')
    with pytest.raises(ValueError, match=r"steps\.count must be an integer"):
        resolve()


def test_env_missing_file_is_named(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "/nonexistent/dc.json")
    with pytest.raises(ValueError, match=r"/nonexistent/dc\.json"):
        resolve()


def test_invalid_env_fails_when_profiler_is_created(monkeypatch, tmp_path):
    from dc_core.session import Session

    monkeypatch.setenv(ENV_VAR, '{"mode": "everything"}')
    with pytest.raises(ValueError, match="mode must be one of"):
        Session(logdir=str(tmp_path))
