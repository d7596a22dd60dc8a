"""``deepcontext export LOGDIR --format F --out DIR``: profiles in other tools' formats."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..export import FORMATS, SUFFIX, exporter
from ..model.report import default_metric
from .common import CliError, add_read_options, fail, load_logdir


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("export", help="write profiles as Chrome trace, speedscope, pprof or Hatchet JSON")
    p.add_argument("logdir", help="directory holding DeepContext profiles (searched recursively); "
                   "every profile found is exported to its own file")
    p.add_argument("--format", choices=FORMATS, required=True,
                   help="chrome (chrome://tracing, Perfetto), speedscope, pprof (go tool pprof) or hatchet "
                        "(GraphFrame.from_literal)")
    p.add_argument("--out", required=True, help="directory for the exported files")
    p.add_argument("--metric", default=None,
                   help="metric drawn as the flame chart's widths (chrome, speedscope), the default sample "
                        "type (pprof) or Hatchet's default 'time' column: cpu_time_ns, device_time_ns, count, "
                        "samples, alloc_bytes (default: the profile's main one, device time where there is any, "
                        "else CPU time)")
    p.add_argument("--rank", type=int, default=None, metavar="N",
                   help="export only rank N's profiles (default: every rank's)")
    add_read_options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Export every readable profile. Unreadable files are named and skipped
    (as ``report`` does); a profile that cannot be exported is named and
    skipped too, and makes the exit status 1; the others are still written."""
    try:
        profiles, errors = load_logdir(args.logdir, args.rank, max_bytes=args.max_bytes)
    except CliError as exc:
        return fail(str(exc))
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return fail(f"cannot create --out {args.out!r}: {exc.strerror}")
    export = exporter(args.format)
    skipped = [f"skipped {error.file}: {error.message}" for error in errors]
    exported = 0
    for profile in profiles:
        metric = args.metric or default_metric(profile.tree)
        if args.metric and metric not in profile.tree.excl:
            skipped.append(f"skipped {profile.source}: it has no metric {metric!r}")
            continue
        run_name = profile.run.replace("/", "_").strip(".") or "run"
        name = f"{run_name}-rank{profile.rank}-steps{profile.steps[0]}-{profile.steps[1] - 1}{SUFFIX[args.format]}"
        try:
            (out / name).write_bytes(export(profile, metric))
        except OSError as exc:
            skipped.append(f"skipped {profile.source}: cannot write {out / name}: {exc.strerror or exc}")
            continue
        print(out / name)
        exported += 1
    for line in skipped:
        print(line)
    return 0 if profiles and exported == len(profiles) else 1
