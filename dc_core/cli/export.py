"""``deepcontext export LOGDIR --format F --out DIR``: profiles in other tools' formats."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..export import FORMATS, SUFFIX, exporter
from ..report import default_metric
from .common import CliError, fail, load_logdir


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("export", help="write profiles as Chrome trace, speedscope, pprof or Hatchet JSON")
    p.add_argument("logdir")
    p.add_argument("--format", choices=FORMATS, required=True)
    p.add_argument("--out", required=True, help="directory for the exported files")
    p.add_argument("--metric", default=None, help="metric to export (default: the profile's main one)")
    p.add_argument("--rank", type=int, default=None)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        profiles, errors = load_logdir(args.logdir, args.rank)
    except CliError as exc:
        return fail(str(exc))
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return fail(f"cannot create --out {args.out!r}: {exc.strerror}")
    export = exporter(args.format)
    for profile in profiles:
        metric = args.metric or default_metric(profile.tree)
        if metric not in profile.tree.excl:
            return fail(f"--metric {metric!r} is not in {profile.source}")
        run_name = profile.run.replace("/", "_").strip(".") or "run"
        name = f"{run_name}-rank{profile.rank}-steps{profile.steps[0]}-{profile.steps[1] - 1}{SUFFIX[args.format]}"
        (out / name).write_bytes(export(profile, metric))
        print(out / name)
    for error in errors:
        print(f"skipped {error.file}: {error.message}")
    return 0
