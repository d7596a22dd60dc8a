"""What the export tests compare against: the real readers (located, or the
test skipped, or failed under CI) and the report's numbers per call path."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import pytest

from dc_core.cli.present import node_json
from dc_core.model.tree import Frame
from dc_core.model.views import view
from dc_core.store.profile import Profile

#: Overrides where speedscope's published schema is read from.
SCHEMA_ENV = "DEEPCONTEXT_SPEEDSCOPE_SCHEMA"
#: Where ``make install-test`` puts it (``npm pack speedscope`` into the venv).
SCHEMA_CACHE = Path(sys.prefix) / "share" / "speedscope" / "file-format-schema.json"


def missing(what: str) -> NoReturn:
    """Skip a test whose reader is not installed; under CI, where the Makefile
    installs every reader, fail it instead."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what}: CI installs it (make install-test)", pytrace=False)
    pytest.skip(what)


def require(module: str) -> Any:
    """Import a reader's Python package, or `missing`."""
    try:
        return __import__(module)
    except ImportError as exc:
        missing(f"{module} is not installed ({exc})")


def speedscope_schema_path() -> Path:
    """speedscope's ``file-format-schema.json`` (from ``$DEEPCONTEXT_SPEEDSCOPE_SCHEMA``
    or the venv's ``share/speedscope``), or `missing`."""
    path = Path(os.environ.get(SCHEMA_ENV) or SCHEMA_CACHE)
    if not path.is_file():
        missing(f"speedscope's file-format-schema.json is not at {path} (set {SCHEMA_ENV})")
    return path


def report_paths(profile: Profile, metric: str) -> dict[tuple[str, ...], dict[str, dict[str, int]]]:
    """The report's numbers (``excl`` and ``incl`` per metric) per call path of
    frame labels, from the window root's child down."""
    root = node_json(view(profile.tree), metric=metric)
    out: dict[tuple[str, ...], dict[str, dict[str, int]]] = {}
    stack = [((), child) for child in root["children"]]
    while stack:
        path, item = stack.pop()
        frame = Frame(
            item["kind"], item["name"], item["file"], item["line"], item["detail"], item["backward"]
        )
        path = path + (frame.label(),)
        assert path not in out, (
            f"two nodes with the path {path}: the comparison needs labels that tell them apart"
        )
        out[path] = {"excl": item["excl"], "incl": item["incl"]}
        stack.extend((path, child) for child in item["children"])
    return out


def report_totals(profile: Profile) -> dict[str, int]:
    """The report's whole-window value of every metric (the root's inclusive)."""
    return node_json(view(profile.tree))["incl"]


def drawn_widths(profile: Profile, metric: str) -> dict[tuple[str, ...], int]:
    """The inclusive value per call path of every node a flame chart of
    ``metric`` draws (every node with a positive inclusive value; none here
    outgrows its parent, so none is clipped)."""
    return {
        path: row["incl"].get(metric, 0)
        for path, row in report_paths(profile, metric).items()
        if row["incl"].get(metric, 0) > 0
    }
