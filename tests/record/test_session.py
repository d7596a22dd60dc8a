"""The session state machine on a real pure-Python workload through the real collector."""

from __future__ import annotations

import logging
import os

import pytest

from dc_core.demo.workload import train
from dc_core.record.adapter import Adapter
from dc_core.record.session import Session, active_sessions
from dc_core.store.logdir import load_profiles


def labels(tree, node):
    return [tree.node_frame(n).label() for n in tree.path(node)]


def test_window_steps_phases_and_lines(tmp_path):
    written = train(tmp_path, steps=8, window=(2, 3))
    assert [p.name for p in written] == ["steps-2-4.pb"]
    (profile,), errors = load_profiles(tmp_path)
    assert errors == [] and profile.steps == (2, 5) and len(profile.step_times_ns) == 3
    tree = profile.tree
    assert {tree.node_frame(k).name for k in tree.children(0)} >= {
        "forward",
        "backward",
        "dataloader",
        "optimizer",
    }
    (featurize,) = tree.find_all(lambda f: f.name == "demo::featurize")
    path = tree.path_frames(featurize)
    # phase, then the Python stack (pytest's frames outermost), ending in the workload
    assert path[0].name == "forward" and [f.name for f in path[-3:]] == [
        "train",
        "forward",
        "demo::featurize",
    ]
    assert path[-3].file.endswith("dc_core/demo/workload.py") and path[-2].line > 0
    assert all(f.kind == "python" for f in path[1:-1])
    assert tree.value(featurize, "count") == 3  # once per profiled step, exactly
    (grad,) = tree.find_all(lambda f: f.name == "demo::grad")
    assert tree.node_frame(grad).backward and labels(tree, grad)[0] == "backward"
    assert profile.env["framework"] == "python" and profile.init_ns >= 0


def test_nothing_happens_outside_windows(tmp_path):
    session = Session(logdir=str(tmp_path), steps={"start": 100, "count": 1})
    for step in range(5):
        session.step_begin(step)
        with session.phase("optimizer"), session.region("x"):
            pass
        session.step_end(step)
    session.close()
    assert session._collector is None  # never even created
    assert session.written == [] and not (tmp_path / "plugins").exists()


def test_close_flushes_a_partial_window(tmp_path):
    session = Session(logdir=str(tmp_path), steps={"start": 1, "count": 10}, cpu_sampling_hz=0)
    for step in range(4):
        session.step_begin(step)
        session.step_end(step)
    session.close()
    assert [p.name for p in session.written] == ["steps-1-3.pb"]
    assert session not in active_sessions()


def test_user_exception_passes_through_unchanged(tmp_path):
    session = Session(logdir=str(tmp_path), steps={"start": 0, "count": 2}, cpu_sampling_hz=0)
    session.step_begin(0)
    error = KeyError("user's own")
    with pytest.raises(KeyError) as caught:
        with session.phase("forward"), session.region("op"):
            raise error
    assert caught.value is error
    assert not session.disabled
    session.step_end(0)
    session.close()
    assert len(session.written) == 1


class BrokenAdapter(Adapter):
    framework = "broken"

    def __init__(self):
        self.uninstalled = 0

    def install(self, session):
        pass

    def uninstall(self, session):
        self.uninstalled += 1

    def environment(self):
        raise RuntimeError("adapter bug")


def test_internal_error_logged_once_disables_and_training_goes_on(tmp_path, caplog):
    adapter = BrokenAdapter()
    session = Session(
        logdir=str(tmp_path),
        steps={"start": 0, "count": 2, "every": 2, "repeat": 0},
        adapter=adapter,
        cpu_sampling_hz=0,
    )
    with caplog.at_level(logging.ERROR, logger="deepcontext"):
        for step in range(6):
            session.step_begin(step)
            session.step_end(step)
    session.close()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "adapter bug" in errors[0].getMessage()
    assert session.disabled and adapter.uninstalled == 1


def test_unwritable_logdir_never_stops_training(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    session = Session(
        logdir=str(blocker / "sub"), steps={"start": 0, "count": 1}, cpu_sampling_hz=0
    )
    with caplog.at_level(logging.WARNING, logger="deepcontext"):
        session.step_begin(0)
        session.step_end(0)
    session.close()
    assert session.written == []
    assert any("could not write" in r.getMessage() for r in caplog.records)


def test_unwritable_logdir_warns_once_and_stops_periodic_windows(tmp_path, caplog):
    """Regression (issue 11 item 7): with ``every``, each window warned again and
    kept paying for a profile that could never be written."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    session = Session(
        logdir=str(blocker / "sub"),
        steps={"start": 0, "count": 1, "every": 2, "repeat": 0},
        cpu_sampling_hz=0,
    )
    opened = []
    with caplog.at_level(logging.WARNING, logger="deepcontext"):
        for step in range(10):
            session.step_begin(step)
            opened.append(session.in_window)
            session.step_end(step)
    session.close()
    warnings = [r.getMessage() for r in caplog.records]
    assert (
        len(warnings) == 1 and "could not write" in warnings[0] and "profiling stops" in warnings[0]
    )
    assert opened == [True] + [False] * 9  # no window after the first failed write
    assert session not in active_sessions()


def test_fork_in_the_middle_of_a_window(tmp_path):
    session = Session(
        logdir=str(tmp_path),
        steps={"start": 0, "count": 3},
        cpu_sampling_hz=200,
        system_interval_ms=20,
    )
    session.step_begin(0)
    pid = os.fork()
    if pid == 0:  # the child: must not write the parent's window, must not hang
        try:
            session.close()
            os._exit(0 if not list(tmp_path.rglob("*.pb")) else 3)
        finally:
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    session.step_end(0)
    session.step_begin(1)
    session.step_end(1)
    session.close()
    (profile,), _ = load_profiles(tmp_path)
    assert profile.steps == (0, 2)


def _closed_warnings(caplog, session):
    with caplog.at_level(logging.WARNING, logger="deepcontext"):
        session.close()
    return [r.getMessage() for r in caplog.records if "wrote no profile" in r.getMessage()]


def test_a_session_that_never_saw_a_step_says_so_once(tmp_path, caplog):
    session = Session(logdir=str(tmp_path / "runs"), steps={"start": 5, "count": 3})
    (message,) = _closed_warnings(caplog, session)
    assert "no training step was seen" in message and "steps 5–7" in message
    assert str(tmp_path / "runs") in message
    assert _closed_warnings(caplog, session) == [message]  # closing again adds nothing


def test_a_window_after_the_loop_ended_is_named_with_the_steps_seen(tmp_path, caplog):
    session = Session(logdir=str(tmp_path), run="exp", steps={"start": 50, "count": 3})
    for step in range(10):
        session.step_begin(step)
        session.step_end(step)
    (message,) = _closed_warnings(caplog, session)
    assert "steps 0–9 were seen; it profiles steps 50–52" in message
    assert str(tmp_path / "exp") in message
    assert not (tmp_path / "exp").exists()


def test_a_session_that_wrote_its_window_does_not_warn(tmp_path, caplog):
    session = Session(logdir=str(tmp_path), steps={"start": 0, "count": 1})
    session.step_begin(0)
    session.step_end(0)
    assert _closed_warnings(caplog, session) == [] and len(session.written) == 1


def test_a_loop_that_ends_inside_a_window_writes_it_as_partial_of_its_plan(tmp_path):
    from dc_core.model.window import window_label

    session = Session(logdir=str(tmp_path), steps={"start": 5, "count": 3})
    for step in range(6):  # steps 0..5: the window 5–7 sees only step 5
        session.step_begin(step)
        session.step_end(step)
    session.close()
    (profile,), _ = load_profiles(tmp_path)
    assert profile.steps == (5, 6) and profile.planned_window == (5, 8)
    assert (
        window_label(profile.steps, profile.step_times_ns, profile.planned_window)
        == "step 5 (partial: step 5 timed, of steps 5–7 planned)"
    )


def test_the_session_state_says_why_profiling_is_off(tmp_path):
    from dc_core.record.state import State

    assert Session(logdir=str(tmp_path), enabled=False).state is State.OFF
    session = Session(logdir=str(tmp_path), steps={"start": 0, "count": 2}, cpu_sampling_hz=0)
    # the base one: hooks nothing
    assert session.state is State.ON and type(session.adapter) is Adapter
    session.step_begin(0)
    assert session.window == (0, 2) and session.last_step == 0
    session.fail(RuntimeError("profiler bug"), "test")
    assert session.state is State.FAILED and session.disabled and session.window is None
    session._write_failed(tmp_path, OSError("later"))  # a failure stays the reason
    assert session.state is State.FAILED
    session.close()
    assert len(session.written) == 1  # the partial window, written at the failure
