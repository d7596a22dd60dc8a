"""``deepcontext report LOGDIR``: the context tree of every profile, per rank;
for a window of many ranks, one cross-rank tree and its outlier ranks."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..ensemble import Ensemble, cross_rank, merge
from ..ensemble.outliers import outliers, time_metric
from ..ensemble.rows import CROSS_RANK_FROM, merged_json
from ..export.nested import dumps
from ..model.kinds import UNITS
from ..model.views import VIEWS, view
from ..model.window import one_off_first_step, profile_label, steps_text
from ..store.logdir import ProfileFile
from ..store.profile import Profile
from .common import (
    MANY_FILES,
    CliError,
    add_read_options,
    fail,
    hanging,
    list_logdir,
    make_console,
    middle_truncate,
    print_about_file,
    read_files,
    visible,
)
from .present import (
    COMMUNICATION_COLUMNS,
    REPORT_VERSION,
    Row,
    communication_json,
    default_metric,
    describe_drops,
    format_value,
    memory_line,
    metrics_with_values,
    rank_step_stats,
    rank_top_frames,
    report_json,
    tree_rows,
)
from .ranks import print_cross_rank
from .trend import print_trend, trend_json

KIND_STYLE = {
    "phase": "bold magenta",
    "python": "cyan",
    "module": "green",
    "operator": "yellow",
    "native": "dim",
    "kernel": "bold blue",
    "compiled": "bold cyan",
    "sharding": "dim magenta",
}

#: Cells a frame name keeps however deep it sits: deeper levels stop indenting.
MIN_LABEL = 24
MAX_INDENT_LEVELS = 24


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "report",
        help="print the context tree of each profile",
        description="Print the context tree of each profile under LOGDIR, its findings and, for several "
        "ranks, a comparison. Output fits COLUMNS (160 when piped without COLUMNS).",
    )
    p.add_argument("logdir", help="directory holding DeepContext profiles (searched recursively)")
    p.add_argument(
        "--view",
        choices=VIEWS,
        default="top-down",
        help="top-down: callers above callees; bottom-up: frames by their own (self) time, "
        "each with the callers that time came through; flat: one row per frame",
    )
    p.add_argument("--depth", type=int, default=None, help="print at most this many levels")
    p.add_argument(
        "--min-percent",
        type=float,
        default=None,
        help="hide nodes under this %% of the window (default 1 in the table, 0 in --json)",
    )
    p.add_argument(
        "--rank", type=int, default=None, help="only this rank (its own tree, however many ranks)"
    )
    p.add_argument(
        "--ranks",
        choices=("merged", "all"),
        default="merged",
        help=f"windows of {CROSS_RANK_FROM} or more ranks: one cross-rank tree and the outlier ranks "
        "(merged, the default) or every rank's own tree (all)",
    )
    p.add_argument(
        "--trend",
        default=None,
        metavar="PATH|ID|top",
        help="instead of the trees: a node's cost per window along the run (its path of labels joined "
        "by ' › ' as the report prints them, or its id in --json's \"merged\"/trend output), or "
        "'top' for the nodes whose share of the window rises (Mann-Kendall, p < 0.01); "
        "for --rank N, else each run's lowest rank",
    )
    p.add_argument(
        "--metric",
        default=None,
        help="cpu_time_ns, device_time_ns, count, samples, alloc_bytes, peak_live_bytes, "
        "peak_live_bytes.<category> (parameter, gradient, optimizer_state, saved_for_backward, "
        "temporary, input); another device's with @<device>: peak_live_bytes@cpu",
    )
    p.add_argument("--limit", type=int, default=60, help="rows per profile")
    p.add_argument(
        "--json",
        action="store_true",
        help='machine-readable report on stdout; each profile\'s "steps" is half-open '
        "[first, end): [5, 8] is steps 5-7, as the table's header says",
    )
    add_read_options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.depth is not None and args.depth < 1:
        return fail("--depth must be >= 1")
    if args.min_percent is not None and not 0.0 <= args.min_percent <= 100.0:
        return fail("--min-percent must be in [0, 100]")
    try:
        files, limit = list_logdir(args.logdir, args.rank, args.max_bytes)
    except CliError as exc:
        return fail(str(exc))
    if args.trend is not None:
        return run_trend(args, files, limit)
    windows: dict[tuple[str, tuple[int, int]], list[ProfileFile]] = {}
    for file in files:
        windows.setdefault((file.run, file.steps), []).append(file)
    many = (
        []
        if args.rank is not None or args.ranks == "all"
        else [
            group for group in windows.values() if len({f.rank for f in group}) >= CROSS_RANK_FROM
        ]
    )
    merged_files = {f for group in many for f in group}
    profiles, errors = read_files(
        [f for f in files if f not in merged_files], limit, args.json, args.logdir
    )
    merged = []
    for group in many:
        if not args.json and len(group) >= MANY_FILES:
            print(
                f"deepcontext: merging {len(group):,} ranks of {visible(group[0].run)} {steps_text(group[0].steps)}",
                file=sys.stderr,
                flush=True,
            )
        ensemble, group_errors = cross_rank(group, limit)
        errors.extend(group_errors)
        if ensemble.columns:
            merged.append(ensemble)
    known = {m for p in profiles for m in p.tree.excl} | {m for e in merged for m in e.incl}
    if args.metric is not None and args.metric not in known and args.metric not in UNITS:
        have = sorted(
            {m for p in profiles for m in metrics_with_values(p.tree)}
            | {m for e in merged for m in e.incl}
        )
        return fail(
            f"--metric {args.metric!r} is not in these profiles; they have: {', '.join(have)}"
        )
    found = [outliers(e, _merged_metric(e, args.metric)) for e in merged]
    if args.json:
        doc = report_json(
            profiles,
            errors,
            view=args.view,
            depth=args.depth,
            min_fraction=(args.min_percent or 0.0) / 100.0,
            metric=args.metric,
        )
        if merged:
            doc["merged"] = [
                merged_json(
                    e,
                    _merged_metric(e, args.metric),
                    args.depth,
                    (args.min_percent or 0.0) / 100.0,
                    o,
                )
                for e, o in zip(merged, found)
            ]
        # json's text, without its recursion (trees may be deep)
        sys.stdout.write(dumps(doc) + "\n")
        return 0 if profiles or merged else 1
    if args.min_percent is None:
        args.min_percent = 1.0
    console = make_console()
    for profile in profiles:
        print_profile(console, profile, args)
    if len({p.rank for p in profiles}) > 1:
        print_ranks(console, profiles)
    for ensemble, outlier_ranks in zip(merged, found):
        print_cross_rank(
            console,
            ensemble,
            _merged_metric(ensemble, args.metric),
            outlier_ranks,
            args.depth,
            args.min_percent / 100.0,
            args.limit,
            KIND_STYLE,
        )
    for error in errors:
        print_about_file(console, Text("skipped ", style="red"), error.file, error.message)
    return 0 if profiles or merged else 1


def run_trend(args: argparse.Namespace, files: list[ProfileFile], limit: int) -> int:
    """``--trend``: per run, one rank's windows merged by path, and the series of the node asked for."""
    by_run: dict[str, dict[int, list[ProfileFile]]] = {}
    for file in files:
        by_run.setdefault(file.run, {}).setdefault(file.rank, []).append(file)
    console = make_console()
    doc: dict[str, Any] = {"version": REPORT_VERSION, "profiles": [], "errors": [], "trend": []}
    for run_name, ranks in sorted(by_run.items()):
        rank = min(ranks)
        windows = sorted(ranks[rank], key=lambda f: f.steps)
        ensemble, errors = merge(windows, limit)
        doc["errors"].extend({"file": e.file, "message": e.message} for e in errors)
        if not ensemble.columns:
            continue
        try:
            if args.json:
                doc["trend"].append(
                    {
                        "run": run_name,
                        "rank": rank,
                        "trend": trend_json(ensemble, args.trend, args.metric),
                    }
                )
            else:
                console.print(
                    Text.assemble(
                        (run_name, "bold"),
                        f" rank {rank} \u00b7 {len(ensemble.columns)} windows "
                        f"from {steps_text(windows[0].steps)} to {steps_text(windows[-1].steps)}",
                    )
                )
                print_trend(console, ensemble, args.trend, args.metric)
        except ValueError as exc:
            return fail(str(exc))
        for error in errors if not args.json else ():
            print_about_file(console, Text("skipped ", style="red"), error.file, error.message)
    if args.json:
        sys.stdout.write(dumps(doc) + "\n")
    return 0 if doc["trend"] or not args.json else 1


def _merged_metric(ensemble: Ensemble, metric: str | None) -> str:
    return metric if metric in ensemble.incl else time_metric(ensemble)


def print_profile(console: Console, profile: Profile, args: argparse.Namespace) -> None:
    shown = view(profile.tree, args.view)
    tree = shown.tree
    metric = args.metric or default_metric(tree)
    print_header(console, profile)
    if tree.total(metric) == 0:  # say why instead of an empty table
        have = ", ".join(metrics_with_values(profile.tree)) or "none"
        why = (
            " (device time is recorded where a GPU or an XLA device ran the ops)"
            if metric == "device_time_ns"
            else ""
        )
        note = f"this profile has no {metric} values (nothing to show); it has: {have}{why}"
        console.print(hanging(Text("note: ", style="yellow"), Text(note)))
    else:
        rows = tree_rows(shown, metric, args.depth, args.min_percent / 100.0, args.limit)
        console.print(rows_table(console.width, rows, metric, self_only=args.view == "bottom-up"))
    for reason in describe_drops(profile.drops):
        console.print(hanging(Text("dropped: ", style="yellow"), Text(reason)))
    if rows := communication_json(profile):
        console.print(communication_table(console.width, rows))
    try:
        from ..analyzer import findings_of
        from .findings import render_findings
    except ImportError:
        return
    if found := findings_of(profile):
        render_findings(found, console)


def print_header(console: Console, profile: Profile) -> None:
    """The rule naming the window; what does not fit in it goes on the next lines."""
    one_off = one_off_first_step(profile)
    steps = profile.step_times_ns[1:] if one_off else profile.step_times_ns
    mean = format_value(sum(steps) / len(steps), "x_ns") if steps else "-"
    # which operator capture ran ("native (frames: native)" → "native capture")
    capture = profile.env.get("capture", "").split(" (")[0]
    parts = [
        f"{profile.run} rank {profile.rank} ({profile.host})",
        profile.framework,
        profile.mode,
        *([f"{capture} capture"] if capture else []),
        profile_label(profile),
        f"mean step {mean}",
    ]
    lines = [parts[0]]  # whole parts per line: a step range or a run name is never split
    for part in parts[1:]:
        if cell_len(lines[-1] + " \u00b7 " + part) + 4 <= console.width:
            lines[-1] += " \u00b7 " + part
        else:
            lines.append(part)
    title = Text(lines[0])
    title.stylize("bold", 0, len(profile.run))
    console.rule(title)
    for line in lines[1:]:
        console.print(Text(line), soft_wrap=True)
    if one_off:
        first = profile.step_times_ns[0]
        console.print(
            Text(
                f"step {profile.steps[0]} took {format_value(first, 'x_ns')}, "
                f"{first / (first - one_off):.0f}x the median of the others: a process's first step pays "
                "one-off costs (imports, first calls, warm-up); the mean step leaves it out",
                style="dim",
            ),
            soft_wrap=True,
        )
    source = profile.step_source
    if source:  # ``deepcontext run`` found the steps itself: say how
        console.print(hanging(Text("steps: ", style="dim"), Text(source)))
    for device in profile.memory:
        lead = Text(f"memory ({middle_truncate(device.device, 32)}): ", style="dim")
        console.print(hanging(lead, Text(memory_line(profile, device))))
    if profile.memory_missing:
        note = f" ({profile.memory_note})" if profile.memory_note else ""
        missing = f"not collected: {', '.join(profile.memory_missing)}{note}"
        console.print(hanging(Text("memory: ", style="dim"), Text(missing)))


def communication_table(width: int, rows: list[dict[str, Any]]) -> Table:
    """Communication by module, per step: compute, exposed communication and
    the sharding runtime add up to the module's time; comm time overlaps them."""
    table = Table(
        title="communication by module (per step)",
        title_justify="left",
        box=None,
        pad_edge=False,
        width=min(width, 120),
    )
    table.add_column("module", overflow="fold")
    for _, heading in COMMUNICATION_COLUMNS:
        table.add_column(heading, justify="right", no_wrap=True)
    for row in rows:
        table.add_row(
            escape(middle_truncate(row["module"], 40)),
            *(
                format_value(row[key], "x_ns" if key.endswith("_ns") else "bytes")
                for key, _ in COMMUNICATION_COLUMNS
            ),
        )
    return table


def rows_table(width: int, rows: list[Row], metric: str, self_only: bool = False) -> Table:
    """The tree's rows laid out in ``width`` columns: names cut in the middle and
    indentation capped so that no row wraps. ``self_only``: one value column
    (the bottom-up view, whose inclusive and exclusive are the same number)."""
    percents = [f"{row.percent:5.1f}%" for row in rows]
    values = [[format_value(row.incl, metric) for row in rows]]
    heads = [f"self {metric}"] if self_only else [f"incl {metric}", f"excl {metric}"]
    if not self_only:
        values.append([format_value(row.excl, metric) for row in rows])
    widths = [max([len(h), *map(len, col)]) for h, col in zip(heads, values)]
    room = width - max([8, *map(len, percents)]) - sum(widths) - 2 * len(heads) - 2
    needed = max(
        (2 * min(r.depth, MAX_INDENT_LEVELS) + cell_len(r.frame.label()) for r in rows), default=0
    )
    caption = None
    if needed > room and room < 2 * MIN_LABEL:  # narrow: short headers, the metric said once below
        caption = f"{'self' if self_only else 'incl/excl'}: {metric}"
        heads = ["self"] if self_only else ["incl", "excl"]
        room += sum(widths) - sum(max([len(h), *map(len, col)]) for h, col in zip(heads, values))
    table = Table(
        box=None,
        pad_edge=False,
        show_edge=False,
        header_style="bold",
        caption=caption,
        caption_justify="left",
        caption_style="dim",
    )
    table.add_column("% window", justify="right", no_wrap=True)
    for head in heads:
        table.add_column(head, justify="right", no_wrap=True)
    table.add_column("context", no_wrap=True, overflow="ellipsis")
    levels_cap = min(MAX_INDENT_LEVELS, max(0, (room - MIN_LABEL) // 2))
    for index, row in enumerate(rows):
        levels = min(row.depth, levels_cap)
        label = Text("  " * levels + ("\u2026 " if row.depth > levels else ""))
        name = middle_truncate(row.frame.label(), max(room - label.cell_len, 8))
        label.append(name, style=KIND_STYLE.get(row.frame.kind, ""))
        table.add_row(percents[index], *(col[index] for col in values), label)
    return table


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
        table.add_row(
            str(s.rank),
            escape(s.host),
            str(s.steps),
            format_value(s.median_ns, "x_ns"),
            format_value(s.p95_ns, "x_ns"),
            format_value(s.max_ns, "x_ns"),
            style=style,
        )
    console.print(table)
    console.print(
        f"slowest rank: [bold]{slowest.rank}[/] (median step {format_value(slowest.median_ns, 'x_ns')})"
    )
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
