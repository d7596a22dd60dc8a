"""``deepcontext run`` on plain PyTorch scripts with no DeepContext import, in real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from dc_core.store.logdir import find_profiles, read_profile

from .conftest import SCRIPTS, deepcontext_run, plain, run_profiles, split_stderr

pytestmark = pytest.mark.slow

VENV_PATH = {"PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}


def line_of(script: Path, text: str) -> int:
    """The line of ``script`` holding ``text`` (first match)."""
    return next(n for n, line in enumerate(script.read_text().splitlines(), 1) if text in line)


def _labels(tree, node):
    return [f.label() for f in tree.path_frames(node)]


def test_a_plain_script_is_profiled_under_its_own_lines(tmp_path):
    script = str(SCRIPTS / "plain_torch.py")
    module, main, forward_line, step = (
        line_of(SCRIPTS / "plain_torch.py", text)
        for text in (
            "sys.exit(main())",
            "loss = nn.functional.mse_loss(model(x), y)",
            "return self.body(x)",
            "opt.step()",
        )
    )
    done = deepcontext_run(
        tmp_path, "--steps", "2:3", "--", "python", script, "--epochs", "1", env=VENV_PATH
    )
    alone = plain(tmp_path, script, "--epochs", "1")
    assert done.returncode == 0, done.stderr
    assert done.stdout == alone.stdout  # byte for byte: the report goes to stderr
    own, said = split_stderr(done.stderr)
    assert own == alone.stderr == ""
    [profile] = run_profiles(tmp_path)
    assert profile.steps == (2, 5) and len(profile.step_times_ns) == 3
    assert "SGD.step at plain_torch.py:" in profile.step_source
    tree = profile.tree
    phases = {tree.node_frame(n).name for n in tree.children(0)}
    assert {"forward", "backward", "optimizer"} <= phases
    forward = tree.find(
        "forward",
        f"plain_torch.py:{module} <module>",
        f"plain_torch.py:{main} main",
        "Net (Net)",
        f"plain_torch.py:{forward_line} Net.forward",
        "body (Sequential)",
        "body.0 (Linear)",
        "aten::linear",
    )
    assert forward is not None, [
        l for n in range(1, len(tree)) for l in [_labels(tree, n)] if "aten::linear" in l[-1]
    ]
    assert tree.excl["count"][forward] == 3  # once per step of the window
    backward = [
        n
        for n in range(1, len(tree))
        if tree.node_frame(n).backward and "body.0 (Linear)" in _labels(tree, n)
    ]
    assert backward and _labels(tree, backward[0])[0] == "backward"
    assert (
        tree.find("optimizer", f"plain_torch.py:{module} <module>", f"plain_torch.py:{step} main")
        is not None
    )
    # the report printed after the script names how the steps were found
    assert f"steps: each SGD.step at plain_torch.py:{step}" in said
    run_dir = find_profiles(tmp_path / "out")[0].path.parents[3].name
    assert said.endswith(f"deepcontext report out/{run_dir}\n  deepcontext view out\n")


def test_exit_status_and_exceptions_are_the_scripts(tmp_path):
    script = str(SCRIPTS / "plain_torch.py")
    exits = deepcontext_run(tmp_path, "--steps", "2:3", script, "--exit", "3")
    assert exits.returncode == 3
    assert [p.steps for p in run_profiles(tmp_path)] == [(2, 5)]

    (tmp_path / "raise").mkdir()
    raised = deepcontext_run(tmp_path / "raise", "--steps", "2:3", script, "--raise-at", "6")
    alone = plain(tmp_path, script, "--raise-at", "6")
    assert raised.returncode == alone.returncode == 1
    own = split_stderr(raised.stderr)[0]
    assert own == alone.stderr and "RuntimeError: planted failure at step 6" in own
    [window] = run_profiles(tmp_path / "raise")
    # written whole before the failure
    assert window.steps == (2, 5) and len(window.step_times_ns) == 3


def test_accumulation_and_a_second_optimizer_still_make_one_step_per_update(tmp_path):
    done = deepcontext_run(
        tmp_path, "--steps", "2:3", str(SCRIPTS / "plain_torch.py"), "--accumulate", "2", "--critic"
    )
    assert done.returncode == 0, done.stderr
    [profile] = run_profiles(tmp_path)
    assert profile.steps == (2, 5) and len(profile.step_times_ns) == 3
    assert "SGD.step" in profile.step_source  # the first optimizer to step, not the critic's Adam
    tree = profile.tree
    first = [
        n
        for n in range(1, len(tree))
        if _labels(tree, n)[-2:] == ["body.0 (Linear)", "aten::linear"]
    ]
    # 3 updates of 2 micro-batches, plus the critic's input computed once per update
    assert sum(tree.excl["count"][n] for n in first) == 3 * 2 + 3
    # the critic's update is still in the window
    assert tree.find_all(lambda f: f.name == "Adam.step")


def test_regression_a_window_open_when_the_script_ends_is_written(tmp_path):
    """The first window written at interpreter exit used to import the analyzer
    then, which imported concurrent.futures: too late to register its exit hook."""
    done = deepcontext_run(tmp_path, "--steps", "8:10", str(SCRIPTS / "plain_torch.py"))
    assert done.returncode == 0, done.stderr
    [profile] = run_profiles(tmp_path)
    # steps 8 and 9 whole, 10 begun
    assert profile.steps == (8, 11) and len(profile.step_times_ns) == 2
    assert profile.planned_window == (8, 18)
    linear = profile.tree.find_all(lambda f: f.name == "aten::linear" and not f.backward)
    # two Linear layers in steps 8 and 9
    assert sum(profile.tree.excl["count"][n] for n in linear) == 2 * 2


def test_a_script_profiling_itself_keeps_its_profiler_and_nothing_is_added(tmp_path):
    done = deepcontext_run(tmp_path, str(SCRIPTS / "plain_torch.py"), "--own-profiler")
    assert done.returncode == 0, done.stderr
    files = find_profiles(tmp_path)
    # its own window (steps 1-2), none of the run's default 5-7; in the run's directory, as DEEPCONTEXT_CONFIG says
    assert [f.steps for f in files] == [(1, 3)] and files[0].path.is_relative_to(tmp_path / "out")
    assert read_profile(files[0]).step_source == ""


def _wait_for(proc: subprocess.Popen, text: str) -> str:
    seen = ""
    deadline = time.monotonic() + 120
    while text not in seen:
        line = proc.stdout.readline()
        assert line or time.monotonic() < deadline, seen
        if not line and proc.poll() is not None:
            raise AssertionError(f"ended before {text!r}: {seen}{proc.stderr.read()}")
        seen += line
    return seen


def _interrupted(tmp_path: Path, command: list[str], send) -> tuple[int, str, str]:
    # Ctrl-C works as in a terminal even when this test runs where SIGINT is
    # ignored (a background job of a shell passes SIG_IGN on to its children).
    proc = subprocess.Popen(
        command,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        before = _wait_for(proc, "waiting in step 7")
        # into the script's sleep, so that the traceback ends on the same line each time
        time.sleep(1.0)
        send(proc)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, before + out, err


def _run(tmp_path: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "dc_core",
        "run",
        "--logdir",
        str(tmp_path / "out"),
        "--steps",
        "2:3:4:2",
        str(SCRIPTS / "signals.py"),
        *args,
    ]


def _windows(tmp_path: Path) -> list:
    return sorted(run_profiles(tmp_path), key=lambda p: p.steps)


def test_ctrl_c_in_a_window_writes_it_partial_and_ends_as_the_script_does(tmp_path):
    ctrl_c = lambda proc: os.killpg(proc.pid, signal.SIGINT)  # the terminal signals the whole group
    status, out, err = _interrupted(tmp_path, _run(tmp_path), ctrl_c)
    alone = _interrupted(tmp_path, [sys.executable, str(SCRIPTS / "signals.py")], ctrl_c)
    assert status == alone[0] == -signal.SIGINT
    own, said = split_stderr(err)
    assert own == alone[2] and own.rstrip().endswith("KeyboardInterrupt")
    first, second = _windows(tmp_path)
    assert first.steps == (2, 5) and len(first.step_times_ns) == 3
    assert second.steps == (6, 8) and len(second.step_times_ns) == 1  # step 6 timed, 7 interrupted
    assert second.planned_window == (6, 9)
    assert "steps 6–7 (partial: step 6 timed, of steps 6–8 planned)" in said


def test_sigterm_reaches_the_scripts_own_handler_and_its_status_is_kept(tmp_path):
    status, out, err = _interrupted(
        tmp_path, _run(tmp_path, "--own-handler"), lambda p: p.send_signal(signal.SIGTERM)
    )
    assert status == 7 and "own SIGTERM handler ran" in out
    first, second = _windows(tmp_path)
    assert len(first.step_times_ns) == 3 and second.steps == (6, 8)


def test_sigterm_without_a_handler_writes_the_open_window_then_ends_by_the_signal(tmp_path):
    status, out, err = _interrupted(
        tmp_path, _run(tmp_path), lambda p: p.send_signal(signal.SIGTERM)
    )
    assert status == -signal.SIGTERM, err
    assert [p.steps for p in _windows(tmp_path)] == [(2, 5), (6, 8)]
    assert "killed by signal 15" in err


@pytest.mark.parametrize("loader", ["fork", "spawn"])
def test_dataloader_workers_are_not_profiled(tmp_path, loader):
    done = deepcontext_run(
        tmp_path, "--steps", "2:3", str(SCRIPTS / "plain_torch.py"), "--loader", loader
    )
    assert done.returncode == 0, done.stderr
    assert "1 process profiled" in done.stderr
    [profile] = run_profiles(tmp_path)
    assert profile.rank == 0 and len(profile.step_times_ns) == 3
    assert profile.tree.find("dataloader") is not None


def test_torchrun_profiles_each_worker_not_the_agent(tmp_path):
    done = deepcontext_run(
        tmp_path,
        "--steps",
        "2:3",
        "--",
        "torchrun",
        "--nproc-per-node",
        "2",
        str(SCRIPTS / "ddp_script.py"),
        env={**VENV_PATH, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert "rank 0 of 2 done" in done.stdout and "rank 1 of 2 done" in done.stdout
    assert "2 processes profiled" in done.stderr
    files = find_profiles(tmp_path / "out")
    assert sorted(f.rank for f in files) == [0, 1] and {f.steps for f in files} == {(2, 5)}
    assert len({f.run for f in files}) == 1  # both ranks in the one run of this invocation
    assert "step time per rank" in done.stderr  # the report compares them


def test_steps_found_after_the_time_fallback_began_take_over(tmp_path):
    """A model that loads for longer than --time-fallback: the time range's window
    is written as it stands when the first update comes, then the steps are profiled."""
    # a window that would outlast the script: the steps cut it short
    done = deepcontext_run(
        tmp_path,
        "--steps",
        "2:3",
        "--time-fallback",
        "1",
        "--time-window",
        "60",
        str(SCRIPTS / "plain_torch.py"),
        "--load-s",
        "3",
    )
    assert done.returncode == 0, done.stderr
    loading, steps = sorted(run_profiles(tmp_path), key=lambda p: p.steps)
    assert loading.step_source == "a time range: no step boundary in the first 1 s"
    # cut short by the first update: its one "step" is the loading, from 1 s in until the steps were found
    assert (
        loading.steps == (0, 1)
        and len(loading.step_times_ns) == 1
        and 0.5e9 < loading.step_times_ns[0] < 20e9
    )
    load_line = line_of(SCRIPTS / "plain_torch.py", "loading = torch.tanh(loading @ loading)")
    # the loading was recorded
    assert loading.tree.find_all(lambda f: f.kind == "python" and f.line == load_line)
    assert (
        steps.steps == (2, 5) and len(steps.step_times_ns) == 3 and "SGD.step" in steps.step_source
    )


def test_accelerate_launch_profiles_the_script_not_the_launcher(tmp_path):
    pytest.importorskip("accelerate")
    done = deepcontext_run(
        tmp_path,
        "--steps",
        "2:3",
        "--no-report",
        "--",
        "accelerate",
        "launch",
        "--cpu",
        "--num_processes",
        "1",
        str(SCRIPTS / "plain_torch.py"),
        env=VENV_PATH,
    )
    assert done.returncode == 0, done.stderr
    assert "1 process profiled" in done.stderr
    [log] = (tmp_path / "out").glob("*/.logs/*.log")
    # the worker, started by the launcher
    assert log.read_text().splitlines()[0].endswith("plain_torch.py")
    assert [p.steps for p in run_profiles(tmp_path)] == [(2, 5)]


def test_the_environments_own_sitecustomize_still_runs(tmp_path):
    own = tmp_path / "site"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import os\nos.environ['OWN_SITECUSTOMIZE'] = 'ran'\n")
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import os, sys\nprint(os.environ.get('OWN_SITECUSTOMIZE'), 'site' in sys.modules)\n"
        "print(any('launch/boot' in p for p in sys.path))\n"
    )
    done = deepcontext_run(tmp_path, "--no-report", str(probe), env={"PYTHONPATH": str(own)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["ran True", "False"]  # and our directory is off sys.path
    assert "1 process profiled" in done.stderr


def test_a_time_range_cut_short_by_the_end_of_the_process_is_its_one_step(tmp_path):
    began = time.monotonic_ns()
    done = deepcontext_run(
        tmp_path, "--time-fallback", "0.5", "--time-window", "600", str(SCRIPTS / "no_steps.py")
    )
    lived = time.monotonic_ns() - began
    assert done.returncode == 0, done.stderr
    [profile] = run_profiles(tmp_path)
    assert profile.step_source == "a time range: no step boundary in the first 0.5 s"
    # the script works for 3.5 s after its imports: the range opens 0.5 s after
    # the profiler does and ends with the process, so it is longer than
    # most of the work and shorter than the whole process lived
    assert profile.steps == (0, 1) and len(profile.step_times_ns) == 1
    assert 2.0e9 < profile.step_times_ns[0] < lived


def test_no_step_boundary_falls_back_to_a_time_range(tmp_path):
    done = deepcontext_run(
        tmp_path, "--time-fallback", "1", "--time-window", "1", str(SCRIPTS / "no_steps.py")
    )
    assert done.returncode == 0, done.stderr
    [profile] = run_profiles(tmp_path)
    assert profile.step_source == "a time range: no step boundary in the first 1 s"
    assert "steps: a time range" in done.stderr
    matmul = [
        n
        for n in range(1, len(profile.tree))
        if profile.tree.node_frame(n).name in ("aten::matmul", "aten::mm")
        and any("no_steps.py" in l and "crunch" in l for l in _labels(profile.tree, n))
    ]
    assert matmul, "the script's own line runs the matmul"
