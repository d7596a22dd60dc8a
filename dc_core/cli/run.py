"""``deepcontext run``: profile a command that knows nothing of DeepContext.

    deepcontext run [OPTIONS] train.py [ARGS…]
    deepcontext run [OPTIONS] -m package.module [ARGS…]
    deepcontext run [OPTIONS] -- torchrun --nproc-per-node 2 train.py [ARGS…]

The command runs as it would alone (its ``__main__``, ``sys.argv``, output,
exceptions and exit status are its own), with a private ``sitecustomize``
first on ``PYTHONPATH`` that hooks each process chosen for profiling (see
`dc_core.launch`). When it ends, however it ends, the run's report prints,
then the command that opens the tab.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..launch.settings import CLAIMED_ENV, RUN_ENV, RunSettings
from ..record.config import ENV_VAR, MODES, ProfilerConfig, env_overrides, merge, read_file

BOOT_DIR = str(Path(__file__).resolve().parents[1] / "launch" / "boot")
#: Signals a job scheduler or a user sends to end a job: passed on to the command.
FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "run",
        help="profile a training script or command, unchanged",
        usage="deepcontext run [OPTIONS] (script.py | -m module | -- COMMAND) [ARGS ...]",
        description="Run a Python script, a module or any command (torchrun, a shell script) with DeepContext "
        "in every process it profiles: the command's own Python process and each torchrun worker. "
        "Lightning and Hugging Face trainers get the callback; a plain PyTorch loop's steps end at "
        "each optimizer update; a JAX loop's at each call of its jitted train step. When the command "
        "ends, the report prints. Options override DEEPCONTEXT_CONFIG and --config.",
    )
    p.add_argument(
        "--steps",
        metavar="START:COUNT[:EVERY[:REPEAT]]",
        help="the windows: COUNT steps from START, again every EVERY steps, REPEAT times (0: forever)",
    )
    p.add_argument(
        "--mode", choices=MODES, help="lightweight (Python and framework context) or comprehensive"
    )
    p.add_argument(
        "--memory",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="collect memory by context (bytes allocated, freed and live at each window's peak, "
        "by category; PyTorch's native capture path only), or not; default: the config's",
    )
    p.add_argument(
        "--logdir",
        default="deepcontext",
        help="where runs go (default ./deepcontext); each invocation makes its own run directory",
    )
    p.add_argument("--config", metavar="FILE", help="a JSON or YAML file of config fields")
    p.add_argument(
        "--step-function",
        metavar="MODULE:QUALNAME",
        help="JAX: the function one call of which is one step (default: found from the jitted "
        "function the script calls repeatedly from one line)",
    )
    p.add_argument(
        "--time-fallback",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="profile by time when no step boundary is found in this many seconds (default 60; "
        "0: never)",
    )
    p.add_argument(
        "--time-window",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="length of that time range (default 10)",
    )
    p.add_argument("--no-report", action="store_true", help="do not print the report at the end")
    p.add_argument(
        "--view", action="store_true", help="open the DeepContext tab in TensorBoard at the end"
    )
    p.add_argument(
        "-m",
        dest="module",
        nargs=argparse.REMAINDER,
        metavar="MODULE",
        help="run a module as `python -m` does",
    )
    p.add_argument(
        "command", nargs=argparse.REMAINDER, help="script.py [ARGS], or -- COMMAND [ARGS]"
    )
    p.set_defaults(run=run)


def parse_steps(text: str) -> dict[str, int]:
    """``"5:3"`` → ``{"start": 5, "count": 3}``; ``"2:3:4:2"`` adds every and repeat.

    Raises:
        ValueError: naming ``--steps`` and the form it takes.
    """
    parts = text.split(":")
    if not 2 <= len(parts) <= 4 or not all(p.strip().isdigit() for p in parts):
        raise ValueError(
            f"--steps must be START:COUNT[:EVERY[:REPEAT]] with whole numbers, got {text!r}"
        )
    return dict(zip(("start", "count", "every", "repeat"), map(int, parts)))


def command_line(args: argparse.Namespace) -> list[str]:
    """The command to start, in the interpreter running this one for a script or module.

    Raises:
        ValueError: no command, or a script that is not a file.
    """
    if args.module:
        return [sys.executable, "-m", *args.module]
    command = list(args.command or [])
    if command[:1] == ["--"]:
        return _startable(command[1:] or _missing())
    if not command:
        _missing()
    if not command[0].endswith(".py") and not Path(command[0]).is_file():
        raise ValueError(
            f"{command[0]!r} is not a Python script; to run another command put it after --, "
            f"e.g. deepcontext run -- {shlex.join(command)}"
        )
    if not Path(command[0]).is_file():
        raise ValueError(f"script {command[0]!r} does not exist")
    return [sys.executable, *command]


def _startable(command: list[str]) -> list[str]:
    """``command``, unless its program is a file here that cannot start as
    written: a script without its exec bit, or a bare name, which is looked up
    on PATH and not here.

    Raises:
        ValueError: naming the file and how to run it.
    """
    program = command[0]
    here = Path(program)
    if not here.is_file() or (os.sep not in program and shutil.which(program) is not None):
        return command  # a command on PATH, or one that is nowhere: the shell's error says so
    if os.sep in program and os.access(program, os.X_OK):
        return command
    why = "is not executable" if os.sep in program else "is a file here, not a command on PATH"
    if program.endswith(".py"):
        how = f"deepcontext run {shlex.join(command)}"
    elif os.sep in program:
        how = f"chmod +x {shlex.quote(program)}"
    else:
        how = f"chmod +x {shlex.quote(program)}, then deepcontext run -- {shlex.join(['./' + program, *command[1:]])}"
    raise ValueError(f"{program!r} {why}; to profile it: {how}")


def _writable_logdir(logdir: str) -> None:
    """Refuse a ``--logdir`` that is, or lies under, something other than a directory.

    Raises:
        ValueError: naming the path in the way.
    """
    for path in (Path(logdir), *Path(logdir).parents):
        if path.exists():
            if not path.is_dir():
                where = "" if path == Path(logdir) else f" lies under {str(path)!r}, which"
                raise ValueError(f"--logdir {logdir!r}{where} is a file, not a directory")
            return


def _missing() -> list[str]:
    raise ValueError("nothing to run: give script.py, -m module, or -- COMMAND")


def config_fields(args: argparse.Namespace, run_name: str) -> dict[str, Any]:
    """The run's config fields: DEEPCONTEXT_CONFIG, then --config, then the options;
    checked as a whole.

    Raises:
        ValueError: a bad field, naming it (and the file or variable it came from).
    """
    fields: dict[str, Any] = {}
    for layer in (env_overrides(), read_file(args.config) if args.config else {}):
        fields = _layered(fields, layer)
    options: dict[str, Any] = {"logdir": os.path.abspath(args.logdir), "run": run_name}
    if args.steps:
        options["steps"] = parse_steps(args.steps)
    if args.mode:
        options["mode"] = args.mode
    if args.memory is not None:
        options["memory"] = args.memory
    fields = _layered(fields, options)
    merge(ProfilerConfig(), fields)  # raises naming a bad field
    return fields


def _layered(base: dict[str, Any], layer: dict[str, Any]) -> dict[str, Any]:
    """``layer`` over ``base``; step and time ranges merge field by field."""
    out = dict(base)
    for key, value in layer.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            value = {**out[key], **value}
        out[key] = value
    return out


def run_name(command: list[str], now: datetime.datetime | None = None) -> str:
    """``2026-12-01_09-30-12_train``: when, and the script or command that ran."""
    scripts = [a for a in command[1:] if a.endswith(".py")]
    if "-m" in command[:-1]:
        stem = command[command.index("-m") + 1]
    else:
        stem = Path(scripts[0] if scripts else command[0]).stem
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip(".-")[:40] or "run"
    return f"{(now or datetime.datetime.now()).strftime('%Y-%m-%d_%H-%M-%S')}_{stem}"


def child_environment(
    settings: RunSettings, fields: dict[str, Any], base: dict[str, str] | None = None
) -> dict[str, str]:
    """The command's environment: the boot directory first on ``PYTHONPATH``,
    the run's settings and config fields."""
    env = dict(os.environ if base is None else base)
    env.pop(CLAIMED_ENV, None)  # a run inside a profiled process starts its own choice
    env["PYTHONPATH"] = os.pathsep.join(
        [BOOT_DIR, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    )
    env[RUN_ENV] = settings.to_env()
    env[ENV_VAR] = json.dumps(fields)
    return env


def run(args: argparse.Namespace) -> int:
    try:
        command = command_line(args)
        _writable_logdir(os.path.abspath(args.logdir))
        name = _unique(args.logdir, run_name(command))
        fields = config_fields(args, name)
        if args.step_function is not None and ":" not in args.step_function:
            raise ValueError(f"--step-function must be MODULE:QUALNAME, got {args.step_function!r}")
        if not 0 <= args.time_fallback < 1e9:
            raise ValueError("--time-fallback must be >= 0 seconds")
        if not 1e-3 <= args.time_window < 1e9:
            raise ValueError("--time-window must be at least 0.001 seconds")
    except ValueError as exc:
        from .common import fail  # rich and the readers, loaded only to say what is wrong

        return fail(str(exc))
    settings = RunSettings(
        logdir=fields["logdir"],
        run=name,
        step_function=args.step_function,
        fallback_after_s=args.time_fallback,
        time_window_s=args.time_window,
    )
    try:
        status = _run_command(command, child_environment(settings, fields))
    except OSError as exc:  # nothing ran: there is no run to sum up
        print(
            f"deepcontext run: cannot start {command[0]!r}: {exc.strerror or exc}", file=sys.stderr
        )
        return 127 if isinstance(exc, FileNotFoundError) else 126
    from .run_end import finish

    finish(settings, args, status)
    return _exit_like(status)


def _unique(logdir: str, name: str) -> str:
    """``name``, or ``name-2``… when an earlier invocation took it this second."""
    candidate, n = name, 1
    while (Path(logdir) / candidate).exists():
        n += 1
        candidate = f"{name}-{n}"
    return candidate


def _run_command(command: list[str], env: dict[str, str]) -> int:
    """Start the command and wait for it; returns its status (negative: killed by that signal).

    Ctrl-C reaches the command from the terminal as it always does (same
    process group); meanwhile this process waits. The signals a scheduler
    sends to end a job are passed on, and on Linux the command is sent
    SIGTERM if this process dies first (SIGKILL leaves it no time to pass
    anything on): the command ends as it would with its terminal, a torchrun
    agent taking its workers down. Raises OSError when it cannot start."""
    child = subprocess.Popen(command, env=env, preexec_fn=_dies_with(os.getpid()))
    previous = {}

    def forward(signum: int, frame: Any) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    for sig in FORWARDED:
        previous[sig] = signal.signal(sig, forward)
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, lambda signum, frame: None)
    try:
        return child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _dies_with(parent: int) -> Callable[[], None] | None:
    """What the command's process runs between fork and exec so that it gets
    SIGTERM when ``parent`` dies (Linux's parent-death signal), or None where
    there is none, or where this process runs threads (code between fork and
    exec is safe only in a single-threaded parent)."""
    if not sys.platform.startswith("linux") or threading.active_count() > 1:
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(
            None, use_errno=True
        ).prctl  # looked up before the fork, not in the child
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]

    def set_in_child() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # it died between the fork and the prctl
            os.kill(os.getpid(), signal.SIGTERM)

    return set_in_child


def _exit_like(status: int) -> int:
    """Exit as the command did: with its code, or killed by its signal."""
    if status >= 0:
        return status
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(-status, signal.SIG_DFL)
    os.kill(os.getpid(), -status)
    return 128 - status  # a signal that does not end the process
