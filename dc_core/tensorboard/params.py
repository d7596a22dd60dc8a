"""Parsing request parameters: every malformed value becomes `BadRequest` (400).

Routes read query arguments only through these functions, so a value that is
missing, too long, out of range or shaped like a path escape never reaches the
data layer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..model.kinds import KINDS, METRICS

MAX_TEXT = 200
MAX_NODES_PER_REQUEST = 256
_WINDOW_RE = re.compile(r"^(\d{1,12})-(\d{1,12})$")
_INT_RE = re.compile(r"^-?\d{1,12}$")


class BadRequest(ValueError):
    """A malformed or unsafe parameter; answered with HTTP 400."""


class NotFound(LookupError):
    """A well-formed reference to something that does not exist; HTTP 404."""


@dataclass(frozen=True)
class Ref:
    """One window of one rank of one run: the unit a profile file holds."""

    run: str
    rank: int
    window: tuple[int, int]  # (first step, end exclusive)

    def as_dict(self) -> dict:
        return {"run": self.run, "rank": self.rank, "window": format_window(self.window)}


def format_window(window: tuple[int, int]) -> str:
    """The API's id of a window, half-open ``first-endexclusive`` (``5-8``);
    users read `dc_core.model.window.steps_text` (``steps 5–7``), sent beside it."""
    return f"{window[0]}-{window[1]}"


def text(
    args: Mapping[str, str],
    name: str,
    default: str | None = None,
    max_len: int = MAX_TEXT,
    controls: bool = False,
) -> str:
    """Parameter ``name``; control characters are refused unless ``controls``
    (a run's name, which is only ever compared with the names `/runs` listed)."""
    value = args.get(name)
    if value is None or value == "":
        if default is None:
            raise BadRequest(f"missing parameter {name!r}")
        return default
    if len(value) > max_len:
        raise BadRequest(f"parameter {name!r} is longer than {max_len} characters")
    if "\0" in value or (not controls and any(ord(c) < 32 for c in value)):
        raise BadRequest(f"parameter {name!r} holds control characters")
    return value


def integer(
    args: Mapping[str, str], name: str, default: int | None = None, lo: int = 0, hi: int = 2**62
) -> int:
    raw = args.get(name)
    if raw is None or raw == "":
        if default is None:
            raise BadRequest(f"missing parameter {name!r}")
        return default
    if not _INT_RE.match(raw):
        raise BadRequest(f"parameter {name!r} must be an integer")
    value = int(raw)
    if not lo <= value <= hi:
        raise BadRequest(f"parameter {name!r} must be between {lo} and {hi}")
    return value


def number(args: Mapping[str, str], name: str, default: float, lo: float, hi: float) -> float:
    raw = args.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise BadRequest(f"parameter {name!r} must be a number") from None
    if not lo <= value <= hi:  # also rejects NaN
        raise BadRequest(f"parameter {name!r} must be between {lo} and {hi}")
    return value


def choice(args: Mapping[str, str], name: str, options: Sequence[str], default: str) -> str:
    value = args.get(name) or default
    if value not in options:
        raise BadRequest(f"parameter {name!r} must be one of {', '.join(options)}")
    return value


def metric(args: Mapping[str, str], name: str = "metric") -> str:
    return choice(args, name, tuple(METRICS), "cpu_time_ns")


def kind_list(args: Mapping[str, str], name: str = "kinds") -> list[str]:
    """Comma-separated frame kinds (`dc_core.model.kinds.KINDS`); ``all`` or
    nothing means no filter (an empty list)."""
    raw = text(args, name, default="all")
    if raw == "all":
        return []
    kinds = raw.split(",")
    if len(kinds) > len(KINDS) or any(k not in KINDS for k in kinds):
        raise BadRequest(
            f"parameter {name!r} must list frame kinds ({', '.join(KINDS)}), e.g. operator,kernel"
        )
    return list(dict.fromkeys(kinds))


def node_list(args: Mapping[str, str], name: str = "node", size: int | None = None) -> list[int]:
    """Comma-separated node ids, each checked against the tree ``size``."""
    raw = text(args, name, max_len=16 * MAX_NODES_PER_REQUEST)
    parts = raw.split(",")
    if len(parts) > MAX_NODES_PER_REQUEST:
        raise BadRequest(f"at most {MAX_NODES_PER_REQUEST} nodes per request")
    nodes = [integer({name: p}, name, hi=(size - 1) if size else 2**62) for p in parts]
    return list(dict.fromkeys(nodes))


def node(args: Mapping[str, str], size: int, name: str = "node", default: int | None = 0) -> int:
    return integer(args, name, default=default, hi=size - 1)


def run_param(args: Mapping[str, str], name: str = "run") -> str:
    """The run parameter ``name``: any name `/runs` can list (a directory's
    name may hold control characters; the tab shows them escaped), never a
    path out of the logdir."""
    return run_name(text(args, name, controls=True))


def run_name(value: str) -> str:
    """A run is a relative path under the logdir ('.' for the logdir itself);
    anything that could leave it is refused before any lookup."""
    if value == ".":
        return value
    parts = value.replace("\\", "/").split("/")
    if (
        value.startswith(("/", "\\"))
        or "\\" in value
        or ":" in value
        or any(p in ("", ".", "..") for p in parts)
    ):
        raise BadRequest("parameter 'run' must name a run under the logdir")
    return value


def profile_ref(args: Mapping[str, str], prefix: str = "") -> Ref:
    """``run``, ``rank`` and ``window`` (``first-endexclusive``), optionally prefixed (``b_run``)."""
    run = run_param(args, prefix + "run")
    rank = integer(args, prefix + "rank", hi=1 << 24)
    return Ref(run, rank, window(args, prefix + "window"))


def window(args: Mapping[str, str], name: str = "window") -> tuple[int, int]:
    match = _WINDOW_RE.match(text(args, name, max_len=32))
    if not match or int(match[1]) > int(match[2]):
        raise BadRequest(f"parameter {name!r} must look like 5-8 (first step, end exclusive)")
    return int(match[1]), int(match[2])
