"""Every rule's thresholds: the defaults (`dc_core.model.rules.DEFAULTS`,
importable without the analyzer) with a config's or a command's overrides."""

from __future__ import annotations

from collections.abc import Mapping

from ..model.rules import DEFAULTS

__all__ = ["DEFAULTS", "Thresholds"]


class Thresholds:
    """Defaults with overrides applied; unknown keys are an error, not a silent no-op.

    Args:
        overrides: ``{"rule.threshold": value}``.

    Raises:
        ValueError: a key names no known threshold (the message lists the rule's keys).
    """

    def __init__(self, overrides: Mapping[str, float] | None = None) -> None:
        self._values = dict(DEFAULTS)
        for key, value in (overrides or {}).items():
            rule = key.partition(".")[0]
            if key not in DEFAULTS and key != f"{rule}.enabled":
                known = sorted(k for k in DEFAULTS if k.startswith(rule + ".")) or sorted(DEFAULTS)
                raise ValueError(f"unknown analyzer threshold {key!r}; known: {', '.join(known)}")
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"analyzer threshold {key!r} must be a number, got {value!r}")
            self._values[key] = float(value)

    def __getitem__(self, key: str) -> float:
        return self._values[key]

    def enabled(self, rule: str) -> bool:
        return bool(self._values.get(f"{rule}.enabled", 1))
