"""Source snippets for the details panel, from allowed roots only.

A profile names source files, but a profile is data: it could name any path.
A snippet is shown only when the file's real path (symlinks resolved) lies
under an allowed root (the directory TensorBoard runs in, plus those listed in
``DEEPCONTEXT_SOURCE_ROOTS``) and looks like source code.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from .params import BadRequest

ROOTS_ENV = "DEEPCONTEXT_SOURCE_ROOTS"
SUFFIXES = frozenset(
    {".py", ".pyx", ".pxd", ".pyi", ".c", ".cc", ".cpp", ".cxx", ".h", ".hpp", ".cu", ".cuh"}
)
MAX_BYTES = 4 << 20
CONTEXT_LINES = 8


def allowed_roots(env: Mapping[str, str] = os.environ, cwd: str | None = None) -> list[Path]:
    """The working directory plus ``DEEPCONTEXT_SOURCE_ROOTS`` (os.pathsep-separated)."""
    roots = [cwd or os.getcwd(), *(r for r in env.get(ROOTS_ENV, "").split(os.pathsep) if r)]
    return [Path(os.path.realpath(r)) for r in roots]


def _under(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def snippet(file: str, line: int, roots: Sequence[Path], context: int = CONTEXT_LINES) -> dict:
    """Lines around ``file:line``, or ``{"available": False, "reason": ...}``.

    Raises:
        BadRequest: the recorded name cannot be a path (a NUL byte); HTTP 400.
    """
    if not file or file.startswith("<"):
        return {"available": False, "reason": "no source file recorded"}
    if "\x00" in file:  # os functions raise ValueError on it
        raise BadRequest("the node's source file name holds a NUL byte; it names no file")
    candidates = [Path(file)] if os.path.isabs(file) else [root / file for root in roots]
    for candidate in candidates:
        real = Path(os.path.realpath(candidate))
        if not _under(real, roots):
            continue
        if real.suffix not in SUFFIXES:
            return {"available": False, "reason": "not a source file"}
        try:
            if not real.is_file() or real.stat().st_size > MAX_BYTES:
                continue
            with open(real, encoding="utf-8", errors="replace") as handle:
                lines = handle.read().splitlines()
        except OSError:
            continue
        first = max(1, line - context)
        last = min(len(lines), max(line, 1) + context)
        return {
            "available": True,
            "file": file,
            "line": line,
            "first": first,
            "lines": lines[first - 1 : last],
        }
    return {
        "available": False,
        "reason": "not readable under the allowed source roots "
        f"(the working directory, or {ROOTS_ENV})",
    }
