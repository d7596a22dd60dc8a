"""Device activity: Kineto events onto the operators that launched them."""

from __future__ import annotations

from types import SimpleNamespace

import torch

import dc_torch
from dc_core.model.opnames import op_name
from dc_core.record.config import StepRange
from dc_torch.adapter import TorchAdapter
from dc_torch.device import ingest
from tests.torch.conftest import find, only_profile, requires_cuda
from tests.torch.models import TwoLine, train


def _event(name, parent=None, kernels=(), memory=0):
    return SimpleNamespace(
        name=name, cpu_parent=parent, kernels=list(kernels), device_memory_usage=memory
    )


def test_ingest_puts_kernels_under_the_marked_operator(tmp_path):
    from dc_core.record.session import Session

    adapter = TorchAdapter(device_activity=False)
    session = Session(
        logdir=str(tmp_path),
        framework="torch",
        adapter=adapter,
        cpu_sampling_hz=0,
        system_interval_ms=0,
    )
    session.step_begin(5)  # opens the default window (5..7) and installs the adapter
    try:
        c = session.collector
        op = c.child(c.top(), session.frame(3, "torch.mm"))
        marker = _event(f"dc#{op}")
        launcher = _event(
            "aten::mm",
            marker,
            [SimpleNamespace(name="sgemm_128x64", device=0, duration=2.5)] * 2,
            memory=4096,
        )
        orphan = _event(
            "aten::copy_", None, [SimpleNamespace(name="memcpy HtoD", device=0, duration=1.0)]
        )
        counts = ingest(adapter.hub, [marker, launcher, orphan])
        assert counts == {"attached": 2, "unmarked": 1}
        kernel = c.child(op, adapter.hub.frames.kernel("sgemm_128x64", "cuda:0"))
        snapshot = c.snapshot()
        assert snapshot["metrics"]["device_time_ns"][kernel] == 5000
        assert snapshot["metrics"]["count"][kernel] == 2
        assert snapshot["metrics"]["alloc_bytes"][op] == 4096
    finally:
        session.close()


def _timed(name, start, end, parent=None):
    span = SimpleNamespace(start=start, end=end)
    return SimpleNamespace(name=name, thread=1, time_range=span, cpu_parent=parent)


def test_a_marker_opened_late_by_a_slow_callback_is_still_its_ops():
    """Regression: under ThreadSanitizer the callback that opens an op's marker
    ran 60 µs after the op's record began, past the old 20 µs bound, and the
    op's kernels went unmarked. Any marker opening inside the op's span may be
    its own; the nearest to the op's start is, and a nested op's own marker
    (opening later) is not taken for its parent's."""
    from dc_torch.device import Markers, _marked_node

    relu = _timed("aten::relu", 100.0, 300.0)
    clamp = _timed("aten::clamp_min", 200.0, 280.0, parent=relu)
    events = [
        _timed("dc#7", 40.0, 90.0),  # the previous op's marker, closed before relu
        relu,
        _timed("dc#12", 160.0, 301.0),  # relu's, 60 µs late
        clamp,
        _timed("dc#13", 205.0, 281.0),  # clamp_min's own
        _timed("dc#14", 400.0, 420.0),  # a later op's
    ]
    markers = Markers(events)
    assert _marked_node(relu, markers) == 12
    assert _marked_node(clamp, markers) == 13
    # a marker opening a little before its op (our callback ran first) is its own
    early = _timed("aten::mm", 500.0, 600.0)
    assert _marked_node(early, Markers([*events, _timed("dc#21", 490.0, 600.0)])) == 21
    # no marker in the op's span: none, rather than a neighbour's
    assert _marked_node(_timed("aten::add", 700.0, 750.0), markers) == -1


def test_cpu_only_operators_are_the_leaves(tmp_path):
    with dc_torch.profile(
        logdir=str(tmp_path),
        steps=StepRange(start=1, count=2),
        cpu_sampling_hz=0,
        system_interval_ms=0,
        record_shapes=True,
    ) as prof:
        train(TwoLine(), 3, prof)
    tree = only_profile(tmp_path).tree
    assert not [n for n in range(len(tree)) if tree.node_frame(n).kind == "kernel"]
    softmax = find(
        tree,
        lambda fs: fs[0].name == "forward" and op_name(fs[-1].name) == op_name("torch.softmax"),
    )[0]
    # two steps of a fresh 4×8 float32 output
    assert tree.value(softmax, "alloc_bytes") == 2 * 4 * 8 * 4


@requires_cuda
def test_cuda_kernels_under_launching_operator_with_device_time(tmp_path):
    model = TwoLine().cuda()
    batches = [torch.randn(4, 8, device="cuda") for _ in range(4)]
    with dc_torch.profile(
        logdir=str(tmp_path),
        steps=StepRange(start=1, count=2),
        cpu_sampling_hz=0,
        system_interval_ms=0,
    ) as prof:
        train(model, 4, prof, batches=batches)
    tree = only_profile(tmp_path).tree
    kernels = find(tree, lambda fs: fs[-1].kind == "kernel")
    assert kernels
    under_softmax = [
        k
        for k in kernels
        if op_name(tree.node_frame(tree.parent[k]).name) == op_name("torch.softmax")
    ]
    assert under_softmax
    assert all(tree.value(k, "device_time_ns") > 0 for k in under_softmax)
    assert tree.node_frame(under_softmax[0]).detail.startswith("cuda:")
    backward = [k for k in kernels if tree.node_frame(tree.parent[k]).backward]
    assert backward  # backward kernels land under the forward context's [backward] operator
    linear = find(
        tree,
        lambda fs: (
            fs[0].name == "forward"
            and op_name(fs[-1].name) == op_name("torch.nn.functional.linear")
        ),
    )[0]
    # the CUDA caching allocator, through Kineto memory events
    assert tree.value(linear, "alloc_bytes") > 0
