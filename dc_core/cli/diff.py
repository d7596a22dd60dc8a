"""``deepcontext diff A B``: two profiles compared by call path, per step.

The comparison is `dc_core.model.diff`'s, the one the tab's Diff shows.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..ensemble import PATH_SEP
from ..model.diff import Comparison, Union, compare, side_of, step_count
from ..model.kinds import at_peak
from ..model.window import steps_text
from ..store.logdir import ProfileFile, max_profile_bytes, read_profile
from ..store.profile import Profile, ProfileError
from .common import CliError, add_read_options, fail, list_logdir, make_console, middle_truncate
from .present import format_value, metrics_with_values

DIFF_VERSION = 1
#: Choices an ambiguous directory's error names at most.
MAX_CHOICES = 8
#: Cells a cut label keeps at least in a fitted path (`fit_path`).
MIN_LABEL = 12

DESCRIPTION = """\
Compare profile B with profile A by call path: per path, the change of its
inclusive value per step (the metric, time by default, divided by each
profile's number of steps) from A to B, with its spread over steps;
significant changes first.

A change is significant when |delta| exceeds how far the node moves between
one step and another in either profile (high - low of its per-step bounds,
the larger of the two); profiles without per-step bounds, or of one step,
have no spread ("?", null in --json), and none of their changes are called
significant. A path whose change one of its children carries (within that
spread) is left out: the child's deeper path says it. Paths only one side
has are listed apart, by their topmost node. A Python line that moved (lines
inserted above it) still matches its function in the same file.

A and B are profile files (steps-<first>-<last>.pb) or directories (a
logdir or a run's directory, searched recursively). A directory must come
down to one profile: pick it with --rank and --steps (the window's first
step), for both sides or one (--a-rank, --b-steps, ...); a directory holding
several is an error that lists them. Selection options do not apply to files.
Exit status 2, with one line on stderr, for a missing or unreadable file,
profiles of different frameworks or modes, or a metric one side lacks."""


def add_parser(subparsers: Any) -> None:
    """Register ``diff`` on the ``deepcontext`` command line."""
    p = subparsers.add_parser(
        "diff",
        help="compare two profiles by call path, per step",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "a", metavar="A", help="the baseline: a profile file, or a directory holding profiles"
    )
    p.add_argument("b", metavar="B", help="the profile compared with it (file or directory)")
    for side, which in (("", "both sides"), ("a-", "A only"), ("b-", "B only")):
        p.add_argument(
            f"--{side}rank", type=int, default=None, metavar="N", help=f"rank N's profile ({which})"
        )
        p.add_argument(
            f"--{side}steps",
            type=int,
            default=None,
            metavar="S",
            help=f"the window starting at step S ({which})",
        )
    p.add_argument(
        "--metric",
        default=None,
        help="metric compared (default: device_time_ns when both profiles have it, else cpu_time_ns)",
    )
    p.add_argument(
        "--top",
        type=int,
        default=20,
        metavar="N",
        help="list at most N changes, and N paths of each side alone (default 20; 0: all)",
    )
    p.add_argument(
        "--min-share",
        type=float,
        default=0.005,
        metavar="F",
        help="list a change (or a path one side alone has) of at least F of the larger side's "
        "total per step (default 0.005: 0.5%%)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help='machine-readable on stdout: {"a", "b", "metric", "step_delta_ns", '
        '"step_delta_running_ns", "changes", "only_a", "only_b"}, values per step in the '
        "metric's unit; each side's \"steps\" is "
        "half-open [first, end): [5, 8] is steps 5-7",
    )
    add_read_options(p)
    p.set_defaults(run=run)


@dataclass
class Loaded:
    """One side: the profile and the file it came from."""

    name: str  # "A" or "B"
    file: str
    profile: Profile

    @property
    def mean_step_ns(self) -> int | None:
        """The mean of its step times, None without them."""
        times = self.profile.step_times_ns
        return round(sum(times) / len(times)) if times else None

    @property
    def mean_running_ns(self) -> int | None:
        """The mean of its step times less the time the step's thread waited,
        runnable, for a CPU (what the host gave to other work); None without
        step times or waits."""
        times, waits = self.profile.step_times_ns, self.profile.step_wait_ns
        if not times or len(waits) != len(times):
            return None
        return round(sum(t - w for t, w in zip(times, waits)) / len(times))

    def who(self) -> str:
        """``A (path)``: how messages name this side."""
        return f"{self.name} ({self.file})"


def run(args: argparse.Namespace) -> int:
    """Compare the two profiles ``args`` names; 2 (one line on stderr) when
    they cannot be read or compared, else 0."""
    if args.top < 0:
        return fail("--top must be >= 0")
    if not 0.0 <= args.min_share <= 1.0:
        return fail("--min-share must be in [0, 1]")
    try:
        limit = max_profile_bytes() if args.max_bytes is None else args.max_bytes
        a = load("A", args.a, _pick(args.a_rank, args.rank), _pick(args.a_steps, args.steps), limit)
        b = load("B", args.b, _pick(args.b_rank, args.rank), _pick(args.b_steps, args.steps), limit)
        metric = check_comparable(a, b, args.metric)
    except (CliError, ValueError) as exc:
        return fail(str(exc))
    union = Union(side_of(a.profile), side_of(b.profile))
    result = compare(union, metric, args.min_share)
    if args.json:
        sys.stdout.write(json.dumps(diff_json(a, b, union, result, args.top)) + "\n")
    else:
        print_diff(make_console(), a, b, union, result, args.top)
    return 0


def _pick(own: int | None, both: int | None) -> int | None:
    return both if own is None else own


def load(name: str, where: str, rank: int | None, start: int | None, limit: int) -> Loaded:
    """The one profile ``where`` names: a file, or the directory's profile of
    ``rank`` and window start ``start``.

    Raises:
        CliError: nothing there, no such profile, several (listed), or the
            file cannot be read (named).
    """
    path = Path(where)
    if path.is_file():
        return Loaded(name, where, _read(path, limit))
    if not path.exists():
        raise CliError(f"{name}: {where}: no such file or directory")
    try:
        files, _ = list_logdir(where, rank, limit)
    except CliError as exc:
        raise CliError(f"{name}: {exc}") from None
    if start is not None:
        starts = sorted({f.steps[0] for f in files})
        files = [f for f in files if f.steps[0] == start]
        if not files:
            raise CliError(
                f"{name}: no window starting at step {start} under {where!r}"
                f"{f' for rank {rank}' if rank is not None else ''}; windows start at "
                + ", ".join(map(str, starts))
            )
    if len(files) > 1:
        pick = "its run's directory, " if len({f.run for f in files}) > 1 else ""
        raise CliError(
            f"{name}: {where!r} holds {len(files)} profiles; pick one by {pick}--rank/--steps "
            f"(--{name.lower()}-rank/--{name.lower()}-steps for {name} alone) or its file: "
            + _choices(files)
        )
    return Loaded(name, str(files[0].path), _read(files[0], limit))


def _choices(files: list[ProfileFile]) -> str:
    """The profiles a directory holds, each with what picks it: the options,
    or the run's directory when there are several runs."""
    runs = len({f.run for f in files}) > 1
    shown = [
        f"{f'{f.path.parents[3]} ' if runs else ''}rank {f.rank} {steps_text(f.steps)} "
        f"(--rank {f.rank} --steps {f.steps[0]})"
        for f in files[:MAX_CHOICES]
    ]
    more = f"; and {len(files) - MAX_CHOICES} more" if len(files) > MAX_CHOICES else ""
    return "; ".join(shown) + more


def _read(file: ProfileFile | Path, limit: int) -> Profile:
    try:
        return read_profile(file, limit)
    except ProfileError as exc:
        raise CliError(str(exc)) from None


def check_comparable(a: Loaded, b: Loaded, metric: str | None) -> str:
    """The metric to compare ``a`` and ``b`` by.

    Raises:
        CliError: different frameworks or modes, or the metric missing (no
            values) on a side; the message names both files.
    """
    pa, pb = a.profile, b.profile
    if pa.framework != pb.framework:
        raise CliError(
            f"{a.who()} is a {pa.framework} profile and {b.who()} a {pb.framework} one: "
            "diff compares profiles of one framework"
        )
    if pa.mode != pb.mode:
        raise CliError(
            f"{a.who()} was profiled in {pa.mode} mode and {b.who()} in {pb.mode} mode: "
            "their trees hold different frames; profile both in one mode"
        )
    have = {side.name: set(metrics_with_values(side.profile.tree)) for side in (a, b)}
    if metric is None:
        metric = (
            "device_time_ns" if all("device_time_ns" in h for h in have.values()) else "cpu_time_ns"
        )
    lacking = [side for side in (a, b) if metric not in have[side.name]]
    if lacking:
        which = " and ".join(side.who() for side in lacking)
        has = "; ".join(
            f"{side.name} has: {', '.join(sorted(have[side.name])) or 'none'}" for side in lacking
        )
        raise CliError(
            f"{which} {'have' if len(lacking) > 1 else 'has'} no {metric} values, so "
            f"{a.who()} and {b.who()} cannot be compared by it ({has}); choose one with --metric"
        )
    return metric


# --- output ---------------------------------------------------------------
def _labels(union: Union, node: int, moved: bool = True) -> list[str]:
    """The labels of ``node``'s path; ``moved``: a moved line as ``f.py:10→14 f``."""
    return [union.label(n) if moved else union.frame(n).label() for n in union.path(node)]


def _side_json(side: Loaded) -> dict[str, Any]:
    p = side.profile
    return {
        "file": side.file,
        "run": p.run,
        "rank": p.rank,
        "host": p.host,
        "steps": list(p.steps),
        "step_count": step_count(p.steps, p.step_times_ns),
        "mean_step_ns": side.mean_step_ns,
        "mean_running_ns": side.mean_running_ns,
        "framework": p.framework,
        "mode": p.mode,
    }


def _step_delta(a: Loaded, b: Loaded) -> int | None:
    if a.mean_step_ns is None or b.mean_step_ns is None:
        return None
    return b.mean_step_ns - a.mean_step_ns


def _running_delta(a: Loaded, b: Loaded) -> int | None:
    if a.mean_running_ns is None or b.mean_running_ns is None:
        return None
    return b.mean_running_ns - a.mean_running_ns


def _top(items: list, top: int) -> list:
    return items if top == 0 else items[:top]


def diff_json(a: Loaded, b: Loaded, union: Union, result: Comparison, top: int) -> dict[str, Any]:
    """The ``--json`` document; values per step, rounded to whole units.
    ``step_delta_ns`` and ``mean_step_ns`` are null without step times;
    ``step_delta_running_ns`` is the change of the mean step less its wait for
    a CPU (null without the waits): on a loaded host, the program's own change."""
    changes = []
    for c in _top(result.changes, top):
        path = _labels(union, c.node, moved=False)
        row = {
            "path": path,
            "a_ns": round(c.a_ns),
            "b_ns": round(c.b_ns),
            "delta_ns": round(c.delta_ns),
            "spread_ns": c.spread_ns,
            "significant": c.significant,
        }
        b_path = [union.b.tree.node_frame(n).label() for n in union.b.tree.path(c.b_node)]
        if b_path != path:
            row["b_path"] = b_path  # a moved line: B's own labels
        changes.append(row)

    def only(items, a_side: bool) -> list[dict[str, Any]]:
        return [
            {
                "path": _labels(union, o.node, moved=False),
                "a_ns": round(o.ns) if a_side else 0,
                "b_ns": 0 if a_side else round(o.ns),
                "delta_ns": round(-o.ns if a_side else o.ns),
            }
            for o in _top(items, top)
        ]

    return {
        "version": DIFF_VERSION,
        "a": _side_json(a),
        "b": _side_json(b),
        "metric": result.metric,
        "step_delta_ns": _step_delta(a, b),
        "step_delta_running_ns": _running_delta(a, b),
        "min_ns": round(result.floor_ns),
        "changes": changes,
        "only_a": only(result.only_a, True),
        "only_b": only(result.only_b, False),
        "counts": {
            "changes": len(result.changes),
            "only_a": len(result.only_a),
            "only_b": len(result.only_b),
        },
    }


def _signed(value: float, metric: str) -> str:
    text = format_value(value, metric)
    return "+" + text if value > 0 else text


def print_diff(
    console: Console, a: Loaded, b: Loaded, union: Union, result: Comparison, top: int
) -> None:
    """The terminal comparison: both windows, the step change, the changes
    table, then the paths one side alone has."""
    metric = result.metric
    per = "" if at_peak(metric) else "/step"  # a value at the memory peak: as it is
    for side in (a, b):
        p = side.profile
        mean = side.mean_step_ns
        console.print(Text.assemble((side.name, "bold"), f"  {side.file}"), soft_wrap=True)
        run_name = f"run {p.run} \u00b7 " if p.run not in (".", "") else ""
        console.print(
            Text(
                f"   {run_name}rank {p.rank} \u00b7 {steps_text(p.steps)} \u00b7 mean step "
                f"{format_value(mean, 'x_ns') if mean is not None else '-'}"
            ),
            soft_wrap=True,
        )
    step = _step_delta(a, b)
    console.print(
        Text.assemble(
            ("step ", "bold"),
            (_signed(step, "x_ns") if step is not None else "-"),
            f" (mean step B \u2212 A) \u00b7 {metric} "
            + ("at each window's memory peak" if per == "" else "per step"),
        )
    )
    shown = _top(result.changes, top)
    significant = sum(c.significant for c in result.changes)
    console.rule(
        Text(f"changes: {len(result.changes)} listed, {significant} significant"), align="left"
    )
    if shown:
        rows = [
            (
                ("*" if c.significant else ""),
                _signed(c.delta_ns, metric),
                format_value(c.a_ns, metric),
                format_value(c.b_ns, metric),
                format_value(c.spread_ns, metric) if c.spread_ns is not None else "?",
                _labels(union, c.node),
            )
            for c in shown
        ]
        console.print(
            _table(
                console.width,
                ("", f"\u0394{per}", f"A{per}", f"B{per}", "spread", "context"),
                rows,
            )
        )
    if len(result.changes) > len(shown):
        console.print(f"[dim]{len(result.changes) - len(shown)} more (--top 0 lists all)[/]")
    if any(c.spread_ns is None for c in shown):
        console.print(Text(_unknown_spread(a, b, metric), style="yellow"))
    for name, items in (("A", result.only_a), ("B", result.only_b)):
        listed = _top(items, top)
        console.rule(Text(f"only in {name}: {len(items)}"), align="left")
        if listed:
            rows = [(format_value(o.ns, metric), _labels(union, o.node)) for o in listed]
            console.print(_table(console.width, (f"{name}{per}", "context"), rows))
        if len(items) > len(listed):
            console.print(f"[dim]{len(items) - len(listed)} more (--top 0 lists all)[/]")
    console.print(
        Text(
            f"listed: from {format_value(result.floor_ns, metric)}{' per step' if per else ''} "
            "(--min-share) \u00b7 "
            "* significant: |\u0394| over both sides' spread",
            style="dim",
        )
    )


def _unknown_spread(a: Loaded, b: Loaded, metric: str) -> str:
    """Why the spread is unknown, the sides with one reason said together."""
    if at_peak(metric):
        return (
            f"spread unknown (?): {metric} is one moment's value (each window's memory peak), "
            "not a total over steps; no change is called significant"
        )
    why: dict[str, list[str]] = {}
    for side in (a, b):
        p = side.profile
        if step_count(p.steps, p.step_times_ns) < 2:
            why.setdefault("one step", []).append(side.name)
        elif p.step_range(metric) is None:
            bounded = sorted({name.partition(".")[0] for name in p.step_bounds})
            hint = (
                f"only of {', '.join(bounded)}: --metric {bounded[0]}"
                if bounded
                else "written before steps were marked"
            )
            why.setdefault(f"no per-step bounds of {metric} ({hint})", []).append(side.name)
    said = "; ".join(
        f"{' and '.join(names)} {'have' if len(names) > 1 else 'has'} {reason}"
        for reason, names in why.items()
    )
    return f"spread unknown (?): {said or 'a side lacks it'}; no change is called significant"


def _table(width: int, heads: tuple[str, ...], rows: list[tuple]) -> Table:
    """Right-aligned value columns, then the path (a list of labels) fitted
    into what is left of ``width`` by `fit_path`."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(heads[:-1])]
    room = max(width - sum(widths) - 2 * len(widths) - 1, 10)
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for head in heads[:-1]:
        table.add_column(head, justify="right", no_wrap=True)
    table.add_column(heads[-1], no_wrap=True, overflow="ellipsis")
    for row in rows:
        table.add_row(*row[:-1], Text(fit_path(row[-1], room)))
    return table


def fit_path(labels: list[str], width: int) -> str:
    """A call path in ``width`` cells: whole when it fits, else its first
    label (the phase) and as many of its last as fit, ``forward › … ›
    blocks.0.mlp (Sequential) › aten::linear``: the deep end says where."""
    text = PATH_SEP.join(labels)
    if cell_len(text) <= width or len(labels) < 2:
        return middle_truncate(text, width)
    lead = labels[0] + PATH_SEP + "\u2026" + PATH_SEP
    for start in range(2, len(labels)):
        tail = PATH_SEP.join(labels[start:])
        left = width - cell_len(lead) - cell_len(tail) - cell_len(PATH_SEP)
        if left >= MIN_LABEL and start > 2:  # room for a part of the label before the tail
            return lead + middle_truncate(labels[start - 1], left) + PATH_SEP + tail
        if left + cell_len(PATH_SEP) >= 0:
            return lead + tail
    return middle_truncate("\u2026" + PATH_SEP + labels[-1], width)
