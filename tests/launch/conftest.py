"""Helpers for ``deepcontext run`` tests: run the real command in a real process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from dc_core.store.logdir import find_profiles, read_profile

SCRIPTS = Path(__file__).parent / "scripts"


def deepcontext_run(
    tmp_path: Path,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 240,
    **popen: object,
) -> subprocess.CompletedProcess:
    """``python -m dc_core run --logdir <tmp_path>/out ARGS`` in ``tmp_path``; output captured."""
    command = [sys.executable, "-m", "dc_core", "run", "--logdir", str(tmp_path / "out"), *args]
    return subprocess.run(
        command,
        cwd=tmp_path,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        **popen,
    )


def plain(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 240
) -> subprocess.CompletedProcess:
    """The same command without DeepContext, for comparison."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=tmp_path,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_profiles(tmp_path: Path) -> list:
    """Every profile the run wrote (there is one run directory per invocation)."""
    return [read_profile(f) for f in find_profiles(tmp_path / "out")]


def split_stderr(stderr: str) -> tuple[str, str]:
    """(the command's own stderr, what ``deepcontext run`` said at its end,
    from its closing rule on): the command's stdout is its own, whole."""
    own, rule, said = stderr.partition("\u2500\u2500\u2500")
    return own, rule + said
