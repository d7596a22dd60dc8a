"""``deepcontext analyze LOGDIR``: recompute findings (e.g. after changing
thresholds), store them back in the profiles, print them."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import Any

from rich.text import Text

from ..analyzer.stream import analyze_files
from ..model.window import profile_label
from ..record.config import resolve
from ..record.validate import check_thresholds
from ..store.logdir import rewrite_profile
from ..store.profile import ProfileError
from .common import (
    MANY_FILES,
    CliError,
    add_read_options,
    fail,
    list_logdir,
    make_console,
    print_about_file,
)
from .findings import render_findings


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "analyze",
        help="recompute the analyzer's findings and write them into the profile files",
        description="Recompute the analyzer's findings for every profile under LOGDIR (e.g. with other "
        "thresholds), print them, and REWRITE EACH PROFILE FILE in place with the new findings "
        "(atomically; its tree, steps and samples are kept, its old findings replaced). "
        "--dry-run prints the findings and leaves the files untouched.",
    )
    p.add_argument("logdir", help="directory holding DeepContext profiles (searched recursively)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="RULE.THRESHOLD=VALUE",
        help="override a threshold, e.g. --set dataloader_bottleneck.min_share=0.2 (repeatable; "
        "on top of DEEPCONTEXT_CONFIG's analyzer mapping)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="only print the findings: no profile file is rewritten",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help='findings per profile as JSON on stdout; "steps" is half-open [first, end): '
        "[5, 8] is steps 5-7",
    )
    add_read_options(p)
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
    try:
        return check_thresholds(out)  # the config's checks: known rule and threshold, finite, >= 0
    except ValueError as exc:
        raise CliError(f"--set: {str(exc).removeprefix('analyzer.')}") from None


@dataclass
class _Analysed:
    """What is printed of a profile once its file is rewritten and its tree dropped."""

    source: str
    run: str
    rank: int
    steps: tuple[int, int]
    label: str
    findings: list[dict[str, Any]]


def run(args: argparse.Namespace) -> int:
    try:
        overrides = {**resolve().analyzer, **parse_overrides(args.overrides)}
        files, limit = list_logdir(args.logdir, max_bytes=args.max_bytes)
    except (CliError, ValueError) as exc:
        return fail(str(exc))
    if not args.json and len(files) >= MANY_FILES:
        print(
            f"deepcontext: analysing {len(files):,} profiles under {args.logdir}",
            file=sys.stderr,
            flush=True,
        )
    done: list[_Analysed] = []
    errors, unwritten = [], []
    try:
        for _, result in analyze_files(files, limit, overrides):  # one profile in memory at a time
            if isinstance(result, ProfileError):
                errors.append(result)
                continue
            if not args.dry_run and (message := _rewrite(result)):
                unwritten.append(message)
            done.append(
                _Analysed(
                    result.source,
                    result.run,
                    result.rank,
                    tuple(result.steps),
                    profile_label(result),
                    result.findings,
                )
            )
    except ValueError as exc:  # an unknown threshold name
        return fail(str(exc))
    status = 0 if done and not unwritten else 1
    for message in unwritten:
        fail(message)
    if args.json:
        doc = [
            {
                "file": p.source,
                "run": p.run,
                "rank": p.rank,
                "steps": list(p.steps),
                "findings": p.findings,
            }
            for p in done
        ]
        errors_text = [str(e) for e in errors] + unwritten
        sys.stdout.write(json.dumps({"profiles": doc, "errors": errors_text}) + "\n")
        return status
    console = make_console()
    for p in done:
        head = Text(p.run, style="bold") + f" rank {p.rank} {p.label}"
        if not p.findings:
            console.print(head + ": no findings")
            continue
        console.print(head)
        render_findings(p.findings, console)
    for error in errors:
        print_about_file(console, Text("skipped ", style="red"), error.file, error.message)
    if done and not args.dry_run and not unwritten:
        console.print(
            f"findings written into {len(done)} profile file{'s' if len(done) != 1 else ''}"
        )
    return status


def _rewrite(profile: Any) -> str | None:
    """Store the findings in the file the profile was read from (in place:
    its stored rank, host or steps may differ from the names it was found
    under); returns why it could not, or None."""
    try:
        rewrite_profile(profile, profile.source)
    except OSError as exc:
        return f"cannot store the findings in {profile.source}: {exc.strerror or exc} (they are printed only)"
    return None
