"""Value checks behind `ProfilerConfig`: each raises ``ValueError`` naming the
dotted field and what it accepts.

A value that passes here must not fail later: a window opening or closing is
too late to tell the user (the sampler silently off, findings lost, nothing
written), so bounds follow what the native collector, the filesystem, the
profile format and the analyzer accept.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..model.rules import DEFAULTS, RULE_IDS

#: Largest value the native collector takes for ``max_nodes`` (a C++ ``int64_t``).
INT64_MAX = (1 << 63) - 1
#: Longest name a POSIX filesystem takes for one path component (NAME_MAX).
NAME_MAX = 255


def check_int(
    name: str, value: Any, minimum: int, maximum: int = INT64_MAX, off: bool = False
) -> None:
    """Raise unless ``value`` is an int (a bool is not) in [minimum, maximum], or 0 when ``off``."""
    ok = isinstance(value, int) and not isinstance(value, bool)
    _require(
        name,
        value,
        ok and (minimum <= value <= maximum or (off and value == 0)),
        "an integer",
        minimum,
        maximum,
        off,
    )


def check_number(
    name: str, value: Any, minimum: float, maximum: float | None = None, off: bool = False
) -> None:
    """Raise unless ``value`` is a finite int or float (a bool is not) in range, or 0 when ``off``.

    NaN and infinities fail every comparison or pass every bound, so they are
    refused by name rather than left to whatever a later ``<`` makes of them."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and _finite(value)
    in_range = ok and (
        minimum <= value and (maximum is None or value <= maximum) or (off and value == 0)
    )
    _require(name, value, in_range, "a finite number", minimum, maximum, off)


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float: no rule or thread can use it
        return False


def _require(
    name: str, value: Any, ok: bool, kind: str, minimum: float, maximum: float | None, off: bool
) -> None:
    if ok:
        return
    accepted = (
        f">= {_bound(minimum)}" if maximum is None else f"in [{_bound(minimum)}, {_bound(maximum)}]"
    )
    raise ValueError(
        f"{name} must be {kind}{', 0 (off) or' if off else ''} {accepted}, got {shown(value)}"
    )


def _bound(n: float) -> str:
    """``2**62 - 1`` reads better than 4611686018427387903."""
    if isinstance(n, int) and n >= 1 << 31 and (n + 1) & n == 0:
        return f"2**{n.bit_length()} - 1"
    return str(n)


def shown(value: Any, limit: int = 80) -> str:
    """``repr`` for an error message, bounded (a 5,000-digit int cannot even be printed)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"
    try:
        text = repr(value)
    except Exception:  # a user object's broken __repr__
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_logdir(logdir: Any) -> str:
    """``logdir`` as a str; it may be absolute or hold ``..`` (it is the user's
    own directory), but a NUL or an unencodable name would only fail at the first write."""
    try:
        text = os.fspath(logdir)
    except TypeError:
        text = None
    if not isinstance(text, str) or not text:
        raise ValueError(f"logdir must be a non-empty path, got {shown(logdir)}")
    try:
        if b"\0" in os.fsencode(text):
            raise ValueError(f"logdir must be a path without NUL bytes, got {shown(text)}")
    except UnicodeEncodeError:
        raise ValueError(f"logdir is not encodable as a file name, got {shown(text)}") from None
    return text


#: C0 and C1 control characters, DEL and the bidirectional embeddings,
#: overrides and isolates (a regex class body): what a terminal acts on rather
#: than shows. A directory name holding one prints as something else.
CONTROL_CHARACTERS = "\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[{CONTROL_CHARACTERS}]")


def check_run(run: Any) -> None:
    """A run is one or more names joined by ``/`` (eval loops nest as ``<run>/<loop>``),
    always under ``logdir``; the name is also stored in each profile as UTF-8."""
    problem = None
    if not isinstance(run, str):
        problem = "not a string"
    elif "\0" in run:
        problem = "contains a NUL byte"
    elif control := _CONTROL.search(run):
        problem = f"contains the control character {control.group()!r}"
    else:
        parts = Path(run).parts
        try:
            sizes = [len(part.encode("utf-8")) for part in parts]
        except UnicodeEncodeError:
            problem = "is not valid UTF-8 text"
        else:
            if not parts:
                problem = "is empty"
            elif Path(run).is_absolute():
                problem = "is an absolute path"
            elif ".." in parts:
                problem = "has a '..' component"
            elif max(sizes) > NAME_MAX:
                problem = f"has a name longer than {NAME_MAX} bytes"
    if problem:
        raise ValueError(
            f"run must be a relative name (names joined by '/', no '..', no control characters, each name at most "
            f"{NAME_MAX} bytes of UTF-8): {problem}, got {shown(run)}"
        )


def check_thresholds(overrides: Any) -> dict[str, float]:
    """Threshold overrides checked as the analyzer will read them: known rule,
    known threshold, a finite number (0 or 1 for ``enabled``); returned as floats."""
    if not isinstance(overrides, Mapping):
        raise ValueError(
            f"analyzer must be a mapping of threshold overrides, got {shown(overrides)}"
        )
    if not overrides:
        return {}
    checked = {}
    for key, value in overrides.items():
        if not isinstance(key, str):
            raise ValueError(f"analyzer keys must be 'rule.threshold' strings, got {shown(key)}")
        name = f"analyzer.{key}"
        rule, _, threshold = key.partition(".")
        if threshold == "enabled" and rule in RULE_IDS:
            if isinstance(value, (int, float)) and value in (0, 1):  # a bool too: YAML's false
                checked[key] = float(value)
                continue
            raise ValueError(f"{name} must be 0 or 1 (false or true), got {shown(value)}")
        if key not in DEFAULTS:
            rules = sorted({*RULE_IDS, *(k.partition(".")[0] for k in DEFAULTS)})
            if rule not in rules:
                raise ValueError(
                    f"{name}: unknown analyzer rule {rule!r}; rules: {', '.join(rules)}"
                )
            known = sorted(k for k in DEFAULTS if k.startswith(rule + "."))
            known += [f"{rule}.enabled"] if rule in RULE_IDS else []
            raise ValueError(
                f"{name}: unknown threshold of rule {rule!r}; known: {', '.join(known)}"
            )
        # Every threshold is a share, ratio, count, time or percentage: never negative.
        check_number(name, value, 0)
        checked[key] = float(value)
    return checked
