"""Which processes of a command ``deepcontext run`` profiles.

The command's own Python process and each torchrun worker (a process with
``RANK``/``LOCAL_RANK`` that no profiled ancestor started). Not the torchrun
agent, nor ``accelerate launch`` or ``deepspeed`` (they only launch), not ``multiprocessing`` children (DataLoader
workers, pools: spawned or forkserver children are recognised by their
command line, forked ones inherit a session that disables itself in a new
pid), and nothing a profiled process starts (compile workers, helpers): the
first profiled process marks the environment its children inherit.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

#: The run's settings (JSON), set by ``deepcontext run`` for every process of the command.
RUN_ENV = "DEEPCONTEXT_RUN"
#: Set by the first profiled process for its descendants: they are not profiled themselves.
CLAIMED_ENV = "DEEPCONTEXT_RUN_PROFILED"

# Launchers that only start the workers: torchrun, and those built like it.
_AGENT_MODULES = (
    "torch.distributed.run",
    "torch.distributed.launch",
    "accelerate.commands.launch",
    "accelerate.commands.accelerate_cli",
    "deepspeed.launcher.runner",
)
_AGENT_SCRIPTS = ("torchrun", "accelerate", "deepspeed")
_WORKER_MARKS = ("--multiprocessing-fork", "from multiprocessing.", "compile_worker")


def chosen(
    environ: Mapping[str, str] | None = None, argv: Sequence[str] | None = None
) -> str | None:
    """Why this process is not profiled, or None when it is.

    Args:
        environ: The process environment (default ``os.environ``).
        argv: The interpreter's own command line (default ``sys.orig_argv``).
    """
    environ = os.environ if environ is None else environ
    argv = list(getattr(sys, "orig_argv", sys.argv) if argv is None else argv)
    if not environ.get(RUN_ENV):
        return "not started by deepcontext run"
    if environ.get(CLAIMED_ENV):
        return f"a child of the profiled process {environ[CLAIMED_ENV]}"
    if any(mark in arg for arg in argv[1:] for mark in _WORKER_MARKS):
        return "a multiprocessing or compile worker"
    if _module(argv) in _AGENT_MODULES or (
        len(argv) > 1 and os.path.basename(argv[1]) in _AGENT_SCRIPTS
    ):
        return "a launcher like the torchrun agent (its workers are profiled)"
    return None


def _module(argv: Sequence[str]) -> str | None:
    """The module of ``python -m module``, if that is how the interpreter was started."""
    for index, arg in enumerate(argv[1:], 1):
        if arg == "-m" and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith("-m") and len(arg) > 2:
            return arg[2:]
        if not arg.startswith("-"):
            return None
    return None


def claim(environ: dict[str, str] | None = None) -> None:
    """Mark this process as the profiled one for every process it starts."""
    (os.environ if environ is None else environ)[CLAIMED_ENV] = str(os.getpid())
