"""What to profile and where to write: `ProfilerConfig`, `StepRange`, `TimeRange`.

Every field is validated at construction; an error names the dotted field and
the accepted range. ``DEEPCONTEXT_CONFIG`` (inline JSON, or a path to a JSON or
YAML file) overrides fields so a job can be re-profiled without code changes.
The checks themselves live in `validate`: a value that passes construction
must not fail when a window opens or closes.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import stat
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .validate import (
    INT64_MAX,
    check_int,
    check_logdir,
    check_number,
    check_run,
    check_thresholds,
    shown,
)

ENV_VAR = "DEEPCONTEXT_CONFIG"
MODES = ("lightweight", "comprehensive")
#: How framework operators are captured: natively when the extension builds, or forced.
CAPTURES = ("auto", "native", "python")
#: Which collector records: the C++ one (falling back, with a warning, to the
#: reference one where it is not built), or the pure-Python reference one.
COLLECTORS = ("native", "reference")
#: Whether windows collect memory by context when ``memory`` is None: off,
#: since it hooks the allocator and marks every parameter and optimizer state.
MEMORY_DEFAULT = False
#: A step no window reaches; step fields stay below it, so ``start + count``
#: still fits the profile's int64 step fields.
NEVER = 1 << 62
#: A config file is a few lines; anything bigger is the wrong path.
MAX_CONFIG_BYTES = 1 << 20


@dataclass(frozen=True)
class StepRange:
    """Windows of ``count`` steps from ``start``; with ``every``, a new window
    every ``every`` steps, ``repeat`` times (``0`` = unbounded)."""

    start: int = 5
    count: int = 3
    every: int | None = None
    repeat: int = 1

    def __post_init__(self) -> None:
        check_int("steps.start", self.start, 0, NEVER - 1)
        check_int("steps.count", self.count, 1, NEVER - 1)
        if self.every is not None:
            check_int("steps.every", self.every, self.count, NEVER - 1)
        check_int("steps.repeat", self.repeat, 0, NEVER - 1)

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
        """The first step at or after ``step`` that lies in a window (`NEVER` if none)."""
        if step < self.start:
            return self.start
        every = self.every or (self.count if self.repeat != 1 else None)
        if every is None:
            return step if step < self.start + self.count else NEVER
        index, offset = divmod(step - self.start, every)
        if offset >= self.count:
            index, offset = index + 1, 0
            step = self.start + index * every
        if self.repeat and index >= self.repeat:
            return NEVER
        return step


@dataclass(frozen=True)
class TimeRange:
    """A window opening at the first step boundary ``start_after_s`` seconds after
    the profiler started and closing at the first boundary ``duration_s`` later."""

    start_after_s: float = 0.0
    duration_s: float = 10.0

    def __post_init__(self) -> None:
        check_number("time_range.start_after_s", self.start_after_s, 0.0)
        check_number("time_range.duration_s", self.duration_s, 1e-3)


@dataclass(frozen=True)
class ProfilerConfig:
    """Everything DeepContext needs to know about one profiled job.

    Args:
        logdir: Directory TensorBoard reads; profiles go under
            ``<logdir>/<run>/plugins/deepcontext/``.
        run: Run name (a subdirectory of ``logdir``, ``/`` nests); None writes into ``logdir``.
        steps: Step windows to profile (ignored when ``time_range`` is set).
        time_range: Profile by wall time instead of step numbers.
        mode: ``"lightweight"`` (Python + framework context) or
            ``"comprehensive"`` (adds native C/C++ frames).
        cpu_sampling_hz: CPU sampler rate inside windows; 0 turns it off.
        system_interval_ms: System monitor interval inside windows; 0 turns it off.
        max_nodes: Cap on context-tree nodes per window (drops are counted).
        collector: ``"native"``: the C++ collector (where it is not built,
            the reference one, with a warning); ``"reference"``: the
            pure-Python reference collector.
        capture: How PyTorch operators are captured: ``"auto"`` (the native
            ``RecordFunction`` path when its extension builds and loads, else
            the Python path with one warning), ``"native"`` (the same, named
            as wanted), or ``"python"`` (force the Python function-mode path).
            The profile's environment says which ran (``capture``).
        record_shapes: Read operator inputs and outputs for the ``flops``
            (matmul FLOPs) and ``alloc_bytes`` (bytes of fresh outputs)
            metrics; on a GPU ``alloc_bytes`` come from the allocator's
            events either way. None (the default): in comprehensive windows
            only, since torch boxes every operator's arguments once any
            profiler asks for them, about 4% of a small GPT step
            (``benchmarks/torch_overhead.py``).
        memory: Collect memory by context: bytes allocated, freed and live
            at the window's peak per node, by category (parameter, gradient,
            optimizer_state, saved_for_backward, temporary, input); PyTorch's
            native capture path only. None (the default): `MEMORY_DEFAULT`
            (read it as ``config.collect_memory``).
        analyzer: Threshold overrides, ``{"rule.threshold": value}``, checked
            against the analyzer's rules and thresholds; ``"rule.enabled": 0``
            turns a rule off. Stored as a copy, so later edits cannot bypass the checks.
        profile_eval: Also profile validation/test loops, as their own windows.
        enabled: False turns every integration into a no-op.
        native: The old name of ``collector`` (``True`` is ``"native"``,
            ``False`` is ``"reference"``), accepted with a ``DeprecationWarning``;
            ``config.native`` reads it the same way.

    Raises:
        ValueError: a field is out of range, naming the dotted field and the accepted range.
    """

    logdir: str = "runs/deepcontext"
    run: str | None = None
    steps: StepRange = field(default_factory=StepRange)
    time_range: TimeRange | None = None
    mode: str = "lightweight"
    cpu_sampling_hz: float = 100.0
    system_interval_ms: int = 500
    max_nodes: int = 500_000
    collector: str = "native"
    capture: str = "auto"
    record_shapes: bool | None = None
    memory: bool | None = None
    analyzer: Mapping[str, float] = field(default_factory=dict)
    profile_eval: bool = False
    enabled: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "logdir", check_logdir(self.logdir))
        if self.run is not None:
            check_run(self.run)
        if not isinstance(self.steps, StepRange):
            raise ValueError(f"steps must be a StepRange, got {type(self.steps).__name__}")
        if self.time_range is not None and not isinstance(self.time_range, TimeRange):
            raise ValueError(
                f"time_range must be a TimeRange, got {type(self.time_range).__name__}"
            )
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {shown(self.mode)}")
        if self.collector not in COLLECTORS:
            raise ValueError(
                f"collector must be one of {', '.join(COLLECTORS)}, got {shown(self.collector)}"
            )
        if self.capture not in CAPTURES:
            raise ValueError(
                f"capture must be one of {', '.join(CAPTURES)}, got {shown(self.capture)}"
            )
        # A positive rate below 0.01 Hz samples nothing in a window of steps, and far
        # below it the native sampler's period overflows its int64 nanoseconds.
        check_number("cpu_sampling_hz", self.cpu_sampling_hz, 0.01, 10_000.0, off=True)
        check_int("system_interval_ms", self.system_interval_ms, 10, 3_600_000, off=True)
        check_int("max_nodes", self.max_nodes, 1_000, INT64_MAX)
        for flag in ("profile_eval", "enabled"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"{flag} must be true or false, got {shown(getattr(self, flag))}")
        for flag in ("record_shapes", "memory"):  # true, false, or None: the default
            value = getattr(self, flag)
            if value is not None and not isinstance(value, bool):
                raise ValueError(f"{flag} must be true, false or null, got {shown(value)}")
        object.__setattr__(self, "analyzer", check_thresholds(self.analyzer))

    @property
    def native(self) -> bool:
        """Deprecated: whether ``collector`` is ``"native"`` (its old name)."""
        warnings.warn(
            "ProfilerConfig.native is deprecated: read collector ('native' or 'reference')",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.collector == "native"

    @property
    def shapes(self) -> bool:
        """Whether windows read operator shapes (``record_shapes``, else by mode)."""
        return self.mode == "comprehensive" if self.record_shapes is None else self.record_shapes

    @property
    def collect_memory(self) -> bool:
        """Whether windows collect memory by context (``memory``, else `MEMORY_DEFAULT`)."""
        return MEMORY_DEFAULT if self.memory is None else self.memory


#: Names a config takes besides its fields: old name -> field.
_RENAMED = {"native": "collector"}
_UNSET: Any = object()
_dataclass_init = ProfilerConfig.__init__


@functools.wraps(_dataclass_init)
def _init(self: ProfilerConfig, *args: Any, native: Any = _UNSET, **kwargs: Any) -> None:
    if native is not _UNSET:
        warnings.warn(
            "ProfilerConfig(native=...) is deprecated: use collector='native' or collector='reference'",
            DeprecationWarning,
            stacklevel=2,
        )
        kwargs["collector"] = _collector_of(native, kwargs.get("collector"))
    _dataclass_init(self, *args, **kwargs)


# The old name stays a keyword of the constructor, not a field: a field would be
# in repr, equality, `asdict` and `replace`, which know only `collector`.
ProfilerConfig.__init__ = _init  # type: ignore[method-assign]


def _collector_of(native: Any, collector: Any) -> Any:
    """The `collector` the old ``native`` flag names."""
    if not isinstance(native, bool):
        raise ValueError(f"native must be true or false, got {shown(native)}")
    wanted = "native" if native else "reference"
    if collector is not None and collector != wanted:
        raise ValueError(
            f"native={native} and collector={shown(collector)} disagree; give collector only"
        )
    return wanted


_NESTED = {"steps": StepRange, "time_range": TimeRange}


def _build(cls: type, data: Mapping[str, Any], prefix: str = "") -> Any:
    """Construct ``cls`` from a mapping, naming the dotted field of any error."""
    known = {f.name for f in dataclasses.fields(cls)}
    accepted = known | set(_RENAMED) if cls is ProfilerConfig else known
    for key in data:
        if key not in accepted:
            raise ValueError(
                f"unknown config field '{prefix}{key}'; known fields: {', '.join(sorted(known))}"
            )
    values = {}
    for key, value in data.items():
        nested = _NESTED.get(key) if cls is ProfilerConfig else None
        if nested is not None and isinstance(value, Mapping):
            value = _build(nested, value, f"{key}.")
        elif nested is not None and value is not None and not isinstance(value, nested):
            raise ValueError(
                f"{key} must be an object with fields of {nested.__name__}, got {shown(value)}"
            )
        values[key] = value
    return cls(**values)


def merge(config: ProfilerConfig, data: Mapping[str, Any]) -> ProfilerConfig:
    """Return ``config`` with the fields in ``data`` replaced (nested mappings merge)."""
    current = {f.name: getattr(config, f.name) for f in dataclasses.fields(ProfilerConfig)}
    for old, new in _RENAMED.items():
        if old in data and new not in data:  # the override's old name replaces the field
            del current[new]
    for key, value in data.items():
        base = current.get(key)
        if key in _NESTED and isinstance(value, Mapping) and base is not None:
            value = {**dataclasses.asdict(base), **value}
        current[key] = value
    unknown = set(data) - {f.name for f in dataclasses.fields(ProfilerConfig)} - set(_RENAMED)
    if unknown:
        _build(ProfilerConfig, data)  # raises naming the unknown key
    return _build(ProfilerConfig, current)


def env_overrides(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Fields set by ``DEEPCONTEXT_CONFIG`` (inline JSON or a JSON/YAML file).

    Raises:
        ValueError: naming ``DEEPCONTEXT_CONFIG`` (and the file) when it cannot be
            read or parsed, or holds something other than an object."""
    return _env(environ)[0]


def _env(environ: Mapping[str, str] | None = None) -> tuple[dict[str, Any], str]:
    """The overrides and where they came from, for error messages."""
    raw = (os.environ if environ is None else environ).get(ENV_VAR, "").strip()
    if not raw:
        return {}, ENV_VAR
    if raw.startswith("{"):
        where = f"{ENV_VAR} (inline JSON)"
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # also int-digit limits, deep nesting
            raise ValueError(f"{where} is not valid JSON: {exc}") from None
    else:
        where = f"{ENV_VAR} file {shown(raw, 1024)}"
        data = _parse_file(Path(raw), where)
    if not isinstance(data, dict):
        raise ValueError(f"{where} must hold an object of config fields, got {type(data).__name__}")
    return data, where


def read_file(path: str | Path) -> dict[str, Any]:
    """The config fields in a JSON or YAML file (``.yaml``/``.yml``).

    Raises:
        ValueError: naming the file, when it cannot be read or parsed, or
            holds something other than an object.
    """
    where = f"config file {shown(str(path), 1024)}"
    data = _parse_file(Path(path), where)
    if not isinstance(data, dict):
        raise ValueError(f"{where} must hold an object of config fields, got {type(data).__name__}")
    return data


def _parse_file(path: Path, where: str) -> Any:
    text = _read_config_file(path, where)
    yaml_file = path.suffix in (".yaml", ".yml")
    try:
        if yaml_file:
            import yaml

            return yaml.safe_load(text)
        return json.loads(text)
    except Exception as exc:  # yaml and json raise different types (and RecursionError)
        raise ValueError(
            f"{where}: cannot parse as {'YAML' if yaml_file else 'JSON'}: {exc}"
        ) from None


def _read_config_file(path: Path, where: str) -> str:
    hint = "(inline JSON must start with '{')"
    try:
        info = path.stat()
    except OSError as exc:
        raise ValueError(f"{where}: cannot read: {exc.strerror or exc} {hint}") from None
    if stat.S_ISDIR(info.st_mode):
        raise ValueError(f"{where} is a directory, not a config file")
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{where} is not a regular file")
    try:
        with path.open("rb") as file:
            data = file.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"{where}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ValueError(f"{where} is larger than {MAX_CONFIG_BYTES} bytes; not a config file")
    try:
        return data.decode("utf-8-sig")  # an editor's byte-order mark is still UTF-8
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{where} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None


def resolve(config: ProfilerConfig | None = None, **overrides: Any) -> ProfilerConfig:
    """The effective config: ``config`` (or defaults), then keyword overrides,
    then ``DEEPCONTEXT_CONFIG`` (the environment wins, so a job can be
    re-profiled without code changes).

    Raises:
        ValueError: a bad field (named), or a bad ``DEEPCONTEXT_CONFIG``
            (named with its file, also before the message of a bad field it sets)."""
    if config is not None and not isinstance(config, ProfilerConfig):
        raise ValueError(f"config must be a ProfilerConfig, got {type(config).__name__}")
    result = config or ProfilerConfig()
    if overrides:
        result = merge(result, overrides)
    env, where = _env()
    if env:
        try:
            result = merge(result, env)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
    return result
