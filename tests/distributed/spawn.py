"""Start a test script's ranks: ``spawn(worker, ranks, *args)`` runs
``worker(rank, ranks, *args, init)`` in ``ranks`` fresh processes that meet at
``init``, a file store of their own (gloo); ``launch(cwd, *command)`` runs a
launcher (``torchrun``, ``deepcontext run -- torchrun``) that starts them;
``profiled(script, root, ranks, *args)`` runs a script that spawns its ranks
and reads back the profile each wrote."""

from __future__ import annotations

import faulthandler
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.multiprocessing as mp


def spawn(worker: Callable[..., None], ranks: int, *args: Any) -> None:
    """Runs ``worker(rank, ranks, *args, init)`` in ``ranks`` processes; one
    that dies of a signal (an abort in C++) prints its threads' Python stacks
    to the stderr the test shows."""
    fd, store = tempfile.mkstemp(prefix="dc-ranks-store-")
    os.close(fd)
    os.unlink(store)  # the first rank makes it
    try:
        mp.start_processes(
            _rank,
            args=(worker, ranks, *args, f"file://{store}"),
            nprocs=ranks,
            start_method="spawn",
        )
    finally:
        Path(store).unlink(missing_ok=True)  # gloo leaves it behind


def _rank(rank: int, worker: Callable[..., None], *args: Any) -> None:
    faulthandler.enable(all_threads=True)
    worker(rank, *args)


def launch(cwd: Path, *command: str, **env: str) -> subprocess.CompletedProcess:
    """``command`` in ``cwd`` (a launcher: ``torchrun``, ``deepcontext run``),
    with this interpreter's scripts (torchrun) on the PATH, one thread per
    rank, ``env`` added and no DeepContext config from outside; it must succeed."""
    merged = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1", **env}
    merged["PATH"] = str(Path(sys.executable).parent) + os.pathsep + merged.get("PATH", "")
    merged.pop("DEEPCONTEXT_CONFIG", None)
    done = subprocess.run(command, cwd=cwd, env=merged, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def profiled(script: Path, root: Path, ranks: int, *args: str, windows: int = 1) -> list:
    """Run ``script root *args`` (it spawns ``ranks`` ranks, each profiling
    ``windows`` windows into ``root``); it must succeed and every rank write
    readable profiles. The profiles, by rank (and steps)."""
    from dc_core.store.logdir import load_profiles

    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    env.pop("DEEPCONTEXT_CONFIG", None)
    done = subprocess.run(
        [sys.executable, str(script), str(root), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    profiles, errors = load_profiles(root)
    assert errors == [] and sorted(p.rank for p in profiles) == sorted(
        list(range(ranks)) * windows
    ), [(p.rank, p.steps) for p in profiles]
    return sorted(profiles, key=lambda p: (p.rank, p.steps))


def issued(tree: Any, test: Callable[..., bool] = lambda frame: True) -> list[int]:
    """``tree.find_all(test)`` less the nodes in the ``other`` phase: there a
    backend's thread records the work it does for a collective (gloo copying
    a gathered tensor into place) under a mirror of the collective's context,
    which is not where the collective was issued."""
    from dc_core.model.comm import BESIDE

    return [n for n in tree.find_all(test) if n and tree.path_frames(n)[0].name != BESIDE]
