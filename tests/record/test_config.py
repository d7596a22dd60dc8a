"""Config validation, step windows and DEEPCONTEXT_CONFIG precedence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dc_core.analyzer import RULE_IDS
from dc_core.record.config import (
    ENV_VAR,
    MEMORY_DEFAULT,
    NEVER,
    ProfilerConfig,
    StepRange,
    TimeRange,
    resolve,
)
from dc_core.record.validate import INT64_MAX


def test_count_zero_names_field_and_range():
    with pytest.raises(
        ValueError, match=r"steps\.count must be an integer in \[1, 2\*\*62 - 1\], got 0"
    ):
        StepRange(count=0)


def test_every_smaller_than_count_is_rejected():
    with pytest.raises(ValueError, match=r"steps\.every must be an integer in \[3, "):
        StepRange(start=0, count=3, every=2)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("mode", "full", r"mode must be one of lightweight, comprehensive"),
        (
            "cpu_sampling_hz",
            -1,
            r"cpu_sampling_hz must be a finite number, 0 \(off\) or in \[0.01, 10000.0\]",
        ),
        (
            "system_interval_ms",
            5,
            r"system_interval_ms must be an integer, 0 \(off\) or in \[10, 3600000\]",
        ),
        ("run", "../escape", r"run must be a relative name"),
        pytest.param(
            "native",
            "yes",
            r"native must be true or false",  # the old name, checked as before
            marks=pytest.mark.filterwarnings("ignore::DeprecationWarning"),
        ),
        ("collector", "fast", r"collector must be one of native, reference, got 'fast'"),
        ("memory", "yes", r"memory must be true, false or null, got 'yes'"),
        ("memory", 1, r"memory must be true, false or null, got 1"),
    ],
)
def test_bad_fields_name_themselves(field, value, message):
    with pytest.raises(ValueError, match=message):
        ProfilerConfig(**{field: value})


def _deprecations(record) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, DeprecationWarning)]


@pytest.mark.parametrize("native, collector", [(True, "native"), (False, "reference")])
def test_the_old_name_native_is_collector_with_one_deprecation_warning(native, collector, tmp_path):
    from dc_core.collect import reference
    from dc_core.record.session import Session

    with pytest.warns(DeprecationWarning) as record:
        config = ProfilerConfig(native=native)
    assert len(_deprecations(record)) == 1 and "collector=" in _deprecations(record)[0]
    assert config == ProfilerConfig(collector=collector) and config.collector == collector
    with pytest.warns(DeprecationWarning) as record:
        assert config.native is native  # read under its old name too
    assert len(_deprecations(record)) == 1
    with pytest.warns(DeprecationWarning) as record:
        session = Session(
            logdir=str(tmp_path), native=False, cpu_sampling_hz=0, system_interval_ms=0
        )
    assert len(_deprecations(record)) == 1
    assert type(session.collector) is reference.Collector  # the behaviour of collector="reference"
    session.close()


@pytest.mark.parametrize(
    "text, name", [('{"native": false}', None), ("native: false\n", "dc.yaml")]
)
def test_env_may_still_say_native(text, name, monkeypatch, tmp_path):
    if name is not None:
        (tmp_path / name).write_text(text)
        text = str(tmp_path / name)
    monkeypatch.setenv(ENV_VAR, text)
    with pytest.warns(DeprecationWarning) as record:
        config = resolve(ProfilerConfig(collector="native"))
    assert config.collector == "reference" and len(_deprecations(record)) == 1


def test_native_and_collector_that_disagree_are_refused():
    with pytest.raises(ValueError, match=r"native=False and collector='native' disagree"):
        with pytest.warns(DeprecationWarning):
            ProfilerConfig(native=False, collector="native")


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


def test_memory_is_off_by_default_and_set_by_code_or_the_environment(monkeypatch, tmp_path):
    assert MEMORY_DEFAULT is False
    assert ProfilerConfig().memory is None and ProfilerConfig().collect_memory is False
    assert ProfilerConfig(memory=True).collect_memory is True
    assert ProfilerConfig(memory=False).collect_memory is False
    assert resolve(memory=True).collect_memory is True
    monkeypatch.setenv(ENV_VAR, '{"memory": true}')
    assert resolve(ProfilerConfig(memory=False)).collect_memory is True  # the environment wins
    path = tmp_path / "dc.yaml"
    path.write_text("memory: false\n")
    monkeypatch.setenv(ENV_VAR, str(path))
    assert resolve(ProfilerConfig(memory=True)).memory is False
    monkeypatch.setenv(ENV_VAR, '{"memory": "on"}')
    with pytest.raises(ValueError, match=r"inline JSON\): memory must be true, false or null"):
        resolve()


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
    from dc_core.record.session import Session

    monkeypatch.setenv(ENV_VAR, '{"mode": "everything"}')
    with pytest.raises(ValueError, match="mode must be one of"):
        Session(logdir=str(tmp_path))


# --- issue 11, item 6: bad values that used to pass creation and fail later ------------

NAN, INF = float("nan"), float("inf")


def test_nan_sampling_rate_is_rejected_at_creation():
    # NaN passed both bounds and `nan > 0` is False: the sampler was silently off.
    with pytest.raises(ValueError) as info:
        ProfilerConfig(cpu_sampling_hz=NAN)
    assert (
        str(info.value)
        == "cpu_sampling_hz must be a finite number, 0 (off) or in [0.01, 10000.0], got nan"
    )


def _make(field: str, value):
    """Construct the object holding the dotted ``field`` with ``value``."""
    owner, _, name = field.rpartition(".")
    return {"": ProfilerConfig, "steps": StepRange, "time_range": TimeRange}[owner](**{name: value})


def _case_id(value) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"int-{value.bit_length()}-bits"  # str() of a 5,000-digit int raises
    return str(value)[:40]


#: What each numeric field accepts, as its error message says.
ACCEPTED = {
    "cpu_sampling_hz": "a finite number, 0 (off) or in [0.01, 10000.0]",
    "time_range.start_after_s": "a finite number >= 0.0",
    "time_range.duration_s": "a finite number >= 0.001",
    "system_interval_ms": "an integer, 0 (off) or in [10, 3600000]",
    "max_nodes": "an integer in [1000, 2**63 - 1]",  # the native collector's int64_t
    "steps.start": "an integer in [0, 2**62 - 1]",  # below NEVER: start + count fits the profile's int64
    "steps.count": "an integer in [1, 2**62 - 1]",
    "steps.every": "an integer in [3, 2**62 - 1]",  # at least the default count
    "steps.repeat": "an integer in [0, 2**62 - 1]",
}


# NaN and infinities pass `<` bounds, a tiny rate overflows the native sampler's
# period; floats, strings and bools are not integers.
@pytest.mark.parametrize(
    "field, value, shown",
    [
        ("cpu_sampling_hz", INF, "inf"),
        ("cpu_sampling_hz", -INF, "-inf"),
        ("cpu_sampling_hz", 1e-300, "1e-300"),
        ("cpu_sampling_hz", True, "True"),
        ("cpu_sampling_hz", "100", "'100'"),
        ("time_range.start_after_s", NAN, "nan"),
        ("time_range.start_after_s", INF, "inf"),
        ("time_range.start_after_s", 10**400, "an integer of 1329 bits"),
        ("time_range.duration_s", NAN, "nan"),
        ("time_range.duration_s", INF, "inf"),
        ("time_range.duration_s", False, "False"),
        ("system_interval_ms", NAN, "nan"),
        ("system_interval_ms", 500.0, "500.0"),
        ("system_interval_ms", True, "True"),
        ("max_nodes", "1000", "'1000'"),
        ("max_nodes", -1, "-1"),
        ("max_nodes", 10**5000, "an integer of 16610 bits"),
        ("steps.start", -1, "-1"),
        ("steps.start", NEVER, str(NEVER)),
        ("steps.start", 5.0, "5.0"),
        ("steps.count", True, "True"),
        ("steps.every", 2**64, str(2**64)),
        ("steps.every", "10", "'10'"),
        ("steps.repeat", -1, "-1"),
        ("steps.repeat", NAN, "nan"),
    ],
    ids=_case_id,
)
def test_bad_numbers_are_rejected_at_creation_naming_field_and_range(field, value, shown):
    with pytest.raises(ValueError) as info:
        _make(field, value)
    assert str(info.value) == f"{field} must be {ACCEPTED[field]}, got {shown}"


def test_max_nodes_above_int64_is_rejected_at_creation():
    # The native collector takes an int64_t: 2**63 was a TypeError when the window opened.
    with pytest.raises(ValueError) as info:
        ProfilerConfig(max_nodes=2**63)
    assert (
        str(info.value)
        == "max_nodes must be an integer in [1000, 2**63 - 1], got 9223372036854775808"
    )
    assert ProfilerConfig(max_nodes=INT64_MAX).max_nodes == INT64_MAX


def test_step_fields_stay_below_never_so_windows_fit_int64():
    steps = StepRange(start=NEVER - 1, count=NEVER - 1)
    assert steps.window_of(NEVER - 1) == (NEVER - 1, 2 * NEVER - 2)
    assert 2 * NEVER - 2 < INT64_MAX  # the profile stores step_end as int64


def test_nan_analyzer_threshold_is_rejected_at_creation():
    with pytest.raises(
        ValueError, match=r"^analyzer\.gpu_idle\.min_idle must be a finite number >= 0, got nan$"
    ):
        ProfilerConfig(analyzer={"gpu_idle.min_idle": NAN})


@pytest.mark.parametrize("value", [INF, -0.5, "0.3", None, 10**400], ids=_case_id)
def test_non_numeric_or_negative_analyzer_threshold_is_rejected_at_creation(value):
    with pytest.raises(ValueError, match=r"^analyzer\.hotspot\.top must be a finite number >= 0"):
        ProfilerConfig(analyzer={"hotspot.top": value})


def test_unknown_analyzer_rule_is_rejected_at_creation(tmp_path):
    from dc_core.record.session import Session

    # Before, the analyzer raised at window close and the window's findings were lost.
    with pytest.raises(ValueError) as info:
        Session(logdir=str(tmp_path), analyzer={"gpu_idel.min_idle": 0.5})
    message = str(info.value)
    assert message.startswith(
        "analyzer.gpu_idel.min_idle: unknown analyzer rule 'gpu_idel'; rules: "
    )
    assert all(rule in message for rule in RULE_IDS)


def test_unknown_rule_enabled_switch_is_rejected_at_creation():
    # The analyzer itself accepts any "<rule>.enabled", so a typo turned nothing off.
    with pytest.raises(
        ValueError, match=r"analyzer\.hotspt\.enabled: unknown analyzer rule 'hotspt'"
    ):
        ProfilerConfig(analyzer={"hotspt.enabled": 0})


def test_unknown_threshold_of_known_rule_lists_the_rules_thresholds():
    with pytest.raises(
        ValueError,
        match=r"analyzer\.hotspot\.min: unknown threshold of rule 'hotspot'; "
        r"known: hotspot\.min_share, hotspot\.top, hotspot\.enabled",
    ):
        ProfilerConfig(analyzer={"hotspot.min": 0.1})


@pytest.mark.parametrize("value", [0.5, 2, "off", None])
def test_enabled_switch_other_than_0_or_1_is_rejected_at_creation(value):
    with pytest.raises(
        ValueError, match=r"analyzer\.hotspot\.enabled must be 0 or 1 \(false or true\)"
    ):
        ProfilerConfig(analyzer={"hotspot.enabled": value})


def test_non_string_analyzer_key_is_rejected_at_creation():
    with pytest.raises(ValueError, match=r"analyzer keys must be 'rule\.threshold' strings, got 3"):
        ProfilerConfig(analyzer={3: 0.1})


def test_analyzer_overrides_are_kept_as_checked_floats_and_copied():
    # YAML's `false` is a valid switch; the analyzer wants numbers, so they are stored as floats,
    # and a copy: editing the caller's dict afterwards cannot smuggle a bad key past the checks.
    given = {"hotspot.enabled": False, "hotspot.top": 5}
    config = ProfilerConfig(analyzer=given)
    given["nonsense.key"] = NAN
    assert config.analyzer == {"hotspot.enabled": 0.0, "hotspot.top": 5.0}
    assert all(type(v) is float for v in config.analyzer.values())


def test_run_with_nul_byte_is_rejected_at_creation():
    # mkdir raised at window close: nothing was written.
    with pytest.raises(
        ValueError,
        match=r"^run must be a relative name \(.*\): contains a NUL byte, got 'exp\\x001'$",
    ):
        ProfilerConfig(run="exp\x001")


@pytest.mark.parametrize(
    "run, problem",
    [
        ("/abs/run", "is an absolute path"),
        ("a/../../b", "has a '..' component"),
        ("", "is empty"),
        (".", "is empty"),
        ("a\ud800", "is not valid UTF-8 text"),  # the profile stores the run name as UTF-8
        ("x" * 256, "has a name longer than 255 bytes"),
        ("a/" + "é" * 128, "has a name longer than 255 bytes"),  # bytes, not characters
        (7, "not a string"),
        ("a\nb", r"contains the control character '\\n'"),  # `--run "a\nb"` made such a directory
        ("exp\x1b[2J", r"contains the control character '\\x1b'"),
        (
            "run\u202egpj.exe",
            r"contains the control character '\\u202e'",
        ),  # shows reversed in a listing
        ("a\x85b", r"contains the control character '\\x85'"),
    ],
)
def test_run_that_cannot_be_a_directory_under_logdir_is_rejected_at_creation(run, problem):
    with pytest.raises(
        ValueError,
        match=rf"run must be a relative name \(names joined by '/', no '\.\.', no control "
        rf"characters, "
        rf"each name at most 255 bytes of UTF-8\): {problem}",
    ):
        ProfilerConfig(run=run)


@pytest.mark.parametrize("run", ["exp", "exp/validation", "x" * 255, "runs/é-1", "a b:c"])
def test_nested_and_unusual_but_valid_runs_are_accepted(run):
    assert ProfilerConfig(run=run).run == run


def test_logdir_with_nul_byte_is_rejected_at_creation():
    with pytest.raises(
        ValueError, match=r"logdir must be a path without NUL bytes, got 'runs\\x00'"
    ):
        ProfilerConfig(logdir="runs\x00")


def test_logdir_path_object_is_stored_as_str(tmp_path):
    assert ProfilerConfig(logdir=tmp_path).logdir == str(tmp_path)


def test_bad_value_is_shown_bounded_in_the_message():
    with pytest.raises(ValueError) as info:
        ProfilerConfig(mode="x" * 10_000)
    assert len(str(info.value)) < 200


# --- DEEPCONTEXT_CONFIG: every error names the variable, and the file when there is one ---


def _env_error(monkeypatch, raw: str) -> str:
    monkeypatch.setenv(ENV_VAR, raw)
    with pytest.raises(ValueError) as info:
        resolve()
    return str(info.value)


def test_non_utf8_config_file_names_variable_and_path(monkeypatch, tmp_path):
    path = tmp_path / "dc.yaml"
    path.write_bytes(b"run: caf\xe9\n")  # Latin-1
    message = _env_error(monkeypatch, str(path))
    assert message == f"{ENV_VAR} file {str(path)!r} is not UTF-8 text (byte 0xe9 at offset 8)"


def test_config_file_that_is_a_directory_names_variable_and_path(monkeypatch, tmp_path):
    message = _env_error(monkeypatch, str(tmp_path))
    assert message == f"{ENV_VAR} file {str(tmp_path)!r} is a directory, not a config file"


def test_unreadable_config_file_names_variable_and_path(monkeypatch, tmp_path):
    path = tmp_path / "dc.json"
    path.write_text("{}")

    def denied(self, *args, **kwargs):  # chmod 000 does not stop root, which CI may be
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "open", denied)
    assert (
        _env_error(monkeypatch, str(path))
        == f"{ENV_VAR} file {str(path)!r}: cannot read: Permission denied"
    )


def test_config_path_too_long_names_variable(monkeypatch):
    # Not inline JSON, so taken as a path: stat() raised OSError (not ValueError) before.
    message = _env_error(monkeypatch, "[" * 5000)
    assert message.startswith(f"{ENV_VAR} file '[[[") and "cannot read" in message
    assert "inline JSON must start with '{'" in message
    assert len(message) < 1200


@pytest.mark.parametrize(
    "name, text, parser",
    [
        ("dc.yaml", "steps: [\n", "YAML"),
        ("dc.json", '{"steps": ', "JSON"),
        ("dc.json", "[" * 100_000, "JSON"),
    ],
)
def test_malformed_config_file_names_variable_and_path(monkeypatch, tmp_path, name, text, parser):
    path = tmp_path / name
    path.write_text(text)
    assert _env_error(monkeypatch, str(path)).startswith(
        f"{ENV_VAR} file {str(path)!r}: cannot parse as {parser}: "
    )


@pytest.mark.parametrize(
    "raw", ['{"steps": ', '{"max_nodes": ' + "1" * 5000 + "}", '{"a":' * 100_000]
)
def test_malformed_inline_json_names_variable(monkeypatch, raw):
    # Too many digits and deep nesting raised a bare ValueError / RecursionError before.
    assert _env_error(monkeypatch, raw).startswith(f"{ENV_VAR} (inline JSON) is not valid JSON: ")


def test_config_file_holding_a_list_names_variable_and_path(monkeypatch, tmp_path):
    path = tmp_path / "dc.yaml"
    path.write_text("- 1\n")
    message = _env_error(monkeypatch, str(path))
    assert message == f"{ENV_VAR} file {str(path)!r} must hold an object of config fields, got list"


def test_huge_config_file_is_refused_by_name(monkeypatch, tmp_path):
    path = tmp_path / "dc.json"
    path.write_bytes(b" " * (2 << 20))
    assert _env_error(monkeypatch, str(path)).startswith(
        f"{ENV_VAR} file {str(path)!r} is larger than 1048576 bytes"
    )


def test_nan_in_config_file_names_variable_path_and_field(monkeypatch, tmp_path):
    path = tmp_path / "dc.yaml"
    path.write_text("cpu_sampling_hz: .nan\nanalyzer:\n  hotspot.top: .inf\n")
    message = _env_error(monkeypatch, str(path))
    assert message == (
        f"{ENV_VAR} file {str(path)!r}: cpu_sampling_hz must be a finite number, "
        "0 (off) or in [0.01, 10000.0], got nan"
    )


def test_nan_in_inline_json_names_variable_and_field(monkeypatch):
    message = _env_error(monkeypatch, '{"time_range": {"duration_s": NaN}}')
    assert (
        message
        == f"{ENV_VAR} (inline JSON): time_range.duration_s must be a finite number >= 0.001, got nan"
    )


def test_config_file_with_byte_order_mark_is_read(monkeypatch, tmp_path):
    path = tmp_path / "dc.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"max_nodes": 2000}).encode())
    monkeypatch.setenv(ENV_VAR, str(path))
    assert resolve().max_nodes == 2000
