"""What to profile and where to write: `ProfilerConfig`, `StepRange`, `TimeRange`.

Every field is validated at construction; an error names the dotted field and
the accepted range. ``DEEPCONTEXT_CONFIG`` (inline JSON, or a path to a JSON or
YAML file) overrides fields so a job can be re-profiled without code changes.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

ENV_VAR = "DEEPCONTEXT_CONFIG"
MODES = ("lightweight", "comprehensive")


def _check_int(name: str, value: Any, minimum: int, maximum: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        accepted = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ValueError(f"{name} must be {accepted}, got {value}")


def _check_number(name: str, value: Any, minimum: float, maximum: float | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        accepted = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ValueError(f"{name} must be {accepted}, got {value}")


@dataclass(frozen=True)
class StepRange:
    """Windows of ``count`` steps from ``start``; with ``every``, a new window
    every ``every`` steps, ``repeat`` times (``0`` = unbounded)."""

    start: int = 5
    count: int = 3
    every: int | None = None
    repeat: int = 1

    def __post_init__(self) -> None:
        _check_int("steps.start", self.start, 0)
        _check_int("steps.count", self.count, 1)
        if self.every is not None:
            _check_int("steps.every", self.every, self.count)
        _check_int("steps.repeat", self.repeat, 0)

    def window_of(self, step: int) -> tuple[int, int] | None:
        """The window ``(start, end_exclusive)`` holding ``step``, or None.

        Without ``every``, ``repeat`` other than 1 means back-to-back windows."""
        if step < self.start:
            return None
        every = self.every or (self.count if self.repeat != 1 else None)
        if every is None:
            index, offset = 0, step - self.start
        else:
            index, offset = divmod(step - self.start, every)
            if self.repeat and index >= self.repeat:
                return None
        if offset >= self.count:
            return None
        return (step - offset, step - offset + self.count)

    def next_active(self, step: int) -> int:
        """The first step at or after ``step`` that lies in a window (huge if none)."""
        never = 1 << 62
        if step < self.start:
            return self.start
        every = self.every or (self.count if self.repeat != 1 else None)
        if every is None:
            return step if step < self.start + self.count else never
        index, offset = divmod(step - self.start, every)
        if offset >= self.count:
            index, offset = index + 1, 0
            step = self.start + index * every
        if self.repeat and index >= self.repeat:
            return never
        return step


@dataclass(frozen=True)
class TimeRange:
    """A window opening at the first step boundary ``start_after_s`` seconds after
    the profiler started and closing at the first boundary ``duration_s`` later."""

    start_after_s: float = 0.0
    duration_s: float = 10.0

    def __post_init__(self) -> None:
        _check_number("time_range.start_after_s", self.start_after_s, 0.0)
        _check_number("time_range.duration_s", self.duration_s, 1e-3)


@dataclass(frozen=True)
class ProfilerConfig:
    """Everything DeepContext needs to know about one profiled job.

    Args:
        logdir: Directory TensorBoard reads; profiles go under
            ``<logdir>/<run>/plugins/deepcontext/``.
        run: Run name (a subdirectory of ``logdir``); None writes into ``logdir``.
        steps: Step windows to profile (ignored when ``time_range`` is set).
        time_range: Profile by wall time instead of step numbers.
        mode: ``"lightweight"`` (Python + framework context) or
            ``"comprehensive"`` (adds native C/C++ frames).
        cpu_sampling_hz: CPU sampler rate inside windows; 0 turns it off.
        system_interval_ms: System monitor interval inside windows; 0 turns it off.
        max_nodes: Cap on context-tree nodes per window (drops are counted).
        native: Prefer the native collector (falls back with a warning).
        analyzer: Threshold overrides, ``{"rule.threshold": value}``.
        profile_eval: Also profile validation/test loops, as their own windows.
        enabled: False turns every integration into a no-op.
    """

    logdir: str = "runs/deepcontext"
    run: str | None = None
    steps: StepRange = field(default_factory=StepRange)
    time_range: TimeRange | None = None
    mode: str = "lightweight"
    cpu_sampling_hz: float = 100.0
    system_interval_ms: int = 500
    max_nodes: int = 500_000
    native: bool = True
    analyzer: Mapping[str, float] = field(default_factory=dict)
    profile_eval: bool = False
    enabled: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.logdir, (str, os.PathLike)) or not str(self.logdir):
            raise ValueError(f"logdir must be a non-empty path, got {self.logdir!r}")
        object.__setattr__(self, "logdir", str(self.logdir))
        if self.run is not None and (not isinstance(self.run, str) or not _safe_name(self.run)):
            raise ValueError(f"run must be a relative name without '..', got {self.run!r}")
        if not isinstance(self.steps, StepRange):
            raise ValueError(f"steps must be a StepRange, got {type(self.steps).__name__}")
        if self.time_range is not None and not isinstance(self.time_range, TimeRange):
            raise ValueError(f"time_range must be a TimeRange, got {type(self.time_range).__name__}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        _check_number("cpu_sampling_hz", self.cpu_sampling_hz, 0.0, 10_000.0)
        _check_int("system_interval_ms", self.system_interval_ms, 0, 3_600_000)
        if 0 < self.system_interval_ms < 10:
            raise ValueError(f"system_interval_ms must be 0 or in [10, 3600000], got {self.system_interval_ms}")
        _check_int("max_nodes", self.max_nodes, 1_000)
        for flag in ("native", "profile_eval", "enabled"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"{flag} must be true or false, got {getattr(self, flag)!r}")
        if not isinstance(self.analyzer, Mapping):
            raise ValueError(f"analyzer must be a mapping of threshold overrides, got {self.analyzer!r}")
        for key, value in self.analyzer.items():
            _check_number(f"analyzer.{key}", value, float("-inf"))


def _safe_name(name: str) -> bool:
    parts = Path(name).parts
    return bool(parts) and not Path(name).is_absolute() and ".." not in parts


_NESTED = {"steps": StepRange, "time_range": TimeRange}


def _build(cls: type, data: Mapping[str, Any], prefix: str = "") -> Any:
    """Construct ``cls`` from a mapping, naming the dotted field of any error."""
    known = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in known:
            raise ValueError(f"unknown config field '{prefix}{key}'; known fields: {', '.join(sorted(known))}")
    values = {}
    for key, value in data.items():
        nested = _NESTED.get(key) if cls is ProfilerConfig else None
        if nested is not None and isinstance(value, Mapping):
            value = _build(nested, value, f"{key}.")
        elif nested is not None and value is not None and not isinstance(value, nested):
            raise ValueError(f"{key} must be an object with fields of {nested.__name__}, got {value!r}")
        values[key] = value
    return cls(**values)


def merge(config: ProfilerConfig, data: Mapping[str, Any]) -> ProfilerConfig:
    """Return ``config`` with the fields in ``data`` replaced (nested mappings merge)."""
    current = {f.name: getattr(config, f.name) for f in dataclasses.fields(ProfilerConfig)}
    for key, value in data.items():
        base = current.get(key)
        if key in _NESTED and isinstance(value, Mapping) and base is not None:
            value = {**dataclasses.asdict(base), **value}
        current[key] = value
    unknown = set(data) - {f.name for f in dataclasses.fields(ProfilerConfig)}
    if unknown:
        _build(ProfilerConfig, data)  # raises naming the unknown key
    return _build(ProfilerConfig, current)


def env_overrides(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Fields set by ``DEEPCONTEXT_CONFIG`` (inline JSON or a JSON/YAML file)."""
    raw = (os.environ if environ is None else environ).get(ENV_VAR, "").strip()
    if not raw:
        return {}
    if raw.startswith("{"):
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{ENV_VAR} is not valid JSON: {exc}") from None
    else:
        path = Path(raw)
        if not path.is_file():
            raise ValueError(f"{ENV_VAR} names {raw!r}, which is neither inline JSON nor a readable file")
        text = path.read_text()
        try:
            if path.suffix in (".yaml", ".yml"):
                import yaml

                data = yaml.safe_load(text)
            else:
                data = json.loads(text)
        except Exception as exc:  # yaml and json raise different types
            raise ValueError(f"{ENV_VAR} file {raw}: cannot parse: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{ENV_VAR} must hold an object of config fields, got {type(data).__name__}")
    return data


def resolve(config: ProfilerConfig | None = None, **overrides: Any) -> ProfilerConfig:
    """The effective config: ``config`` (or defaults), then keyword overrides,
    then ``DEEPCONTEXT_CONFIG`` (the environment wins, so a job can be
    re-profiled without code changes)."""
    if config is not None and not isinstance(config, ProfilerConfig):
        raise ValueError(f"config must be a ProfilerConfig, got {type(config).__name__}")
    result = config or ProfilerConfig()
    if overrides:
        result = merge(result, overrides)
    env = env_overrides()
    if env:
        result = merge(result, env)
    return result
