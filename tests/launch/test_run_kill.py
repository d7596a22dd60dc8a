"""A ``deepcontext run`` killed outright takes its command with it: the
command gets SIGTERM from the kernel (its parent-death signal) and ends as it
would with its terminal; a torchrun agent takes its workers down."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's"
)

#: A command that says its pid and its parent's, then waits a minute.
SLEEPER = """
import os, sys, time
with open(os.path.join(sys.argv[1], f"{os.getpid()}.pid"), "w") as f:
    f.write(str(os.getppid()))
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (an unreaped zombie under a container's init does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _kill_the_run_and_watch(tmp_path: Path, command: list[str], expected: int) -> list[int]:
    """Start ``deepcontext run`` on ``command``, wait until ``expected`` of its
    processes said their pid, SIGKILL the run; the pids still alive 2 s later."""
    pids = tmp_path / "pids"
    pids.mkdir()
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dc_core",
            "run",
            "--no-report",
            "--logdir",
            str(tmp_path / "logs"),
            "--",
            *command,
            str(pids),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while (
            len(list(pids.iterdir())) < expected
            and time.monotonic() < deadline
            and run.poll() is None
        ):
            time.sleep(0.05)
        started = [int(p.stem) for p in pids.iterdir()]
        assert len(started) == expected, started
        assert all(_alive(pid) for pid in started)
        run.kill()
        run.wait()
        time.sleep(2)
        return [pid for pid in started if _alive(pid)]
    finally:
        for p in pids.iterdir():
            try:
                os.kill(int(p.stem), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_sigkill_of_the_run_ends_the_command(tmp_path):
    """Regression: the script kept running under PID 1 until it ended by itself."""
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    assert _kill_the_run_and_watch(tmp_path, [sys.executable, str(script)], expected=1) == []


@pytest.mark.slow
def test_sigkill_of_the_run_ends_torchruns_agent_and_workers(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        str(script),
    ]
    assert _kill_the_run_and_watch(tmp_path, command, expected=2) == []
