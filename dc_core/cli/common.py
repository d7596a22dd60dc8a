"""Shared CLI plumbing: loading a logdir with a clear error and a progress bar."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress

from ..logdir import MAX_BYTES_ENV, find_profiles, max_profile_bytes, read_profile
from ..profile import Profile, ProfileError


class CliError(Exception):
    """A user-facing error: printed without a traceback, exit status 2."""


def _mebibytes(text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < 2**43:  # also refuses NaN
        raise argparse.ArgumentTypeError(f"expected a positive number of MiB, got {text!r}")
    return max(1, int(value * 2**20))


def add_read_options(parser: Any) -> None:
    """Options of every subcommand that reads profiles."""
    parser.add_argument("--max-file-mb", dest="max_bytes", type=_mebibytes, default=None, metavar="MIB",
                        help=f"skip profile files larger than this (default: {MAX_BYTES_ENV} bytes, else 512 MiB)")


def load_logdir(logdir: str, rank: int | None = None, quiet: bool = False,
                max_bytes: int | None = None) -> tuple[list[Profile], list[ProfileError]]:
    """Every readable profile under ``logdir`` (optionally one rank) and the errors.

    Args:
        max_bytes: Files over this size are skipped by name (default: `max_profile_bytes`).

    Raises:
        CliError: the logdir does not exist or holds no DeepContext profile, or
            the size cap in the environment is invalid.
    """
    path = Path(logdir)
    if not path.is_dir():
        raise CliError(f"logdir {logdir!r} does not exist or is not a directory")
    try:
        limit = max_profile_bytes() if max_bytes is None else max_bytes
    except ValueError as exc:
        raise CliError(str(exc)) from None
    files = [f for f in find_profiles(path) if rank is None or f.rank == rank]
    if not files:
        which = f" for rank {rank}" if rank is not None else ""
        raise CliError(f"no DeepContext profiles{which} under {logdir!r} (expected <run>/plugins/deepcontext/<rank>-<host>/steps-*.pb)")
    profiles, errors = [], []
    show = not quiet and len(files) > 8 and sys.stderr.isatty()
    with Progress(console=Console(stderr=True), transient=True, disable=not show) as progress:
        task = progress.add_task("reading profiles", total=len(files))
        for file in files:
            try:
                profiles.append(read_profile(file, limit))
            except ProfileError as exc:
                errors.append(exc)
            progress.advance(task)
    return profiles, errors


def fail(message: str) -> int:
    """Print ``error: message`` on stderr as one line (long paths are not
    wrapped) and return the exit status of a user-facing error."""
    Console(stderr=True).print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return 2
