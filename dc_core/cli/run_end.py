"""The end of ``deepcontext run``: what the profiled processes said, the
report of the run, and the command that opens the tab."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
from pathlib import Path

from rich.markup import escape

from ..launch.settings import RunSettings
from ..store.logdir import find_profiles, shown_path
from .common import make_console

#: The first line of each profiled process's log (`dc_core.launch.child`).
PROCESS_LINE = "PROCESS "
#: The report printed at the end is a summary: rows of 5% of the window or more,
#: at most 40 per tree (``deepcontext report`` prints the whole tree).
REPORT_ROWS, REPORT_MIN_PERCENT = 40, 5.0


def read_logs(log_dir: str) -> tuple[int, list[str]]:
    """How many processes were profiled, and their warnings, each once in order of first appearance."""
    processes, notes = 0, []
    try:
        names = sorted(os.listdir(log_dir))
    except OSError:
        return 0, []
    for name in names:
        try:
            text = Path(log_dir, name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith(PROCESS_LINE):
                processes += 1
            elif line.strip() and line not in notes:
                notes.append(line)
    return processes, notes


def finish(settings: RunSettings, args: argparse.Namespace, status: int) -> None:
    """Print what the run left, on stderr (the command's stdout is the
    command's alone): notes, the report (unless ``--no-report``), the view command."""
    with contextlib.redirect_stdout(sys.stderr):
        _finish(settings, args, status)


def _finish(settings: RunSettings, args: argparse.Namespace, status: int) -> None:
    run_dir = Path(settings.logdir) / settings.run
    processes, notes = read_logs(settings.log_dir)
    files = find_profiles(run_dir) if run_dir.is_dir() else []
    console = make_console()
    ended = (
        "ended"
        if status == 0
        else (f"exited with status {status}" if status > 0 else f"was killed by signal {-status}")
    )
    console.rule(
        f"DeepContext · the command {ended} · {processes} process{'es' if processes != 1 else ''} profiled"
    )
    for note in notes[:20]:
        level, _, message = note.partition(" ")
        console.print(f"[yellow]{escape(level.lower())}:[/] {escape(message)}", soft_wrap=True)
    if processes == 0:
        console.print(
            "[yellow]note:[/] no process of the command loaded DeepContext: is the command's Python the "
            f"one DeepContext is installed in ({escape(shlex.quote(_python()))}), and does it read "
            "PYTHONPATH (not -I or -E)?",
            soft_wrap=True,
        )
    if not files:
        console.print(f"no profile was written under {escape(str(run_dir))}", soft_wrap=True)
        if processes and not notes:
            console.print(
                "[yellow]note:[/] no step window was reached. Steps come from a Lightning or Hugging Face "
                "Trainer, each update of a plain PyTorch loop's first optimizer, or the jitted step of a "
                "JAX loop (--step-function names it); a process with none of these for --time-fallback "
                "seconds is profiled by time. --steps sets the window.",
                soft_wrap=True,
            )
        return
    if not args.no_report:
        from . import build_parser, report

        report.run(
            build_parser().parse_args(
                [
                    "report",
                    str(run_dir),
                    "--limit",
                    str(REPORT_ROWS),
                    "--min-percent",
                    str(REPORT_MIN_PERCENT),
                ]
            )
        )
    console.print(
        f"{len(files)} profile{'s' if len(files) != 1 else ''} in {escape(shown_path(run_dir))}; "
        "the whole tree, and the tab:",
        soft_wrap=True,
    )
    console.print(
        f"  deepcontext report {escape(shlex.quote(shown_path(run_dir)))}", soft_wrap=True
    )
    console.print(
        f"  deepcontext view {escape(shlex.quote(shown_path(Path(settings.logdir))))}",
        soft_wrap=True,
    )
    if args.view:
        from . import view

        view.run(argparse.Namespace(logdir=settings.logdir, port=6006, host="127.0.0.1"))


def _python() -> str:
    import sys

    return sys.executable
