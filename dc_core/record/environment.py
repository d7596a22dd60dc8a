"""Who and where this process is: rank, host, versions."""

from __future__ import annotations

import os
import platform
import socket
import sys


def detect_rank() -> int:
    """Global rank from the launcher's environment (``RANK``, then ``LOCAL_RANK``), else 0."""
    for name in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


def detect_host() -> str:
    return socket.gethostname() or "localhost"


def environment(framework: str, mode: str) -> dict[str, str]:
    """Versions and platform facts recorded in every profile."""
    from .. import __version__

    return {
        "deepcontext": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": str(os.cpu_count() or 0),
        "framework": framework,
        "mode": mode,
        "argv": " ".join(sys.argv[:8])[:512],
        "pid": str(os.getpid()),
    }
