"""The CPU sampler's contract (``start_sampler`` in ``dc_core/_native.pyi``), run
against both implementations: CPU time billed where each thread is (its
innermost open scope or operator), busy threads only, nothing outside scopes.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from dc_core.collect import reference
from tests.collect.test_collector import Snap, spin

HZ = 200


def in_scope(c, name: str, body, *args):
    """Run ``body(*args)`` inside a phase scope ``name``; returns its result."""
    c.enter([c.intern(reference.KIND_PHASE, name)], 0, False, 0)
    try:
        return body(*args)
    finally:
        c.exit()


def cpu_spin(seconds: float) -> float:
    """Spin for ``seconds``; returns the CPU seconds this thread ran meanwhile."""
    t0 = time.thread_time()
    spin(seconds)
    return time.thread_time() - t0


def samples_under(s: Snap, name: str) -> int:
    """Samples in the subtree(s) of the root's child named ``name``."""
    nodes = [
        n
        for n in range(1, len(s.raw["parent"]))
        if s.raw["parent"][n] == 0 and s.node_frame(n).name == name
    ]
    return sum(s.subtree_samples(n) for n in nodes)


@pytest.mark.parametrize("native", [False, True], ids=["python", "native"])
def test_busy_thread_is_billed_its_cpu_time_at_its_scope_a_waiting_thread_nothing(
    collector, native
):
    c = collector
    ready = threading.Barrier(3)
    go, release = threading.Event(), threading.Event()
    cpu = []

    def busy():
        def body():
            ready.wait()
            go.wait()
            cpu.append(cpu_spin(0.6))

        in_scope(c, "forward", body)

    def idle():  # e.g. TensorBoard's writer thread in Condition.wait
        def body():
            ready.wait()
            release.wait()

        in_scope(c, "dataloader", body)

    threads = [threading.Thread(target=busy), threading.Thread(target=idle)]
    for t in threads:
        t.start()
    ready.wait()
    c.start_sampler(HZ, native=native)
    time.sleep(0.05)  # the first ticks read every thread's CPU clock: the baseline
    go.set()
    threads[0].join()
    c.stop_sampler()
    release.set()
    threads[1].join()
    s = Snap(c)
    expected = cpu[0] * HZ  # one sample per period of CPU time
    assert 0.75 * expected - 2 <= samples_under(s, "forward") <= expected + 2, (
        samples_under(s, "forward"),
        expected,
    )
    assert samples_under(s, "dataloader") == 0
    if not native:  # no Python frames are read: the samples sit on the scope's node itself
        assert s.tree()[("forward",)]["samples"] == samples_under(s, "forward")


def test_no_sample_lands_outside_every_scope(collector):
    c = collector
    done = threading.Event()

    def unscoped():  # busy, but nothing open on this thread
        while not done.is_set():
            spin(0.01)

    t = threading.Thread(target=unscoped)
    t.start()
    c.start_sampler(HZ)
    try:
        spin(0.2)  # the main thread too, before and after its scope
        cpu = in_scope(c, "forward", cpu_spin, 0.4)
        spin(0.2)
    finally:
        c.stop_sampler()
        done.set()
        t.join()
    s = Snap(c)
    samples = s.raw["metrics"]["samples"]
    sampled = {s.path(n) for n in range(len(samples)) if samples[n]}
    assert sampled == {("forward",)}, sampled  # no root, no `<module>`, no `spin` frame
    assert samples[0] == 0 and 0.75 * cpu * HZ - 2 <= sum(samples) <= cpu * HZ + 2, (
        sum(samples),
        cpu * HZ,
    )


def test_cpu_time_run_while_no_sampler_runs_is_billed_to_nobody(collector):
    c = collector
    ready, go, spun, done = (threading.Event() for _ in range(4))

    def worker():
        def body():
            ready.set()
            go.wait()
            spin(0.3)  # between two sampler runs
            spun.set()
            done.wait()

        in_scope(c, "forward", body)

    t = threading.Thread(target=worker)
    t.start()
    ready.wait()
    c.start_sampler(HZ)
    time.sleep(0.05)
    c.stop_sampler()
    go.set()
    spun.wait()
    c.start_sampler(HZ)  # the worker is idle from here on
    time.sleep(0.1)
    c.stop_sampler()
    done.set()
    t.join()
    assert sum(Snap(c).raw["metrics"]["samples"]) == 0


def test_a_thread_busy_in_short_bursts_is_billed_its_share(collector):
    """Bursts shorter than a period add up across ticks instead of being lost
    (or each billed a whole sample)."""
    c = collector
    cpu = []

    def bursts():
        t0 = time.thread_time()
        end = time.monotonic() + 0.8
        while time.monotonic() < end:
            spin(0.002)
            time.sleep(0.004)
        cpu.append(time.thread_time() - t0)

    c.start_sampler(HZ)
    try:
        t = threading.Thread(target=in_scope, args=(c, "dataloader", bursts))
        t.start()
        t.join()
    finally:
        c.stop_sampler()
    expected = cpu[0] * HZ  # ~1/3 of 160 ticks
    got = samples_under(Snap(c), "dataloader")
    assert 0.6 * expected - 2 <= got <= expected + 2, (got, expected)


def test_a_thread_that_holds_the_gil_through_its_scope_is_billed_its_cpu_time(collector):
    """The old sampler took the GIL every tick: a thread that keeps it (a long
    pure-Python loop here, with the switch interval raised so the interpreter
    never hands it over) got no samples and the training thread paid for the
    handoffs. The native sampler reads no Python state, so it ticks; the
    reference sampler, a Python thread, cannot, and its thread settles the
    CPU time where the scope closes (without that: no sample at all)."""
    c = collector
    interval = sys.getswitchinterval()
    c.start_sampler(HZ)
    try:
        time.sleep(0.05)
        sys.setswitchinterval(100.0)
        try:
            cpu = in_scope(c, "forward", cpu_spin, 1.0)
        finally:
            sys.setswitchinterval(interval)
    finally:
        c.stop_sampler()
    expected = cpu * HZ  # ~200 when the loop has a core to itself
    got = samples_under(Snap(c), "forward")
    assert 0.75 * expected - 2 <= got <= expected + 2, (got, expected)


def test_native_capture_bills_the_operator_a_thread_is_in():
    """With native operator capture, a thread inside an ATen op has that op's
    node published: its samples land on the operator, under the phase."""
    _native = pytest.importorskip("dc_core._native")
    torch = pytest.importorskip("torch")
    from dc_torch import native as torch_native

    extension, why = torch_native.load()
    if extension is None:
        pytest.skip(f"native capture unavailable: {why}")
    c = _native.Collector()
    capture = torch_native.NativeCapture(extension)
    a = torch.randn(1024, 1024)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # intra-op workers run no Python: keep the work on this thread
    phase = c.enter([c.intern(_native.KIND_PHASE, "forward")], 0, False, 0)
    capture.start(c, 0, False, lambda module, root: -1)
    c.start_sampler(HZ)
    try:
        end = time.monotonic() + 0.6
        while time.monotonic() < end:
            torch.mm(a, a)
    finally:
        c.stop_sampler()
        capture.stop()
        c.exit()
        torch.set_num_threads(threads)
    s = Snap(c)
    samples = s.raw["metrics"]["samples"]
    on_mm = sum(samples[n] for n in range(len(samples)) if s.node_frame(n).name == "aten::mm")
    assert sum(samples) >= 30 and s.subtree_samples(phase) == sum(samples)
    assert on_mm >= 0.8 * sum(samples), (on_mm, sum(samples))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_samples_its_surviving_thread(collector):
    """In a forked child the surviving thread has a new kernel id and CPU clock."""
    c = collector
    c.enter([c.intern(reference.KIND_PHASE, "forward")], 0, False, 0)
    pid = os.fork()
    if pid == 0:  # the child: report through the exit status only
        code = 1
        try:
            c.unwind(0)
            c.start_sampler(HZ)
            in_scope(c, "dataloader", spin, 0.3)
            c.stop_sampler()
            code = 0 if samples_under(Snap(c), "dataloader") >= 10 else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    c.exit()
    assert os.waitstatus_to_exitcode(status) == 0
