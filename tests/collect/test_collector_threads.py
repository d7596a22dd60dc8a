"""The collector contract, continued: sampler, monitor, fork and reset, run
against both implementations (see ``test_collector.py``)."""

from __future__ import annotations

import os
import threading
import time

import pytest

from dc_core.collect import reference
from tests.collect.test_collector import Frame, Snap, spin

# --- CPU sampler (what it bills and where: test_sampler.py) -------------------


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_has_no_sampler(collector):
    c = collector
    c.start_sampler(100)
    pid = os.fork()
    if pid == 0:  # the child: report through the exit status only
        os._exit(0 if not c.sampler_running() else 1)
    _, status = os.waitpid(pid, 0)
    assert c.sampler_running()
    c.stop_sampler()
    assert os.waitstatus_to_exitcode(status) == 0


# --- system monitor -----------------------------------------------------------


def wait_for_samples(c, n: int, timeout_s: float = 5.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while len(c.monitor_samples()["t_ns"]) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    return c.monitor_samples()


def test_monitor_samples_sane_values_in_aligned_columns(collector):
    c = collector
    c.start_monitor(20)
    spin(0.05)
    m = wait_for_samples(c, 2)
    c.stop_monitor()
    n = len(m["t_ns"])
    assert n >= 2
    assert set(m) == {
        "t_ns",
        "cpu_percent",
        "rss_bytes",
        "mem_used_percent",
        "disk_read_bytes",
        "disk_write_bytes",
        "net_rx_bytes",
        "net_tx_bytes",
        "gpu_util_percent",
        "gpu_mem_bytes",
    }
    assert all(len(column) == n for column in m.values())
    assert all(t0 < t1 for t0, t1 in zip(m["t_ns"], m["t_ns"][1:]))
    assert m["t_ns"][-1] <= reference.now_ns()
    for cores in m["cpu_percent"]:
        assert len(cores) == os.cpu_count() and all(0.0 <= p <= 100.0 for p in cores)
    assert all(rss > 0 for rss in m["rss_bytes"])
    assert all(0.0 < p <= 100.0 for p in m["mem_used_percent"])
    for column in ("disk_read_bytes", "disk_write_bytes", "net_rx_bytes", "net_tx_bytes"):
        assert all(0 <= v0 <= v1 for v0, v1 in zip(m[column], m[column][1:])), column
    for util, mem in zip(m["gpu_util_percent"], m["gpu_mem_bytes"]):
        assert len(util) == len(mem) and all(0 <= u <= 100 for u in util)
    assert len(c.monitor_samples()["t_ns"]) >= n  # kept after stop


def test_monitor_keeps_the_oldest_samples_and_counts_drops(make_collector):
    c = make_collector(max_samples=2)
    c.start_monitor(5)
    deadline = time.monotonic() + 5
    while Snap(c).raw["drops"]["monitor"] < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    c.stop_monitor()
    t = c.monitor_samples()["t_ns"]
    assert len(t) == 2 and Snap(c).raw["drops"]["monitor"] >= 2
    assert t[1] - t[0] < 1_000_000_000  # the first two, not a late pair


# --- reset -------------------------------------------------------------------


def test_reset_drops_nodes_scopes_and_samples_but_keeps_identities(collector):
    c = collector
    op = c.intern(reference.KIND_OPERATOR, "aten::mm", "f.py", 1)
    flops = c.metric("flops", "1")
    c.add(c.enter([op]), flops, 3)
    c.start_sampler(100)
    c.start_monitor(10)
    wait_for_samples(c, 1)
    strings_before = Snap(c).raw["strings"]
    c.reset()
    assert not c.sampler_running()
    assert (c.node_count(), c.depth(), c.top(), c.exit()) == (1, 0, 0, -1)
    assert c.monitor_samples()["t_ns"] == []
    s = Snap(c)
    assert s.raw["drops"] == {"nodes": 0, "samples": 0, "monitor": 0}
    assert all(list(v) == [0] for v in s.raw["metrics"].values())
    assert s.raw["strings"][: len(strings_before)] == strings_before
    assert s.frame(op) == Frame(reference.KIND_OPERATOR, "aten::mm", "f.py", 1, "", 0)
    assert c.intern(reference.KIND_OPERATOR, "aten::mm", "f.py", 1) == op
    assert c.metric("flops", "1") == flops
    with pytest.raises(ValueError):
        c.metric("flops", "bytes")
    time.sleep(0.05)
    assert c.monitor_samples()["t_ns"] == []  # the monitor is stopped, not only emptied


def test_reset_empties_other_threads_scopes(collector):
    c = collector
    entered, resumed, seen = threading.Event(), threading.Event(), {}

    def worker():
        c.enter([c.intern(reference.KIND_PHASE, "dataloader")])
        entered.set()
        resumed.wait()
        seen["after"] = (c.depth(), c.exit())

    t = threading.Thread(target=worker)
    t.start()
    entered.wait()
    c.reset()
    resumed.set()
    t.join()
    assert seen["after"] == (0, -1)


def test_monitor_reads_at_start_and_at_stop_of_a_short_window(collector):
    collector.start_monitor(10_000)
    time.sleep(0.02)
    collector.stop_monitor()
    t = collector.monitor_samples()["t_ns"]
    assert len(t) == 2 and t[1] - t[0] >= 15_000_000
