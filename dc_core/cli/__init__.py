"""``deepcontext`` command line: run, report, analyze, export, demo, view."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import logging
import sys
from typing import Sequence

# Subcommands, one module each; a module that cannot import (an optional
# component missing) leaves its subcommand out instead of breaking the CLI.
_SUBCOMMANDS = ("run", "report", "analyze", "export", "demo", "view")


def version() -> str:
    """The installed distribution's version, else the package's ``__version__``
    (a source tree on ``sys.path`` without an install)."""
    try:
        return importlib.metadata.version("deepcontext")
    except importlib.metadata.PackageNotFoundError:
        from .. import __version__

        return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="deepcontext",
        description="DeepContext: calling-context profiles of deep-learning training.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    parser.add_argument("--version", action="version", version=f"deepcontext {version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in _SUBCOMMANDS:
        try:
            module = importlib.import_module(f"dc_core.cli.{name}")
        except ImportError as exc:
            logging.getLogger("deepcontext").debug("subcommand %s unavailable: %s", name, exc)
            continue
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``deepcontext`` console script and ``python -m dc_core``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
