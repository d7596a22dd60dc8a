"""``deepcontext`` command line: run, report, diff, analyze, export, demo, view."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

# Subcommands, one module each; a module that cannot import (an optional
# component missing) leaves its subcommand out instead of breaking the CLI.
_SUBCOMMANDS = ("run", "report", "diff", "analyze", "export", "demo", "view")


def version() -> str:
    """The installed distribution's version, else the package's ``__version__``
    (a source tree on ``sys.path`` without an install)."""
    import importlib.metadata

    try:
        return importlib.metadata.version("deepcontext")
    except importlib.metadata.PackageNotFoundError:
        from .. import __version__

        return __version__


class _Version(argparse.Action):
    """``--version``, looked up only when asked (the metadata import is not free)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        print(f"deepcontext {version()}")
        parser.exit()


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line; ``only``: just that subcommand (its module alone is
    imported, so ``deepcontext run`` starts the command sooner)."""
    parser = argparse.ArgumentParser(
        prog="deepcontext",
        description="DeepContext: calling-context profiles of deep-learning training.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    parser.add_argument("--version", action=_Version)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in [only] if only in _SUBCOMMANDS else _SUBCOMMANDS:
        try:
            module = importlib.import_module(f"dc_core.cli.{name}")
        except ImportError as exc:
            logging.getLogger("deepcontext").debug("subcommand %s unavailable: %s", name, exc)
            continue
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``deepcontext`` console script and ``python -m dc_core``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
