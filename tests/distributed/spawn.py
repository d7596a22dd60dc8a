"""Start a test script's ranks: ``spawn(worker, ranks, *args)`` runs
``worker(rank, ranks, *args, init)`` in ``ranks`` fresh processes that meet at
``init``, a file store of their own (gloo)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any

import torch.multiprocessing as mp


def spawn(worker: Callable[..., None], ranks: int, *args: Any) -> None:
    fd, store = tempfile.mkstemp(prefix="dc-ranks-store-")
    os.close(fd)
    os.unlink(store)  # the first rank makes it
    mp.start_processes(
        worker, args=(ranks, *args, f"file://{store}"), nprocs=ranks, start_method="spawn"
    )
