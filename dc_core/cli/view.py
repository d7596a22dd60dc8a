"""``deepcontext view LOGDIR``: TensorBoard on the logdir, DeepContext tab included."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.markup import escape
from rich.text import Text


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "view",
        help="open the profiles in TensorBoard's DeepContext tab",
        description="Start TensorBoard on LOGDIR with the DeepContext tab (Ctrl+C to stop). A LOGDIR "
        "without profiles yet is named in a warning and TensorBoard starts anyway.",
    )
    parser.add_argument("logdir", help="directory holding <run>/plugins/deepcontext/ profiles")
    parser.add_argument(
        "--port",
        type=int,
        default=6006,
        help="port to listen on (default 6006; 0 picks a free one)",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface to bind (default 127.0.0.1, this machine only)",
    )
    parser.set_defaults(run=run)
    return parser


def plugins() -> list:
    """TensorBoard's plugins with ours exactly once: registered through the
    entry point when the package is installed, added here when run from a
    source tree."""
    from tensorboard import default

    from ..tensorboard.plugin import DeepContextLoader

    dynamic = [p for p in default.get_dynamic_plugins() if p is not DeepContextLoader]
    return default.get_static_plugins() + dynamic + [DeepContextLoader()]


def warn_if_empty(logdir: str) -> bool:
    """Say so on stderr when ``logdir`` holds no profile yet; True when it warned.

    TensorBoard still starts: it is often opened before (or while) a job
    writes its first window, and the tab appears once a file is there; a
    mistyped directory is named in the warning, so it shows at once.
    """
    from ..store.logdir import find_profiles
    from .common import hanging, make_console

    if find_profiles(Path(logdir)):
        return False
    console = make_console(stderr=True)
    console.print(
        f"[bold yellow]warning:[/] no DeepContext profiles under {escape(repr(logdir))} yet",
        soft_wrap=True,
    )
    console.print(
        hanging(
            "         ",
            Text(
                "(expected <run>/plugins/deepcontext/<rank>-<host>/steps-<first>-<last>.pb); TensorBoard starts "
                "anyway: the DeepContext tab appears when a run has written one (reload the page)"
            ),
        )
    )
    return True


def run(args: argparse.Namespace) -> int:
    from .common import fail, install_hint

    if not Path(args.logdir).is_dir():
        return fail(f"logdir {args.logdir!r} does not exist or is not a directory")
    warn_if_empty(args.logdir)
    try:
        from tensorboard import program
    except ImportError:
        return fail(f"TensorBoard is not installed: {install_hint('tensorboard')}")
    board = program.TensorBoard(plugins=plugins())
    board.configure(
        argv=[None, "--logdir", str(args.logdir), "--port", str(args.port), "--host", args.host]
    )
    return int(board.main() or 0)
