"""``deepcontext demo``: profile the embedded demo workload and print the report."""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path
from typing import Any

from rich.markup import escape


def workloads() -> tuple[tuple[str, tuple[tuple[str, ...], ...], str, str], ...]:
    """Workloads, richest first: (name, what must be importable for it, the
    extra that installs it, how the help names it): the installed adapter
    packages' demos, then the pure-Python one."""
    from ..record.adapter import adapter_packages

    demos = [
        (p.name, p.demo.needs, p.demo.extra, p.demo.label or p.name)
        for p in adapter_packages()
        if p.demo
    ]
    return (*demos, ("python", (), "", "pure Python"))


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "demo", help="profile a small embedded training run and print its report"
    )
    p.add_argument(
        "--logdir",
        default="runs/deepcontext-demo",
        help="where to write the profile (each demo run gets its own run directory)",
    )
    found = workloads()
    p.add_argument(
        "--workload",
        choices=("auto", *(name for name, *_ in found)),
        default="auto",
        help="auto picks the richest workload whose framework is installed: "
        + ", else ".join(label for *_, label in found),
    )
    p.set_defaults(run=run)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing(workload: str) -> str | None:
    """What ``workload`` needs that is not installed (a pip hint), or None."""
    for name, needs, extra, _ in workloads():
        if name == workload:
            for alternatives in needs:
                if not any(_installed(m) for m in alternatives):
                    from .common import install_hint

                    return f"{' or '.join(alternatives)} ({install_hint(extra)})"
    return None


def pick(workload: str) -> str:
    """``workload``, or for ``auto`` the first of `workloads` whose framework imports."""
    if workload != "auto":
        return workload
    return next(name for name, *_ in workloads() if missing(name) is None)


def run(args: argparse.Namespace) -> int:
    from .common import make_console
    from .report import run as run_report

    console = make_console(soft_wrap=True, width=None)
    workload = pick(args.workload)
    lacking = missing(workload)
    if lacking is not None:
        console.print(f"[red]the {workload} workload needs {escape(lacking)}[/]")
        return 2
    # A run directory per demo, so the report shows this run, not every earlier one.
    run_name = time.strftime("demo-%Y%m%d-%H%M%S")
    console.print(
        f"[bold]DeepContext demo[/]: profiling the {workload} workload into {args.logdir}"
    )
    if workload == "python":
        from ..demo.workload import train

        written = train(args.logdir, run=run_name)
    else:
        written = _demo_of(workload)(args.logdir, run=run_name)
    if not written:
        console.print("[red]the demo wrote no profile[/]")
        return 1
    from . import build_parser

    status = run_report(
        build_parser().parse_args(
            ["report", str(run_directory(written[0])), "--limit", "60", "--min-percent", "1"]
        )
    )
    console.print(f"\nprofiles: {', '.join(str(p) for p in written)}")
    console.print(
        f"open the DeepContext tab: [bold]deepcontext view {args.logdir}[/] "
        f"(or tensorboard --logdir {args.logdir})"
    )
    return status


def _demo_of(workload: str) -> Any:
    """The function that trains an adapter package's demo workload."""
    from ..record.adapter import adapter_packages, load

    return next(load(p.demo.run) for p in adapter_packages() if p.demo and p.name == workload)


def run_directory(profile: Path) -> Path:
    """The run directory holding ``profile`` (``<run>/plugins/deepcontext/<rank>-<host>/steps-….pb``)."""
    return profile.parents[3]
