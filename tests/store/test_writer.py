"""Profile files are visible under their final name when the window's step
returns (an ``os._exit`` right after loses none), and synced to disk off the
training thread: in order, with bounded work waiting, failures reported once,
and every file on disk when the session closes or the interpreter exits."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from dc_core.record.session import Session
from dc_core.store import writer as writer_mod
from dc_core.store.logdir import read_profile
from dc_core.store.writer import DEPTH, ProfileWriter


def _gated(monkeypatch) -> tuple[threading.Event, list[Path]]:
    """fsyncs that wait for the returned event; the paths they reached, in order."""
    gate, reached = threading.Event(), []
    real = writer_mod.sync_file

    def gated(path: Path, now: float) -> None:
        reached.append(path)
        assert gate.wait(30), "the test never opened the gate"
        real(path, now)

    monkeypatch.setattr(writer_mod, "sync_file", gated)
    return gate, reached


def test_syncs_keep_their_order_and_submit_waits_once_depth_syncs_wait(tmp_path, monkeypatch):
    gate, reached = _gated(monkeypatch)
    done: list[Path] = []
    w = ProfileWriter(done.append, lambda path, exc: None)
    paths = [tmp_path / f"{i}.pb" for i in range(DEPTH + 2)]
    for i, path in enumerate(paths[: DEPTH + 1]):  # one being synced, DEPTH waiting
        w.submit(bytes([i]), path)
        assert path.read_bytes() == bytes([i])  # there for every reader before its fsync
    last = threading.Thread(target=w.submit, args=(b"last", paths[-1]))
    last.start()
    last.join(0.5)
    assert last.is_alive() and done == []  # work stays bounded: the producer waits
    gate.set()
    last.join(10)
    w.close()
    assert done == paths == reached
    assert [p.read_bytes() for p in paths] == [bytes([i]) for i in range(DEPTH + 1)] + [b"last"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_a_failed_write_is_reported_and_the_next_one_is_still_written(tmp_path):
    failures: list[tuple[Path, OSError]] = []
    done: list[Path] = []
    w = ProfileWriter(done.append, lambda path, exc: failures.append((path, exc)))
    w.submit(b"x", tmp_path / "missing-dir" / "a.pb")
    w.submit(b"y", tmp_path / "b.pb")
    w.close()
    assert [p.name for p, _ in failures] == ["a.pb"] and isinstance(
        failures[0][1], FileNotFoundError
    )
    assert done == [tmp_path / "b.pb"] and (tmp_path / "b.pb").read_bytes() == b"y"


def _loop(session: Session, steps: int, between=lambda step: None) -> None:
    for step in range(steps):
        session.step_begin(step)
        with session.phase("forward"):
            sum(range(2000))
        session.step_end(step)
        between(step)


def test_a_window_closes_without_waiting_for_the_disk_and_its_file_is_there(tmp_path, monkeypatch):
    gate, reached = _gated(monkeypatch)
    session = Session(
        logdir=str(tmp_path), steps={"start": 0, "count": 2}, cpu_sampling_hz=0, framework="python"
    )
    _loop(session, 4)  # the window (steps 0-1) closed at step 1's end; its fsync cannot run yet
    (visible,) = tmp_path.rglob("steps-0-1.pb")
    # readable, not yet reported
    assert read_profile(visible).steps == (0, 2) and session.written == []
    deadline = time.monotonic() + 10
    while not reached and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [p.name for p in reached] == ["steps-0-1.pb"]
    threading.Timer(0.2, gate.set).start()
    session.close()  # waits for the fsync
    (written,) = session.written
    assert written == visible and written.parent.parent == tmp_path / "plugins" / "deepcontext"


@pytest.mark.parametrize(
    ("step", "error"),
    [
        ("write_visible", OSError(28, "No space left on device")),
        ("sync_file", OSError(5, "Input/output error")),
    ],
)
def test_a_failed_write_or_fsync_warns_once_leaves_no_file_and_stops_later_windows(
    tmp_path, monkeypatch, caplog, step, error
):
    def fails(*args: object) -> None:
        raise error

    monkeypatch.setattr(writer_mod, step, fails)
    session = Session(
        logdir=str(tmp_path),
        steps={"start": 0, "count": 1, "every": 3, "repeat": 0},
        cpu_sampling_hz=0,
        framework="python",
    )
    with caplog.at_level(logging.WARNING, logger="deepcontext"):
        _loop(session, 2)
        session._writer.flush()  # a failed fsync is known before the next window is due
        _loop(session, 7)  # steps 0..6 again: windows at 3 and 6 would open
        session.close()
    warnings = [
        r.getMessage() for r in caplog.records if "could not write its profile" in r.getMessage()
    ]
    assert len(warnings) == 1 and error.strerror in warnings[0]
    assert session.disabled and session.written == [] and not list(tmp_path.rglob("*.pb"))


def test_a_session_never_closed_still_has_its_file_synced_at_exit(tmp_path):
    script = textwrap.dedent(f"""
        import time
        from dc_core.record.session import Session
        from dc_core.store import writer
        real = writer.sync_file
        writer.sync_file = lambda path, now: (time.sleep(0.5), real(path, now), open(path.with_suffix(".synced"), "w"))
        session = Session(logdir={str(tmp_path)!r}, steps={{"start": 0, "count": 1}}, cpu_sampling_hz=0,
                          framework="python")
        session.step_begin(0)
        session.step_end(0)  # the window closes; its fsync runs as the script ends
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    (path,) = tmp_path.rglob("steps-0-0.pb")
    assert read_profile(path).steps == (0, 1) and path.with_suffix(".synced").exists()


@pytest.mark.parametrize("runner", ["session", "deepcontext run"])
def test_every_window_closed_before_os_exit_is_on_disk(tmp_path, runner):
    """Regression: a window closed, two more steps ran, the script called
    os._exit(0): the file was missing in 8 of 8 runs (1 of 8 under
    ``deepcontext run``), its write still queued on the writer's thread."""
    script = tmp_path / "hard_exit.py"
    script.write_text(
        textwrap.dedent("""
        import os, sys
        from dc_core.record.session import Session
        session = Session(logdir=sys.argv[1], steps={"start": 0, "count": 2}, cpu_sampling_hz=0,
                          system_interval_ms=0, framework="python")
        for step in range(4):  # the window is steps 0-1; two more steps run after it closed
            session.step_begin(step)
            sum(range(1000))
            session.step_end(step)
        os._exit(0)
    """)
    )
    runs = 20 if runner == "session" else 4  # each `deepcontext run` starts two interpreters
    for n in range(runs):
        logdir = tmp_path / str(n)
        command = [sys.executable, str(script), str(logdir)]
        if runner == "deepcontext run":
            command = [
                sys.executable,
                "-m",
                "dc_core",
                "run",
                "--no-report",
                "--logdir",
                str(logdir),
                "--",
                *command,
            ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        (path,) = logdir.rglob("steps-0-1.pb")
        assert read_profile(path).steps == (0, 2)


def test_flush_all_waits_for_every_writer_with_writes_under_way(tmp_path, monkeypatch):
    gate, reached = _gated(monkeypatch)
    writers = [ProfileWriter(lambda path: None, lambda path, exc: None) for _ in range(2)]
    for i, w in enumerate(writers):
        w.submit(b"z", tmp_path / f"{i}.pb")
    flushed = threading.Thread(target=writer_mod.flush_all)
    flushed.start()
    flushed.join(0.3)
    assert flushed.is_alive()  # both writes wait at the gate
    gate.set()
    flushed.join(10)
    assert not flushed.is_alive() and sorted(p.name for p in tmp_path.iterdir()) == ["0.pb", "1.pb"]
    for w in writers:
        w.close()
    assert not set(writers) & set(writer_mod._LIVE)
