"""The report of a window with many ranks: one cross-rank tree and its outlier ranks."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..ensemble import PATH_SEP, Ensemble
from ..ensemble.outliers import Outlier
from ..ensemble.rows import merged_rows
from ..model.window import steps_text
from .common import middle_truncate
from .present import format_value

MAX_INDENT_LEVELS = 16


def print_cross_rank(
    console: Console,
    ensemble: Ensemble,
    metric: str,
    found: list[Outlier],
    depth: int | None,
    min_fraction: float,
    limit: int,
    kind_style: dict[str, str],
) -> None:
    """The window's merged tree (mean, max, the max rank, imbalance per node),
    then its outlier ranks with the nodes that explain them."""
    first = ensemble.columns[0]
    console.rule(
        Text.assemble(
            (first.run, "bold"),
            f" \u00b7 {len(ensemble.columns):,} ranks \u00b7 "
            f"{steps_text(first.steps)} \u00b7 cross-rank tree ({metric}, inclusive)",
        )
    )
    rows = merged_rows(ensemble, metric, depth, min_fraction, limit)
    cells = [
        (
            f"{r.percent:5.1f}%",
            format_value(r.mean, metric),
            format_value(r.max, metric),
            str(r.max_rank),
            f"{100 * r.imbalance:.0f}%",
        )
        for r in rows
    ]
    heads = ("% mean", "mean", "max", "max rank", "imbalance")
    widths = [max([len(h), *(len(c[i]) for c in cells)]) for i, h in enumerate(heads)]
    room = max(console.width - sum(widths) - 2 * len(heads) - 2, 16)
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for head in heads:
        table.add_column(head, justify="right", no_wrap=True)
    table.add_column("context", no_wrap=True, overflow="ellipsis")
    for row, cell in zip(rows, cells):
        levels = min(row.depth, MAX_INDENT_LEVELS, max(0, (room - 24) // 2))
        label = Text("  " * levels + ("\u2026 " if row.depth > levels else ""))
        label.append(
            middle_truncate(row.frame.label(), max(room - label.cell_len, 8)),
            style=kind_style.get(row.frame.kind, ""),
        )
        table.add_row(*cell, label)
    console.print(table)
    console.print(
        Text(
            "imbalance: (max - mean) / max over ranks; a rank without the node counts 0",
            style="dim",
        )
    )
    print_outliers(console, ensemble, found)


def print_outliers(console: Console, ensemble: Ensemble, found: list[Outlier]) -> None:
    """The outlier table, then per outlier rank the nodes holding its excess."""
    if not found:
        console.print(
            "outlier ranks: none (step, compute and phase times are within the ranks' spread)"
        )
        return
    table = Table(
        title="outlier ranks (per step; compute = time in operators, collectives left out)",
        header_style="bold",
    )
    for head in ("rank", "host", "measure", "value", "median", "ratio", "z", "in collectives"):
        table.add_column(head, justify="left" if head in ("host", "measure") else "right")
    for o in found:
        table.add_row(
            str(o.rank),
            escape(o.host),
            o.measure,
            format_value(o.value, "x_ns"),
            format_value(o.median, "x_ns"),
            f"{o.ratio:.2f}x",
            "-" if o.z is None else f"{o.z:.1f}",
            format_value(o.wait, "x_ns"),
        )
    console.print(table)
    for o in found[:5]:
        where = (
            PATH_SEP.join(ensemble.node_frame(n).label() for n in ensemble.path(o.node))
            or "the whole window"
        )
        console.print(
            Text.assemble(
                "rank ",
                (str(o.rank), "bold red"),
                f": +{format_value(o.excess, 'x_ns')} per step over the median rank ({o.measure}), in",
            )
        )
        console.print(
            Text("    " + middle_truncate(where, max(console.width - 4, 24)), style="green"),
            soft_wrap=True,
        )
        for node, excess in o.explain[:3]:
            console.print(
                f"      +{format_value(excess, 'x_ns'):>9}  "
                + escape(
                    middle_truncate(ensemble.node_frame(node).label(), max(console.width - 20, 16))
                ),
                soft_wrap=True,
            )
    hidden = len(found) - 5
    if hidden > 0:
        console.print(
            Text(f"... and {hidden} more outlier ranks (--json lists them all)", style="dim")
        )
