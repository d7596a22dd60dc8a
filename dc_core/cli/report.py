"""``deepcontext report LOGDIR``: the context tree of every profile, per rank."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..export.nested import dumps
from ..profile import Profile
from ..report import (
    default_metric, format_value, rank_step_stats, rank_top_frames, report_json, tree_rows, view_tree,
)
from .common import CliError, add_read_options, fail, load_logdir

KIND_STYLE = {
    "phase": "bold magenta", "python": "cyan", "module": "green", "operator": "yellow",
    "native": "dim", "kernel": "bold blue", "compiled": "bold cyan",
}


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("report", help="print the context tree of each profile")
    p.add_argument("logdir", help="directory holding DeepContext profiles (searched recursively)")
    p.add_argument("--view", choices=("top-down", "bottom-up", "flat"), default="top-down")
    p.add_argument("--depth", type=int, default=None, help="print at most this many levels")
    p.add_argument("--min-percent", type=float, default=None,
                   help="hide nodes under this %% of the window (default 1 in the table, 0 in --json)")
    p.add_argument("--rank", type=int, default=None, help="only this rank")
    p.add_argument("--metric", default=None, help="cpu_time_ns, device_time_ns, count, samples, alloc_bytes")
    p.add_argument("--limit", type=int, default=60, help="rows per profile")
    p.add_argument("--json", action="store_true", help="machine-readable report on stdout")
    add_read_options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.depth is not None and args.depth < 1:
        return fail("--depth must be >= 1")
    if args.min_percent is not None and not 0.0 <= args.min_percent <= 100.0:
        return fail("--min-percent must be in [0, 100]")
    try:
        profiles, errors = load_logdir(args.logdir, args.rank, quiet=args.json, max_bytes=args.max_bytes)
    except CliError as exc:
        return fail(str(exc))
    known = {m for p in profiles for m in p.tree.excl}
    if args.metric is not None and args.metric not in known:
        return fail(f"--metric {args.metric!r} is not in these profiles; they have: {', '.join(sorted(known))}")
    if args.json:
        doc = report_json(profiles, errors, view=args.view, depth=args.depth,
                          min_fraction=(args.min_percent or 0.0) / 100.0, metric=args.metric)
        sys.stdout.write(dumps(doc) + "\n")  # json's text, without its recursion (trees may be deep)
        return 0 if profiles else 1
    if args.min_percent is None:
        args.min_percent = 1.0
    # Piped output gets a wide fixed width so deep call paths are not wrapped.
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    for profile in profiles:
        print_profile(console, profile, args)
    if len({p.rank for p in profiles}) > 1:
        print_ranks(console, profiles)
    for error in errors:
        console.print(f"[red]skipped[/] {escape(error.file)}: {escape(error.message)}", soft_wrap=True)
    return 0 if profiles else 1


def print_profile(console: Console, profile: Profile, args: argparse.Namespace) -> None:
    tree = view_tree(profile.tree, args.view)
    metric = args.metric or default_metric(tree)
    first, end = profile.steps
    steps = profile.step_times_ns
    mean = format_value(sum(steps) / len(steps), "x_ns") if steps else "-"
    # which operator capture ran ("native (frames: native)" → "native capture")
    capture = profile.env.get("capture", "").split(" (")[0]
    how = f" · {escape(capture)} capture" if capture else ""
    console.rule(
        f"[bold]{escape(profile.run)}[/] rank {profile.rank} ({escape(profile.host)}) · {escape(profile.framework)} · "
        f"{escape(profile.mode)}{how} · steps {first}–{end - 1} · mean step {mean}"
    )
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    table.add_column("% window", justify="right")
    table.add_column(f"incl {metric}", justify="right")
    table.add_column(f"excl {metric}", justify="right")
    table.add_column("context")
    for row in tree_rows(tree, metric, args.depth, args.min_percent / 100.0, args.limit):
        label = Text("  " * min(row.depth, 24) + ("… " if row.depth > 24 else ""))
        label.append(row.frame.label(), style=KIND_STYLE.get(row.frame.kind, ""))
        table.add_row(f"{row.percent:5.1f}%", format_value(row.incl, metric), format_value(row.excl, metric), label)
    console.print(table)
    dropped = {k: v for k, v in profile.drops.items() if v}
    if dropped:
        console.print(f"[yellow]dropped (caps reached):[/] {dropped}")
    if profile.findings:
        try:
            from .findings import render_findings
        except ImportError:
            return
        render_findings(profile.findings, console)


def print_ranks(console: Console, profiles: list[Profile]) -> None:
    stats = rank_step_stats(profiles)
    if not stats:
        return
    slowest = max(stats, key=lambda s: s.median_ns)
    table = Table(title="step time per rank", header_style="bold")
    for column in ("rank", "host", "steps", "median", "p95", "max"):
        table.add_column(column, justify="right" if column not in ("host",) else "left")
    for s in stats:
        style = "bold red" if s is slowest and len(stats) > 1 else ""
        table.add_row(str(s.rank), escape(s.host), str(s.steps), format_value(s.median_ns, "x_ns"),
                      format_value(s.p95_ns, "x_ns"), format_value(s.max_ns, "x_ns"), style=style)
    console.print(table)
    console.print(f"slowest rank: [bold]{slowest.rank}[/] (median step {format_value(slowest.median_ns, 'x_ns')})")
    metric = default_metric(profiles[0].tree)
    ranks, rows = rank_top_frames(profiles, metric)
    if rows:
        top = Table(title=f"top frames per rank ({metric}, inclusive)", header_style="bold")
        top.add_column("frame")
        for rank in ranks:
            top.add_column(f"rank {rank}", justify="right")
        for frame, values in rows:
            top.add_row(escape(frame.label()), *(format_value(v, metric) for v in values))
        console.print(top)
