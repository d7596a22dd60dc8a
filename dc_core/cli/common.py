"""Shared CLI plumbing: loading a logdir with a clear error and a progress bar."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import unquote

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.markup import escape
from rich.measure import Measurement
from rich.progress import Progress
from rich.segment import Segment
from rich.text import Text

from ..record.validate import CONTROL_CHARACTERS
from ..store.logdir import (
    MAX_BYTES_ENV,
    OutwardLink,
    ProfileFile,
    find_profiles,
    max_profile_bytes,
    outward_message,
    read_profile,
    shown_path,
)
from ..store.profile import Profile, ProfileError

#: Width of output that is not a terminal, when ``COLUMNS`` does not say:
#: wide, so that deep call paths in a piped report are not cut.
PIPED_WIDTH = 160


#: From this many files on, reading says so on stderr even when it is not a terminal.
MANY_FILES = 50


class CliError(Exception):
    """A user-facing error: printed without a traceback, exit status 2."""


def install_hint(extra: str) -> str:
    """The pip command that adds ``extra`` the way this package was installed:
    from its checkout (``pip install -e '.[tensorboard]'`` there), or by name."""
    try:
        from importlib.metadata import distribution

        origin = json.loads(distribution("deepcontext").read_text("direct_url.json") or "{}")
    except Exception:  # not installed as a distribution, or no record of where from
        origin = {}
    url = origin.get("url", "")
    if "dir_info" in origin and url.startswith("file://"):
        editable = "-e " if origin["dir_info"].get("editable") else ""
        return f"pip install {editable}{shlex.quote(shown_path(unquote(url[len('file://') :])) + f'[{extra}]')}"
    return f"pip install 'deepcontext[{extra}]'"


def output_width(stream: TextIO | None = None, env: Mapping[str, str] = os.environ) -> int | None:
    """Columns to lay output out in: ``COLUMNS`` when set (also when piped),
    else the terminal's own width (None: rich asks the terminal), else `PIPED_WIDTH`."""
    columns = env.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    stream = stream or sys.stdout
    try:
        return None if stream.isatty() else PIPED_WIDTH
    except (AttributeError, ValueError):  # a closed or odd stream
        return PIPED_WIDTH


#: What a terminal acts on instead of showing, but newline and tab.
_ACTED_ON = re.compile(f"(?![\n\t])[{CONTROL_CHARACTERS}]")


def visible(text: str) -> str:
    """``text`` with each character a terminal would act on (clear the screen,
    set the title or the clipboard, reverse what follows) shown as its escape
    instead: ``\\x1b``, ``\\u202e``. A name from a profile is anyone's text."""
    return _ACTED_ON.sub(lambda m: repr(m.group())[1:-1], text)


class SafeConsole(Console):
    """A `Console` whose printed text shows control and bidi characters
    escaped (`visible`), whatever part of a table or message holds them; the
    console's own styling and cursor codes are left as they are."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            Segment(visible(s.text), s.style, s.control)
            if s.control is None and _ACTED_ON.search(s.text)
            else s
            for s in buffer
        )


def make_console(stderr: bool = False, **options: Any) -> Console:
    """The console every subcommand prints with: `output_width`, no
    highlighting, names shown `visible`; ``options`` go to `Console`."""
    options.setdefault("width", output_width(sys.stderr if stderr else sys.stdout))
    return SafeConsole(highlight=False, stderr=stderr, **options)


def middle_truncate(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells, cut in the middle:
    ``model.blocks.3.attn (SelfAttention)`` → ``model.bloc…lfAttention)``."""
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return "\u2026"[: max(width, 0)]
    room = width - 1
    head = _cells_from(text, (room + 1) // 2)  # the start gets the odd cell
    tail = _cells_from(text[::-1], room - cell_len(head))[::-1]
    return head + "\u2026" + tail


def _cells_from(text: str, cells: int) -> str:
    """The longest start of ``text`` that fits in ``cells`` cells."""
    used = 0
    for index, char in enumerate(text):
        used += cell_len(char)
        if used > cells:
            return text[:index]
    return text


class Hanging:
    """``lead`` then ``body``, the body's wrapped lines aligned under its first
    line (a hanging indent) instead of at column 0; no line padded with blanks."""

    def __init__(self, lead: Text, body: RenderableType) -> None:
        self.lead, self.body = lead, body

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        indent = self.lead.cell_len
        width = max(options.max_width - indent, 8)
        lines = console.render_lines(
            self.body, options.update(width=width), pad=False, new_lines=False
        )
        for index, line in enumerate(lines or [[]]):
            yield from self.lead.render(console) if index == 0 else [Segment(" " * indent)]
            yield from _rstrip(line)
            yield Segment.line()

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(self.lead.cell_len + 8, options.max_width)


def _rstrip(line: list[Segment]) -> list[Segment]:
    """A rendered line without the blanks word wrapping leaves at its end."""
    line = list(line)
    while line and not line[-1].control and not line[-1].text.rstrip(" "):
        line.pop()
    if line and not line[-1].control:
        last = line[-1]
        line[-1] = Segment(last.text.rstrip(" "), last.style)
    return line


def hanging(lead: Text | str, body: RenderableType) -> Hanging:
    """`Hanging`: ``lead``, and ``body`` wrapped under its own start."""
    return Hanging(Text(lead) if isinstance(lead, str) else lead, body)


def print_about_file(console: Console, lead: Text, path: str, message: str) -> None:
    """``lead path: message`` on one line when it fits; else the path whole on
    its own line (never wrapped inside) and the message under it, indented."""
    line = lead + Text(f"{path}: {message}")
    if line.cell_len <= console.width:
        console.print(line, soft_wrap=True)
        return
    console.print(lead + Text(f"{path}:"), soft_wrap=True)
    console.print(hanging("    ", Text(message)))


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
    parser.add_argument(
        "--max-file-mb",
        dest="max_bytes",
        type=_mebibytes,
        default=None,
        metavar="MIB",
        help=f"skip profile files larger than this (default: {MAX_BYTES_ENV} bytes, else 512 MiB)",
    )


def list_logdir(
    logdir: str, rank: int | None = None, max_bytes: int | None = None
) -> tuple[list[ProfileFile], int]:
    """The profile files under ``logdir`` (optionally one rank's) and the size
    cap; links out of the logdir, which are not followed, are named in a warning.

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
    outward: list[OutwardLink] = []
    files = [f for f in find_profiles(path, outward) if rank is None or f.rank == rank]
    if outward:
        make_console(stderr=True).print(
            f"[bold yellow]warning:[/] {escape(outward_message(outward, path))}", soft_wrap=True
        )
    if not files:
        which = f" for rank {rank}" if rank is not None else ""
        raise CliError(
            f"no DeepContext profiles{which} under {logdir!r} "
            "(expected <run>/plugins/deepcontext/<rank>-<host>/steps-*.pb)"
        )
    return files, limit


def read_files(
    files: list[ProfileFile], limit: int, quiet: bool = False, where: str = ""
) -> tuple[list[Profile], list[ProfileError]]:
    """Read ``files`` with a progress bar on a terminal; bad files are returned as errors."""
    profiles, errors = [], []
    show = not quiet and len(files) > 8 and sys.stderr.isatty()
    # a log, not a terminal: one line says what it is doing
    if not quiet and len(files) >= MANY_FILES and not show:
        print(
            f"deepcontext: reading {len(files):,} profiles under {where}",
            file=sys.stderr,
            flush=True,
        )
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
    make_console(stderr=True).print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    return 2
