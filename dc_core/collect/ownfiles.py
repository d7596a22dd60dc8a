"""Which Python files are the profiler's own, so captures leave them out."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

_PACKAGES = ("dc_core", "dc_torch", "dc_jax", "dc_lightning", "dc_hf")
# Interpreter machinery that runs user code but is not user code (runpy, importlib).
_ALWAYS_SKIPPED = ("<frozen ",)


def profiler_files() -> list[str]:
    """Every module file of DeepContext's packages except demo workloads,
    which are user code as far as the profile is concerned."""
    root = Path(__file__).resolve().parents[2]
    files = []
    for package in _PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if "demo" not in path.relative_to(root / package).parts[0]:
                files.append(str(path))
    # Our console script; Python records the main script's path made absolute.
    launcher = Path(os.path.abspath(sys.argv[0])) if sys.argv and sys.argv[0] else None
    if launcher is not None and launcher.name == "deepcontext":
        files.append(str(launcher))
    return files


def skip_profiler_files(collector: Any, extra: tuple[str, ...] = ()) -> None:
    """Register the profiler's own files (and ``extra`` prefixes) as skipped."""
    for prefix in (*profiler_files(), *_ALWAYS_SKIPPED, *extra):
        collector.skip_prefix(prefix)
