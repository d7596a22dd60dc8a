"""The host readings of `dc_core.collect.sysmon` on a fake ``/proc``."""

from __future__ import annotations

import os

from dc_core.collect.sysmon import LOADER_WORKER_NAME, loader_workers_times


def _process(proc, pid: int, name: str, parent: int, waits: list[int] | None) -> None:
    """``/proc/<pid>`` with its name and parent, and one thread per wait,
    which ran ten times as long (no threads: a process that ended between
    the listing and the reading)."""
    (proc / str(pid)).mkdir()
    (proc / str(pid) / "stat").write_text(f"{pid} ({name}) S {parent} {pid} 0 0 -1\n")
    for i, wait in enumerate(waits or []):
        task = proc / str(pid) / "task" / str(pid + i)
        task.mkdir(parents=True)
        (task / "schedstat").write_text(f"{10 * wait} {wait} 7\n")


def test_only_the_data_loaders_workers_below_this_process_count(tmp_path):
    me, worker = os.getpid(), LOADER_WORKER_NAME.decode()
    _process(tmp_path, me, "python", 1, [1])
    _process(tmp_path, 1001, worker, me, [5000, 2000])  # a worker with a second thread
    _process(tmp_path, 1003, "python", me, [90_000])  # another child: a spinner, a compiler
    _process(tmp_path, 1004, worker, 1003, [300])  # a worker a forkserver child started
    _process(tmp_path, 1005, f"{worker}) S 1 (x", me, [40])  # a name that fakes the fields
    _process(tmp_path, 1006, worker, me, None)  # ended meanwhile
    _process(tmp_path, 2000, worker, 1, [800])  # another job's worker
    (tmp_path / "self").mkdir()  # not a process
    assert loader_workers_times(tmp_path) == {1001: (70_000, 7000), 1004: (3000, 300)}


def test_an_unreadable_proc_is_unknown_not_zero(tmp_path):
    assert loader_workers_times(tmp_path / "missing") is None
    assert loader_workers_times(tmp_path) == {}
