"""Shared CLI plumbing: loading a logdir with a clear error and a progress bar."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress

from ..logdir import find_profiles, read_profile
from ..profile import Profile, ProfileError


class CliError(Exception):
    """A user-facing error: printed without a traceback, exit status 2."""


def load_logdir(logdir: str, rank: int | None = None, quiet: bool = False) -> tuple[list[Profile], list[ProfileError]]:
    """Every readable profile under ``logdir`` (optionally one rank) and the errors.

    Raises:
        CliError: the logdir does not exist or holds no DeepContext profile.
    """
    path = Path(logdir)
    if not path.is_dir():
        raise CliError(f"logdir {logdir!r} does not exist or is not a directory")
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
                profiles.append(read_profile(file))
            except ProfileError as exc:
                errors.append(exc)
            progress.advance(task)
    return profiles, errors


def fail(message: str) -> int:
    Console(stderr=True).print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    return 2
