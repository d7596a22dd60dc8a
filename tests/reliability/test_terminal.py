"""A hostile profile's names reach a terminal escaped: no screen cleared, no
title or clipboard set, no text reversed, whatever command prints them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dc_core.cli.common import visible
from dc_core.model.tree import tree_from_lists
from dc_core.store.logdir import write_profile
from dc_core.store.profile import Profile

ROOT = Path(__file__).resolve().parents[2]

CLEAR = "\x1b[2J"
CLIPBOARD = "\x1b]52;c;ZXZpbA==\x07"  # OSC 52: write "evil" to the clipboard
TITLE = "\x1b]0;owned\x07"
REVERSE = "\u202e"
HOSTILE = (CLEAR, CLIPBOARD, TITLE, REVERSE, "\x00", "\x9b", "\r")


def _hostile(tmp_path: Path, run: str) -> Path:
    tree = tree_from_lists(
        (
            f"forward{CLEAR} @cpu_time_ns=1000000",
            (
                f"python:step{REVERSE}gpj.exe|t.py:3",
                f"aten::mm{CLIPBOARD} @cpu_time_ns=30000000,count=100",
            ),
            f"aten::add{TITLE}\x00\x9b\r @cpu_time_ns=20000000,count=100",
        )
    )
    profile = Profile(
        tree=tree, steps=(0, 3), step_times_ns=[17_000_000] * 3, run=f"{run}{CLEAR}{REVERSE}"
    )
    return write_profile(profile, tmp_path, run)


def test_visible_escapes_what_a_terminal_acts_on_and_keeps_the_rest():
    assert visible(f"a{CLEAR}b") == "a\\x1b[2Jb"
    assert visible(f"x{REVERSE}y\u2066z") == "x\\u202ey\\u2066z"
    assert visible("\x00\x7f\x9b\r") == "\\x00\\x7f\\x9b\\r"
    assert visible("tab\there\nnext é ✓ 中") == "tab\there\nnext é ✓ 中"


@pytest.mark.parametrize("tty", [False, True], ids=["piped", "colour"])
@pytest.mark.parametrize(
    "command", [["report"], ["analyze"], ["diff"], ["export", "--format", "speedscope"]]
)
def test_every_command_shows_a_hostile_profiles_names_escaped(tmp_path, command, tty):
    a, b = _hostile(tmp_path, "a"), _hostile(tmp_path, "b")
    args = [*command, str(a), str(b)] if command == ["diff"] else [*command, str(tmp_path / "a")]
    if command[0] == "export":
        args += ["--out", str(tmp_path / "out")]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    if tty:
        env["FORCE_COLOR"] = "1"  # styled output, as on a terminal: the console's own codes only
    done = subprocess.run(
        [sys.executable, "-m", "dc_core", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        errors="replace",
    )
    out = done.stdout + done.stderr
    assert done.returncode in (0, 1), out
    for raw in HOSTILE:
        assert raw not in out, (raw, out)
    if command[0] != "export":  # the export names its files only
        assert "\\x1b[2J" in out and "\\u202e" in out, out
