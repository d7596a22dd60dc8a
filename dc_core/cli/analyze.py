"""``deepcontext analyze LOGDIR``: recompute findings (e.g. after changing
thresholds), store them back in the profiles, print them."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from ..analyzer import analyze, analyze_ranks, attach
from ..config import resolve
from ..logdir import write_profile
from .common import CliError, fail, load_logdir
from .findings import render_findings


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("analyze", help="recompute the analyzer's findings and store them in the profiles")
    p.add_argument("logdir", help="directory holding DeepContext profiles (searched recursively)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="RULE.THRESHOLD=VALUE",
                   help="override a threshold, e.g. --set dataloader_bottleneck.min_share=0.2 (repeatable; "
                        "on top of DEEPCONTEXT_CONFIG's analyzer mapping)")
    p.add_argument("--dry-run", action="store_true", help="print the findings without rewriting the profiles")
    p.add_argument("--json", action="store_true", help="findings per profile as JSON on stdout")
    p.set_defaults(run=run)


def parse_overrides(items: list[str]) -> dict[str, float]:
    """``["rule.key=0.2", ...]`` → ``{"rule.key": 0.2}``; raises `CliError` on bad syntax."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            raise CliError(f"--set {item!r}: expected RULE.THRESHOLD=NUMBER") from None
        if not sep or "." not in key:
            raise CliError(f"--set {item!r}: expected RULE.THRESHOLD=NUMBER")
    return out


def run(args: argparse.Namespace) -> int:
    try:
        overrides = {**resolve().analyzer, **parse_overrides(args.overrides)}
        profiles, errors = load_logdir(args.logdir, quiet=args.json)
    except (CliError, ValueError) as exc:
        return fail(str(exc))
    try:
        for profile in profiles:
            profile.findings = analyze(profile, overrides)
        attach(profiles, analyze_ranks(profiles, overrides))
    except ValueError as exc:  # an unknown threshold name
        return fail(str(exc))
    if not args.dry_run:
        for profile in profiles:
            _rewrite(profile, args.logdir)
    if args.json:
        doc = [{"file": p.source, "run": p.run, "rank": p.rank, "steps": list(p.steps), "findings": p.findings}
               for p in profiles]
        sys.stdout.write(json.dumps({"profiles": doc, "errors": [str(e) for e in errors]}) + "\n")
        return 0 if profiles else 1
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    for profile in profiles:
        head = f"[bold]{escape(profile.run)}[/] rank {profile.rank} steps {profile.steps[0]}-{profile.steps[1] - 1}"
        if not profile.findings:
            console.print(f"{head}: no findings")
            continue
        console.print(head)
        render_findings(profile.findings, console)
    for error in errors:
        console.print(f"[red]skipped[/] {escape(error.file)}: {escape(error.message)}")
    return 0 if profiles else 1


def _rewrite(profile: Any, logdir: str) -> None:
    # write_profile derives the path from the profile's run/rank/host/steps,
    # which are the ones the file was found under: it replaces that file.
    run = None if profile.run in (".", "") else profile.run
    written = write_profile(profile, logdir, run)
    if profile.source and Path(profile.source).resolve() != written.resolve():
        Console(stderr=True).print(
            f"[yellow]note:[/] {escape(profile.source)} was written as {escape(str(written))}", highlight=False
        )
