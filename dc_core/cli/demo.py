"""``deepcontext demo``: profile the embedded demo workload and print the report."""

from __future__ import annotations

import argparse
import importlib.util
from typing import Any

from rich.console import Console


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("demo", help="profile a small embedded training run and print its report")
    p.add_argument("--logdir", default="runs/deepcontext-demo", help="where to write the profile")
    p.add_argument("--workload", choices=("auto", "python", "torch", "lightning"), default="auto",
                   help="auto picks the richest workload whose framework is installed")
    p.set_defaults(run=run)


def _pick(workload: str) -> str:
    if workload != "auto":
        return workload
    for name, module in (("lightning", "dc_lightning.demo"), ("torch", "dc_torch.demo")):
        try:
            if importlib.util.find_spec(module) is not None:
                return name
        except ImportError:
            continue
    return "python"


def run(args: argparse.Namespace) -> int:
    from .report import run as run_report

    console = Console(highlight=False)
    workload = _pick(args.workload)
    console.print(f"[bold]DeepContext demo[/]: profiling the {workload} workload into {args.logdir}")
    if workload == "python":
        from ..demo.workload import train

        written = train(args.logdir)
    else:
        module = importlib.import_module(f"dc_{workload}.demo")
        written = module.run_demo(args.logdir)
    if not written:
        console.print("[red]the demo wrote no profile[/]")
        return 1
    report_args = argparse.Namespace(
        logdir=args.logdir, view="top-down", depth=None, min_percent=1.0, rank=None, metric=None,
        limit=60, json=False, max_bytes=None,
    )
    status = run_report(report_args)
    console.print(f"\nprofiles: {', '.join(str(p) for p in written)}")
    console.print(f"open the DeepContext tab: [bold]deepcontext view {args.logdir}[/] "
                  f"(or tensorboard --logdir {args.logdir})")
    return status
