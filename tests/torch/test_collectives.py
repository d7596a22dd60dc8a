"""A collective's bytes and exposed wait, on a one-rank gloo group in this
process (the many-rank runs are tests/distributed)."""

from __future__ import annotations

import sys
import threading

import pytest
import torch
import torch.distributed as dist

import dc_torch
from dc_core.record.config import StepRange
from dc_torch.collective_calls import exposed
from tests.analyzer.planted import busy_wait
from tests.distributed.spawn import issued
from tests.torch.conftest import only_profile

QUIET = {"cpu_sampling_hz": 0, "system_interval_ms": 0}


@pytest.fixture
def one_rank(tmp_path):
    dist.init_process_group(
        "gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_bytes_and_exposed_wait_go_to_the_collective_waited_on(tmp_path, one_rank):
    work_class = torch._C._distributed_c10d.Work
    plain = work_class.wait
    grads, flags = torch.ones(1000), torch.ones(10, dtype=torch.int64)
    with dc_torch.profile(logdir=str(tmp_path), steps=StepRange(start=0, count=1), **QUIET):
        assert work_class.wait is not plain  # timed while the window is open
        first = dist.all_reduce(grads, async_op=True)
        second = dist.all_reduce(flags, async_op=True)
        assert second.wait() is True and first.wait() is True
    assert work_class.wait is plain
    assert grads.tolist() == [1.0] * 1000  # one rank: the sum is itself
    tree = only_profile(tmp_path).tree
    # one node per line that launched one
    reduces = tree.find_all(lambda f: f.name == "c10d::allreduce_")
    assert [tree.value(n, "count") for n in reduces] == [1, 1]
    assert sorted(tree.value(n, "comm_bytes") for n in reduces) == [10 * 8, 1000 * 4]
    # the calls and both waits, billed to the collectives and nowhere else
    exposed = [tree.value(n, "exposed_comm_ns") for n in range(len(tree))]
    assert all(exposed[n] > 0 for n in reduces)
    assert sum(exposed) == sum(exposed[n] for n in reduces)
    assert all(tree.value(n, "comm_time_ns") > 0 for n in reduces)


def test_a_collective_on_a_thread_in_no_scope_lands_in_the_other_phase(tmp_path, one_rank):
    """A thread the steps do not run on (``deepcontext run``'s time range times
    its steps from a thread of its own; a loader thread) calls a collective:
    it lands with that thread's operators in phase ``other``, under the line
    that called it, never right under the window's root."""

    def loader_thread():
        dist.broadcast(torch.ones(16), src=0)

    with dc_torch.profile(logdir=str(tmp_path), steps=StepRange(start=0, count=1), **QUIET) as prof:
        thread = threading.Thread(target=loader_thread)
        thread.start()
        thread.join()
        prof.step()
    profile = only_profile(tmp_path)
    tree = profile.tree
    (broadcast,) = tree.find_all(lambda f: f.name == "c10d::broadcast_")
    path = tree.path_frames(broadcast)
    assert path[0].kind == "phase" and path[0].name == "other", path
    assert any(f.name.endswith("loader_thread") for f in path), path
    assert tree.value(broadcast, "comm_bytes") == 16 * 4


class _Averaged(torch.nn.Module):
    """A Linear whose output is all-reduced inside the module's own forward."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.proj(x)
        dist.all_reduce(y)
        return y


def test_a_collective_in_a_modules_forward_sits_under_that_module(tmp_path, one_rank):
    """Called from a module's forward, a collective goes under the module and
    the line that called it, as the operators beside it do, on both capture
    paths (the native one names modules in its own frame walk)."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), _Averaged())
    with dc_torch.profile(logdir=str(tmp_path), steps=StepRange(start=0, count=2), **QUIET) as prof:
        for _ in range(2):
            model(torch.ones(4, 8)).sum().backward()
            prof.step()
    tree = only_profile(tmp_path).tree
    (reduce,) = tree.find_all(lambda f: f.name == "c10d::allreduce_")
    path = tree.path_frames(reduce)
    modules = [f.name for f in path if f.kind == "module"]
    assert modules[-1] == "1", path  # the module that called it, not its parent or none
    line = path[path.index(next(f for f in path if f.name == "1")) + 1]
    assert line.kind == "python" and line.name.endswith("forward"), path
    assert tree.value(reduce, "count") == 2
    assert tree.value(reduce, "comm_bytes") == 2 * 4 * 8 * 4  # two steps of a 4x8 float tensor


class _Gathering(torch.nn.Module):
    """All-gathers its input into a list (gloo's worker copies it into place)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = [torch.empty_like(x)]
        dist.all_gather(out, x)
        return out[0]


def test_the_backends_work_on_its_own_thread_sits_under_its_collective(
    tmp_path, one_rank, capture_path
):
    """gloo runs a collective's work on a worker thread of its own, with the
    issuing thread's state: a list all-gather's copies of each rank's chunk
    into the outputs run there. They are no time of the step's thread, so they
    land in the ``other`` phase, but under a mirror of the collective's
    context, not the phase alone: the module, the line, the all-gather (one
    copy per call and rank). The Python capture path sees no operator there."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), _Gathering())
    with dc_torch.profile(logdir=str(tmp_path), steps=StepRange(start=0, count=3), **QUIET) as prof:
        for _ in range(3):
            model(torch.ones(4, 8))
            prof.step()
    tree = only_profile(tmp_path).tree
    (gather,) = issued(tree, lambda f: f.name == "c10d::allgather_")
    assert tree.value(gather, "count") == 3
    ran = [n for n in tree.find_all(lambda f: f.kind == "operator") if tree.value(n, "count")]
    at_issue = set(issued(tree))
    beside = [n for n in ran if n not in at_issue]  # a mirror itself ran nothing
    if capture_path != "native":
        assert beside == []
        return
    (copy,) = [n for n in beside if tree.node_frame(n).name == "aten::copy_"]
    assert tree.value(copy, "count") == 3  # one rank: one chunk a call
    path = tree.path_frames(copy)
    assert path[0].name == "other"
    # the all-gather's own path, its phase aside
    assert path[1:-1] == tree.path_frames(gather)[1:], path
    assert all(tree.path_frames(n)[-2] == path[-2] for n in beside)  # all of it


def test_a_users_backward_hook_that_all_reduces_is_no_ddp_bucket(tmp_path, one_rank):
    """A collective a Python gradient hook of the user's calls in backward is
    the hook's own: no wait for DDP's buckets is timed at the end of that pass
    (only a bucket's all-reduce, from DDP's reducer or a communication hook it
    runs, sets one up)."""
    from dc_core.model.comm import END_OF_BACKWARD

    weight = torch.ones(8, 8, requires_grad=True)
    weight.register_hook(lambda grad: dist.all_reduce(grad))
    with dc_torch.profile(logdir=str(tmp_path), steps=StepRange(start=0, count=2), **QUIET) as prof:
        for _ in range(2):
            (torch.ones(4, 8) @ weight).sum().backward()
            prof.step()
    tree = only_profile(tmp_path).tree
    (reduce,) = tree.find_all(lambda f: f.name == "c10d::allreduce_")
    assert tree.node_frame(reduce).backward and tree.value(reduce, "count") == 2
    assert tree.value(reduce, "comm_bytes") == 2 * 8 * 8 * 4
    assert tree.find_all(lambda f: f.detail == END_OF_BACKWARD) == []


def test_a_synchronous_collective_is_timed_to_the_end_of_its_wait(
    tmp_path, one_rank, monkeypatch, capture_path
):
    """``dist.all_reduce(t)`` waits for its work before it returns: its
    completion is the wait's end (launch to then: the call and the wait, so
    never less than its exposed time), with no callback on the backend's
    thread, which cost each call twice the collective's own Python. An
    asynchronous one's completion is clocked by its future: natively where the
    extension is loaded, else by a Python callback."""
    from dc_torch.collectives import CollectiveHooks
    from dc_torch.completion import CompletionClock

    python, native = [], []
    timed, arm = CollectiveHooks._time_completion, CompletionClock.arm
    monkeypatch.setattr(
        CollectiveHooks,
        "_time_completion",
        lambda self, work, node, start: python.append(node) or timed(self, work, node, start),
    )
    monkeypatch.setattr(
        CompletionClock, "arm", lambda self, work: native.append(1) or arm(self, work)
    )
    grads = torch.ones(1000)
    with dc_torch.profile(logdir=str(tmp_path), steps=StepRange(start=0, count=1), **QUIET):
        for _ in range(20):
            dist.all_reduce(grads)
        assert python == native == []
        dist.all_reduce(grads, async_op=True).wait()
        assert (len(native), len(python)) == ((1, 0) if capture_path == "native" else (0, 1))
    tree = only_profile(tmp_path).tree
    (synchronous,) = [
        n
        for n in tree.find_all(lambda f: f.name == "c10d::allreduce_")
        if tree.value(n, "count") == 20
    ]
    assert tree.value(synchronous, "comm_time_ns") >= tree.value(synchronous, "exposed_comm_ns") > 0


def test_an_asynchronous_collective_completes_when_its_work_does_not_when_python_is_free(
    tmp_path, one_rank, capture_path
):
    """A one-rank all-reduce completes within a millisecond of its launch; the
    step then computes in Python for 100 ms before it waits. Its completion is
    read on the backend's thread without the GIL (native path), not when a
    Python callback gets the GIL: with a switch interval of 1 s, that is when
    the step waits, 100 ms later. (The Python path has no extension: its
    callback runs at once where the work completed before it was attached,
    else when the step waits.)"""
    if capture_path != "native":
        pytest.skip("not applicable: the Python path clocks completion with a Python callback")
    grads, spin_ns, calls = torch.ones(1000), 100_000_000, 3
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1.0)
    try:
        with dc_torch.profile(logdir=str(tmp_path), steps=StepRange(start=0, count=1), **QUIET):
            for _ in range(calls):
                work = dist.all_reduce(grads, async_op=True)
                busy_wait(spin_ns / 1e9)
                work.wait()
    finally:
        sys.setswitchinterval(interval)
    tree = only_profile(tmp_path).tree
    (reduce,) = tree.find_all(lambda f: f.name == "c10d::allreduce_")
    assert tree.value(reduce, "count") == calls
    assert tree.children(reduce) == []  # the clock's own operator is not recorded
    # launch to completion: the call (in exposed time) and the collective, far from the spin
    comm = tree.value(reduce, "comm_time_ns")
    assert tree.value(reduce, "exposed_comm_ns") <= comm < calls * spin_ns / 2, comm


def test_a_collective_exposes_its_call_up_to_its_completion_and_the_waits_begun_before_it():
    """A call that returns after its collective completed was launching, not
    communicating; a wait begun after it waited for nothing; one begun
    before it counts whole, its wake-up included (ns: launch 100, call ends
    150)."""
    call = (100, 150)
    assert exposed(0, call, (300, 310)) == (50, 10)  # completion not known: all of both
    assert exposed(120, call, (300, 310)) == (20, 0)  # completed in the call, waited later
    assert exposed(400, call, (300, 410)) == (50, 110)  # waited for it: the wake-up counts
    assert exposed(400, call, (0, 0)) == (50, 0)  # never waited for (DDP's buckets)


def test_a_work_without_a_future_is_timed_to_the_end_of_its_wait(tmp_path, one_rank):
    """gloo's reduce-scatter work has no future (``Work::getFuture not
    implemented``): its completion is its wait's end, and the window goes on."""
    out = torch.empty(256)
    with dc_torch.profile(logdir=str(tmp_path), steps=StepRange(start=0, count=1), **QUIET):
        for _ in range(3):
            dist.reduce_scatter_single(out, torch.ones(256), async_op=True).wait()
        dist.all_reduce(out, async_op=True).wait()
    tree = only_profile(tmp_path).tree
    (scatter,) = tree.find_all(lambda f: f.name == "c10d::_reduce_scatter_base_")
    (reduce,) = tree.find_all(lambda f: f.name == "c10d::allreduce_")
    assert tree.value(scatter, "count") == 3 and tree.value(reduce, "count") == 1
    assert tree.value(scatter, "comm_time_ns") >= tree.value(scatter, "exposed_comm_ns") > 0
    assert tree.value(reduce, "comm_time_ns") > 0
