"""The parts of ``deepcontext run`` that need no framework: which processes are
profiled, the options, the post-import hooks, the command's errors."""

from __future__ import annotations

import datetime
import subprocess
import sys
import types

import pytest

from dc_core.cli.run import child_environment, config_fields, parse_steps, run_name
from dc_core.launch.imports import AfterImport
from dc_core.launch.process import chosen
from dc_core.launch.settings import CLAIMED_ENV, RUN_ENV, RunSettings
from dc_core.store.logdir import find_profiles, read_profile

from .conftest import split_stderr

PY = "/usr/bin/python3"


@pytest.mark.parametrize(
    "argv, environ, why",
    [
        ([PY, "train.py"], {}, None),
        ([PY, "-m", "pkg.train"], {}, None),
        ([PY, "train.py"], {"RANK": "1", "LOCAL_RANK": "1"}, None),  # a torchrun worker
        ([PY, "/venv/bin/torchrun", "--nproc-per-node", "2", "train.py"], {}, "torchrun agent"),
        ([PY, "-m", "torch.distributed.run", "train.py"], {}, "torchrun agent"),
        ([PY, "/venv/bin/accelerate", "launch", "train.py"], {}, "torchrun agent"),
        ([PY, "-m", "accelerate.commands.launch", "train.py"], {}, "torchrun agent"),
        ([PY, "/venv/bin/deepspeed", "train.py"], {}, "torchrun agent"),
        (
            [
                PY,
                "-B",
                "-c",
                "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=6)",
                "--multiprocessing-fork",
            ],
            {"RANK": "0"},
            "multiprocessing",
        ),
        ([PY, "-c", "from multiprocessing.forkserver import main; main(1)"], {}, "multiprocessing"),
        (
            [PY, "-c", "from multiprocessing.resource_tracker import main;main(5)"],
            {},
            "multiprocessing",
        ),
        ([PY, "/venv/torch/_inductor/compile_worker/__main__.py"], {}, "compile worker"),
        ([PY, "train.py"], {CLAIMED_ENV: "41"}, "child of the profiled process 41"),
        ([PY, "train.py"], {RUN_ENV: ""}, "not started by deepcontext run"),
    ],
)
def test_which_processes_are_profiled(argv, environ, why):
    reason = chosen({RUN_ENV: "{}", **environ}, argv)
    assert (reason is None) if why is None else (why in reason)


def test_steps_option():
    assert parse_steps("5:3") == {"start": 5, "count": 3}
    assert parse_steps("2:3:4:2") == {"start": 2, "count": 3, "every": 4, "repeat": 2}
    for bad in ("5", "a:3", "1:2:3:4:5", "-1:3", ""):
        with pytest.raises(ValueError, match="--steps must be START:COUNT"):
            parse_steps(bad)


def test_run_name_says_when_and_what():
    now = datetime.datetime(2026, 12, 1, 9, 30, 12)
    assert run_name(["python", "scripts/train.py", "--x"], now) == "2026-12-01_09-30-12_train"
    assert run_name(["python", "-m", "pkg.fit"], now) == "2026-12-01_09-30-12_pkg.fit"
    assert (
        run_name(["torchrun", "--nproc-per-node", "2", "ddp.py"], now) == "2026-12-01_09-30-12_ddp"
    )
    assert run_name(["bash", "go.sh"], now) == "2026-12-01_09-30-12_bash"
    assert run_name(["python", "my run!.py"], now) == "2026-12-01_09-30-12_my-run"


def _args(**kw):
    base = dict(config=None, logdir="out", steps=None, mode=None, memory=None)
    return types.SimpleNamespace(**{**base, **kw})


def test_options_override_the_config_file_which_overrides_the_environment(tmp_path, monkeypatch):
    config = tmp_path / "dc.yaml"
    config.write_text("steps: {start: 7, count: 4}\nmode: comprehensive\ncpu_sampling_hz: 50\n")
    monkeypatch.setenv(
        "DEEPCONTEXT_CONFIG",
        '{"cpu_sampling_hz": 10, "system_interval_ms": 0, "steps": {"every": 20}}',
    )
    fields = config_fields(_args(config=str(config), steps="2:3"), "r1")
    assert fields["steps"] == {"start": 2, "count": 3, "every": 20}  # merged field by field
    assert (
        fields["mode"] == "comprehensive"
        and fields["cpu_sampling_hz"] == 50
        and fields["system_interval_ms"] == 0
    )
    assert fields["run"] == "r1" and fields["logdir"] == str((tmp_path.cwd() / "out").resolve())
    env = child_environment(
        RunSettings(logdir="/l", run="r1"), fields, {"PYTHONPATH": "/mine", CLAIMED_ENV: "3"}
    )
    assert env["PYTHONPATH"].endswith("launch/boot:/mine") and CLAIMED_ENV not in env
    assert RunSettings.from_env(env) == RunSettings(logdir="/l", run="r1")


def test_memory_options_reach_the_childs_config_over_the_file_and_the_environment(
    tmp_path, monkeypatch
):
    from dc_core.cli import build_parser
    from dc_core.record.config import ENV_VAR, resolve

    config = tmp_path / "dc.json"
    config.write_text('{"memory": true}')
    monkeypatch.setenv(ENV_VAR, '{"memory": false}')

    def fields(*options):
        args = build_parser("run").parse_args(["run", *options, "train.py"])
        return config_fields(args, "r1")

    assert fields()["memory"] is False  # the environment's, no option given
    assert fields("--config", str(config))["memory"] is True
    assert fields("--config", str(config), "--no-memory")["memory"] is False
    chosen = fields("--memory")
    assert chosen["memory"] is True
    # the child reads its config from the variable the run sets
    monkeypatch.setenv(ENV_VAR, child_environment(RunSettings("/l", "r1"), chosen, {})[ENV_VAR])
    assert resolve().collect_memory is True
    monkeypatch.delenv(ENV_VAR)
    assert "memory" not in fields()


def test_bad_fields_are_named(tmp_path):
    config = tmp_path / "dc.json"
    config.write_text('{"steps": {"count": 0}}')
    with pytest.raises(ValueError, match="steps.count"):
        config_fields(_args(config=str(config)), "r")
    config.write_text('{"mode": "fast"}')
    with pytest.raises(ValueError, match="mode must be one of"):
        config_fields(_args(config=str(config)), "r")
    with pytest.raises(ValueError, match=r"config file .*missing\.json.*cannot read"):
        config_fields(_args(config=str(tmp_path / "missing.json")), "r")
    with pytest.raises(ValueError, match=RUN_ENV):
        RunSettings.from_env({RUN_ENV: '{"logdir": 1}'})


@pytest.mark.parametrize(
    "args, message",
    [
        (["--steps", "x", "t.py"], "--steps must be START:COUNT"),
        (["nothere.py"], "script 'nothere.py' does not exist"),
        (["ls"], "to run another command put it after --"),
        ([], "nothing to run"),
        (["--step-function", "train_step", "t.py"], "--step-function must be MODULE:QUALNAME"),
        (["--logdir", "t.py", "t.py"], "--logdir '{tmp}/t.py' is a file, not a directory"),
        (
            ["--logdir", "t.py/runs", "t.py"],
            "--logdir '{tmp}/t.py/runs' lies under '{tmp}/t.py', which is a file",
        ),
        (
            ["--", "t.py", "a"],
            "'t.py' is a file here, not a command on PATH; to profile it: deepcontext run t.py a",
        ),
        (["--", "./t.py"], "'./t.py' is not executable; to profile it: deepcontext run ./t.py"),
    ],
)
def test_the_command_refuses_bad_input_before_running_anything(tmp_path, args, message):
    (tmp_path / "t.py").write_text("open('ran', 'w').close()\n")
    done = subprocess.run(
        [sys.executable, "-m", "dc_core", "run", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and message.format(tmp=tmp_path) in done.stderr, done.stderr
    assert not (tmp_path / "ran").exists() and not (tmp_path / "deepcontext").exists()


def test_a_missing_command_fails_as_a_shell_would(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "dc_core", "run", "--no-report", "--", "no-such-command-xyz"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 127 and "cannot start 'no-such-command-xyz'" in done.stderr
    # nothing ran
    assert "PYTHONPATH" not in done.stdout + done.stderr and "DeepContext ·" not in done.stdout


def test_after_import_runs_once_the_module_has_executed(tmp_path, monkeypatch):
    (tmp_path / "watched_pkg").mkdir()
    (tmp_path / "watched_pkg" / "__init__.py").write_text("VALUE = 1\n")
    (tmp_path / "watched_pkg" / "sub.py").write_text("VALUE = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    # a failing callback: logged, the import still works
    finder = AfterImport(
        {"watched_pkg.sub": lambda m: seen.append(m.VALUE), "watched_pkg": lambda m: 1 / 0}
    )
    finder.install()
    try:
        import watched_pkg.sub

        assert seen == [2] and watched_pkg.VALUE == 1
        assert watched_pkg.sub.__spec__.loader.__class__.__name__ == "SourceFileLoader"
        assert finder not in sys.meta_path  # gone once every callback ran
    finally:
        finder.remove()
        for name in ("watched_pkg.sub", "watched_pkg"):
            sys.modules.pop(name, None)


@pytest.mark.parametrize("form", ["script", "module"])
def test_the_program_runs_as_its_own_main_with_its_own_argv(tmp_path, form):
    (tmp_path / "probe.py").write_text(
        "import sys\nprint(__name__, sys.argv[1:], sys.argv[0].endswith('probe.py'))\n"
        "print('to stderr', file=sys.stderr)\nsys.exit(5)\n"
    )
    target = ["probe.py", "a", "--b"] if form == "script" else ["-m", "probe", "a", "--b"]
    done = subprocess.run(
        [sys.executable, "-m", "dc_core", "run", "--no-report", *target],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    alone = subprocess.run(
        [sys.executable, *target], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == alone.returncode == 5
    # byte for byte: the run says nothing there
    assert done.stdout == alone.stdout == "__main__ ['a', '--b'] True\n"
    own, said = split_stderr(done.stderr)
    assert own == alone.stderr == "to stderr\n"
    assert "the command exited with status 5 · 1 process profiled" in said


def test_a_process_that_ends_while_its_time_range_is_being_set_up_exits_as_it_would(tmp_path):
    # The script ends while the time-range thread is halfway through importing
    # the session module (held there by a finder of the script's own).
    (tmp_path / "short.py").write_text(
        "import sys, threading, time\n"
        "halfway = threading.Event()\n"
        "class Stall:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if threading.current_thread().name == 'deepcontext-time-range' and not halfway.is_set() \\\n"
        "                and 'dc_core.record.session' in sys.modules:\n"
        "            halfway.set()\n"
        "            time.sleep(3)\n"
        "sys.meta_path.insert(0, Stall())\n"
        "assert halfway.wait(120)\n"
        "print('half made:', not hasattr(sys.modules['dc_core.record.session'], 'active_sessions'))\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dc_core",
            "run",
            "--no-report",
            "--time-fallback",
            "0.2",
            "short.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0 and done.stdout == "half made: True\n", done.stdout + done.stderr
    assert split_stderr(done.stderr)[0] == "", done.stderr


def test_a_process_that_cannot_be_hooked_runs_unprofiled_with_one_warning(tmp_path):
    from dc_core.cli.run import BOOT_DIR

    (tmp_path / "probe.py").write_text("print('ran')\n")
    env = {**__import__("os").environ, "PYTHONPATH": BOOT_DIR, RUN_ENV: '{"not": "settings"}'}
    done = subprocess.run(
        [sys.executable, "probe.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout == "ran\n"
    assert (
        done.stderr.count("\n") == 1
        and "could not hook this process" in done.stderr
        and RUN_ENV in done.stderr
    )


# a 4 s script: a hang at its exit fails here, not after the suite's 600 s
@pytest.mark.timeout(300)
def test_view_opens_the_tab_on_the_logdir_when_the_run_ends(tmp_path, monkeypatch):
    import dc_core.cli.view as view
    from dc_core.cli import main

    opened = []
    monkeypatch.setattr(view, "run", lambda args: opened.append(args.logdir) or 0)
    monkeypatch.chdir(tmp_path)
    # busy until the time range has ended (its thread is gone), not for a fixed time: on a loaded
    # host, importing the profiler's loop beside this busy thread took most of 4 s
    (tmp_path / "busy.py").write_text(
        "import threading, time\nend = time.monotonic() + 120\n"
        "while time.monotonic() < end and any(t.name == 'deepcontext-time-range' for t in threading.enumerate()):\n"
        "    sum(range(1000))\n"
    )
    assert (
        main(
            [
                "run",
                "--view",
                "--no-report",
                "--time-fallback",
                "0.5",
                "--time-window",
                "0.5",
                "--logdir",
                "runs",
                "busy.py",
            ]
        )
        == 0
    )
    assert opened == [str(tmp_path / "runs")]
    [profile] = [read_profile(f) for f in find_profiles(tmp_path / "runs")]
    assert profile.framework == "python" and profile.step_source.startswith("a time range")
    assert 0.4e9 < profile.step_times_ns[0] < 4e9  # the one "step" is the time range
