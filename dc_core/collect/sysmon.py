"""System-monitor readings from ``/proc``: one sample = one row of the monitor columns.

Used by the reference collector's monitor thread and reusable by the session
(e.g. to record one sample at window boundaries). Linux only; on other systems,
or where a ``/proc`` file is unreadable, the affected values read as zero so a
monitor never fails because of one missing counter. GPU columns are always
empty here: NVML is the native collector's job.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from dc_core.model.kinds import MONITOR_COLUMNS

#: Column names of ``Collector.monitor_samples()``, in contract order.
COLUMNS = MONITOR_COLUMNS

_PROC = Path("/proc")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def run_queue_wait_ns() -> int:
    """ns the calling thread has waited, runnable, for a CPU (the second field
    of ``/proc/thread-self/schedstat``): time the host gave to other work.
    -1 where the kernel does not say."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            return int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return -1


#: The OS name of the native collector's own threads (``native/periodic.h``).
OWN_THREAD_NAME = b"deepcontext"


def workers_wait_ns() -> int:
    """ns the process's native worker threads (intra-op pools: OpenMP,
    XLA's) have waited, runnable, for a CPU (their ``schedstat``), summed; -1
    where the kernel does not say. A parallel operator waits for its slowest
    worker, so a worker's wait for a CPU is time the operator shows. Python
    threads (the step's own, the profiler's and the user's) and the native
    collector's threads are left out: no operator waits for them."""
    python = {t.native_id for t in threading.enumerate()}
    total = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return -1
    for task in tasks:
        if not task.isdigit() or int(task) in python:
            continue
        try:
            with open(f"/proc/self/task/{task}/comm", "rb") as f:
                if f.read().strip() == OWN_THREAD_NAME:
                    continue
            with open(f"/proc/self/task/{task}/schedstat", "rb") as f:
                total += int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue  # the thread ended meanwhile
    return total


#: The OS name PyTorch's DataLoader gives each worker process (``_worker_loop``).
LOADER_WORKER_NAME = b"pt_data_worker"


def loader_workers_times(proc: Path = _PROC) -> dict[int, tuple[int, int]] | None:
    """Per data loader worker process descended from this one (a process
    named `LOADER_WORKER_NAME`), the ns its threads have run on a CPU and
    the ns they have waited, runnable, for one, each summed. A worker that
    waits for a CPU delivers its batch late, and the step waiting for that
    batch shows it as data loading; the CPU it ran says how late it would be
    with a core to itself. Other child processes (compile workers, tools)
    are left out. None where ``/proc`` cannot be listed."""
    try:
        entries = [e for e in os.listdir(proc) if e.isdigit()]
    except OSError:
        return None
    parents: dict[int, int] = {}
    workers = set()
    for entry in entries:
        try:
            with open(f"{proc}/{entry}/stat", "rb") as f:
                # "pid (name) state ppid ...": the name may hold anything, ")" too
                head, _, rest = f.read().rpartition(b")")
                parents[int(entry)] = int(rest.split()[1])
        except (OSError, IndexError, ValueError):
            continue  # ended meanwhile
        if head.partition(b"(")[2] == LOADER_WORKER_NAME:
            workers.add(int(entry))
    descended, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - descended
        descended |= frontier
    return {
        pid: times
        for pid in descended & workers
        if (times := _process_times(f"{proc}/{pid}")) is not None
    }


def _process_times(process: str) -> tuple[int, int] | None:
    """(ns the process's threads have run on a CPU, ns they have waited,
    runnable, for one); None: ended or unknown."""
    try:
        tasks = os.listdir(f"{process}/task")
    except OSError:
        return None
    ran = waited = 0
    for task in tasks:
        try:
            with open(f"{process}/task/{task}/schedstat", "rb") as f:
                on_cpu, runnable = f.read().split()[:2]
            ran, waited = ran + int(on_cpu), waited + int(runnable)
        except (OSError, ValueError):
            continue  # the thread ended meanwhile
    return ran, waited


def read_cpu_times(proc: Path = _PROC) -> list[tuple[int, int]]:
    """Per-core ``(busy, total)`` jiffies from ``/proc/stat``, in core order."""
    cores = []
    for line in _read(proc / "stat").splitlines():
        name, _, rest = line.partition(" ")
        if not (name.startswith("cpu") and name[3:].isdigit()):
            continue
        # user nice system idle iowait irq softirq steal; guest time is already
        # included in user/nice, so it is not added again.
        fields = [int(v) for v in rest.split()[:8]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        total = sum(fields)
        cores.append((total - idle, total))
    return cores


def cpu_percent(before: list[tuple[int, int]], after: list[tuple[int, int]]) -> list[float]:
    """Per-core utilisation (0–100 %) between two ``read_cpu_times`` readings."""
    out = []
    for (busy0, total0), (busy1, total1) in zip(before, after):
        d_total = total1 - total0
        d_busy = busy1 - busy0
        out.append(min(100.0, max(0.0, 100.0 * d_busy / d_total)) if d_total > 0 else 0.0)
    return out


def rss_bytes(proc: Path = _PROC) -> int:
    """Resident set size of this process."""
    fields = _read(proc / "self" / "statm").split()
    return int(fields[1]) * os.sysconf("SC_PAGE_SIZE") if len(fields) > 1 else 0


def mem_used_percent(proc: Path = _PROC) -> float:
    """System memory in use (total − available) as a percentage of total."""
    info = {}
    for line in _read(proc / "meminfo").splitlines():
        key, _, value = line.partition(":")
        parts = value.split()
        if parts:
            info[key] = int(parts[0])
    total = info.get("MemTotal", 0)
    if total <= 0:
        return 0.0
    available = info.get("MemAvailable", info.get("MemFree", total))
    return 100.0 * (total - available) / total


def disk_bytes(proc: Path = _PROC) -> tuple[int, int]:
    """Cumulative ``(read_bytes, write_bytes)`` this process caused at the block layer."""
    values = {}
    for line in _read(proc / "self" / "io").splitlines():
        key, _, value = line.partition(":")
        if value.strip().isdigit():
            values[key] = int(value)
    return values.get("read_bytes", 0), values.get("write_bytes", 0)


def net_bytes(proc: Path = _PROC) -> tuple[int, int]:
    """Cumulative ``(rx_bytes, tx_bytes)`` over all interfaces except loopback."""
    rx = tx = 0
    for line in _read(proc / "net" / "dev").splitlines()[2:]:
        iface, _, counters = line.partition(":")
        fields = counters.split()
        if iface.strip() == "lo" or len(fields) < 9:
            continue
        rx += int(fields[0])
        tx += int(fields[8])
    return rx, tx


class ProcReader:
    """Takes monitor samples; CPU % is measured since the previous sample.

    The first ``sample()`` measures since construction, so construct the reader
    when monitoring starts.
    """

    def __init__(self, proc: Path = _PROC) -> None:
        self._proc = proc
        self._cpu = read_cpu_times(proc)

    def sample(self) -> dict:
        """One row: a dict with every name in ``COLUMNS``."""
        cpu = read_cpu_times(self._proc)
        percent = cpu_percent(self._cpu, cpu)
        self._cpu = cpu
        read, write = disk_bytes(self._proc)
        rx, tx = net_bytes(self._proc)
        return {
            "t_ns": time.monotonic_ns(),
            "cpu_percent": percent,
            "rss_bytes": rss_bytes(self._proc),
            "mem_used_percent": mem_used_percent(self._proc),
            "disk_read_bytes": read,
            "disk_write_bytes": write,
            "net_rx_bytes": rx,
            "net_tx_bytes": tx,
            "gpu_util_percent": [],
            "gpu_mem_bytes": [],
        }
