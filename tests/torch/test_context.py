"""What the tree holds for eager PyTorch: lines, modules, operators, backward, phases."""

from __future__ import annotations

import torch

import dc_torch
from dc_core.model.opnames import op_name
from dc_core.record.config import StepRange
from tests.torch.conftest import find, only_profile
from tests.torch.models import TwoLine, train

QUIET = {"cpu_sampling_hz": 0, "system_interval_ms": 0}


def _run(tmp_path, steps=6, window=StepRange(start=2, count=3), **overrides):
    model = TwoLine()
    with dc_torch.profile(logdir=str(tmp_path), steps=window, **{**QUIET, **overrides}) as prof:
        train(model, steps, prof)
    return only_profile(tmp_path)


def _names(frames):
    return [(f.kind, f.name) for f in frames]


def test_helper_holds_forward_softmax_counted_per_step(tmp_path):
    tree = _run(tmp_path).tree
    nodes = find(tree, lambda fs: fs[0].name == "forward" and op_name(fs[-1].name) == "softmax")
    assert len(nodes) == 1
    path = tree.path_frames(nodes[0])
    assert path[-2].kind == "python" and path[-2].name == "sharpen"
    assert path[-2].file.endswith("tests/torch/models.py")
    assert tree.value(nodes[0], "count") == 3  # three calls in three profiled steps
    assert not path[-1].backward
    assert tree.value(nodes[0], "cpu_time_ns") > 0


def test_backward_ops_flagged_under_the_same_helper_frame(tmp_path):
    tree = _run(tmp_path).tree
    forward = find(tree, lambda fs: fs[0].name == "forward" and op_name(fs[-1].name) == "softmax")[
        0
    ]
    backward = find(tree, lambda fs: fs[0].name == "backward" and op_name(fs[-1].name) == "softmax")
    assert len(backward) == 1
    bpath, fpath = tree.path_frames(backward[0]), tree.path_frames(forward)
    assert bpath[-1].backward and bpath[-1].detail == "SoftmaxBackward0"
    assert tree.value(backward[0], "count") == 3
    # the same context, frame for frame (file, line, module), below the phase
    assert bpath[1:-1] == fpath[1:-1]
    assert bpath[-2].name == "sharpen"
    # the multiply on the same line has its own backward, under the same helper frame
    mul = [
        n
        for n in tree.children(tree.parent[backward[0]])
        if op_name(tree.node_frame(n).name) == "mul"
    ]
    assert len(mul) == 1 and tree.node_frame(mul[0]).backward and tree.value(mul[0], "count") == 3


def test_module_frames_carry_path_and_class(tmp_path):
    tree = _run(tmp_path, record_shapes=True).tree
    linear = find(tree, lambda fs: fs[0].name == "forward" and op_name(fs[-1].name) == "linear")
    assert len(linear) == 1
    modules = [f for f in tree.path_frames(linear[0]) if f.kind == "module"]
    assert [(m.name, m.detail) for m in modules] == [("TwoLine", "TwoLine"), ("lin", "Linear")]
    assert tree.value(linear[0], "count") == 3
    assert tree.value(linear[0], "flops") == 3 * 2 * 4 * 8 * 8
    # the module frame sits below the line that called it, and the line calling F.linear is torch's own: skipped
    path = tree.path_frames(linear[0])
    assert path[path.index(modules[1]) - 1].kind == "python"
    assert path[path.index(modules[1]) + 1].kind == "operator"


def test_window_steps_are_exact(tmp_path):
    profile = _run(tmp_path, steps=8, window=StepRange(start=3, count=2))
    assert profile.steps == (3, 5)
    assert len(profile.step_times_ns) == 2
    node = find(
        profile.tree, lambda fs: fs[0].name == "forward" and op_name(fs[-1].name) == "softmax"
    )[0]
    assert profile.tree.value(node, "count") == 2


def test_optimizer_phase_holds_the_update(tmp_path):
    tree = _run(tmp_path).tree
    optimizer = tree.find("optimizer")
    assert optimizer is not None
    assert tree.value(optimizer, "count") == 6  # step() and zero_grad() in 3 steps
    ops = find(tree, lambda fs: fs[0].name == "optimizer" and fs[-1].kind == "operator")
    names = {op_name(tree.node_frame(n).name) for n in ops}
    assert names & {"add", "_foreach_add"}
    # under the loop's line, then torch's step of the optimizer the user built
    step = tree.path_frames(ops[0])
    assert [(f.kind, f.name) for f in step[:-1]][-2:] == [
        ("python", "train"),
        ("python", "SGD.step"),
    ]
    assert step[-2].file.endswith("torch/optim/sgd.py") and step[-2].line > 0


def test_two_optimizers_are_told_apart(tmp_path):
    class Optimizer(torch.optim.SGD):
        """A user's subclass: its step is torch's, named by the user's class."""

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1))
    first = torch.optim.Adam(model[0].parameters())
    second = Optimizer(model[1].parameters(), lr=0.1)
    with dc_torch.profile(logdir=str(tmp_path), steps=StepRange(start=1, count=2), **QUIET) as prof:
        for _ in range(4):
            model(torch.randn(4, 8)).sum().backward()
            first.step()
            second.step()
            prof.step()
    tree = only_profile(tmp_path).tree
    steps = find(tree, lambda fs: fs[0].name == "optimizer" and fs[-1].name.endswith(".step"))
    assert sorted((tree.node_frame(n).name, tree.value(n, "count")) for n in steps) == [
        ("Adam.step", 2),
        ("Optimizer.step", 2),
    ]
    for node in steps:  # each holds its own update
        assert any(tree.node_frame(c).kind == "operator" for c in tree.children(node))


def test_outside_a_window_nothing_is_hooked(tmp_path, capture_path):
    from torch.nn.modules import module as module_mod

    from dc_torch.native import load

    extension = load()[0]
    seen = []
    model = TwoLine()
    prof = dc_torch.Profiler(
        logdir=str(tmp_path), steps=StepRange(start=2, count=1), **QUIET
    ).start()
    for step in range(4):
        seen.append(
            (
                torch._C._len_torch_function_stack(),
                len(module_mod._global_forward_pre_hooks),
                extension is not None and extension.active(),
            )
        )
        model(torch.randn(2, 8))
        prof.step()
    prof.stop()
    # the Python path pushes a function mode and module hooks; the native path one RecordFunction callback
    inside = (0, 0, True) if capture_path == "native" else (1, 1, False)
    assert seen == [(0, 0, False), (0, 0, False), inside, (0, 0, False)]


def test_profiling_does_not_change_results(tmp_path):
    batches = [torch.randn(4, 8, generator=torch.Generator().manual_seed(i)) for i in range(5)]
    torch.manual_seed(1)
    plain = train(TwoLine(), 5, batches=batches)
    torch.manual_seed(1)
    model = TwoLine()
    with dc_torch.profile(logdir=str(tmp_path), steps=StepRange(start=1, count=3), **QUIET) as prof:
        profiled = train(model, 5, prof, batches=batches)
    assert profiled == plain


def test_comprehensive_mode_adds_aten_ops_below_torch_calls(tmp_path):
    tree = _run(tmp_path, mode="comprehensive").tree
    softmax = find(tree, lambda fs: fs[0].name == "forward" and fs[-1].name == "aten::_softmax")
    assert softmax and op_name(tree.node_frame(tree.parent[softmax[0]]).name) == "softmax"
    addmm = find(tree, lambda fs: fs[0].name == "forward" and fs[-1].name == "aten::addmm")
    assert tree.value(addmm[0], "flops") == 3 * 2 * 4 * 8 * 8
    backward = find(
        tree, lambda fs: fs[0].name == "backward" and fs[-1].name == "aten::_softmax_backward_data"
    )
    assert backward and tree.node_frame(backward[0]).backward
    # under the call's backward node (the native path nests it one deeper: under _softmax's own)
    parent = tree.parent[backward[0]]
    above = [tree.node_frame(parent), tree.node_frame(tree.parent[parent])]
    assert "softmax" in {op_name(f.name) for f in above} and above[0].backward


def test_comprehensive_mode_counts_batched_matmul_flops_from_shapes(tmp_path):
    a, b = torch.randn(3, 4, 5, requires_grad=True), torch.randn(3, 5, 6)
    with dc_torch.profile(
        logdir=str(tmp_path), steps=StepRange(start=0, count=2), mode="comprehensive", **QUIET
    ) as prof:
        for _ in range(2):
            torch.bmm(a, b).sum().backward()
            prof.step()
    tree = only_profile(tmp_path).tree
    forward = find(tree, lambda fs: fs[0].name == "forward" and fs[-1].name == "aten::bmm")
    assert len(forward) == 1 and tree.value(forward[0], "flops") == 2 * (2 * 3 * 4 * 6 * 5)
    backward = find(tree, lambda fs: fs[0].name == "backward" and fs[-1].name == "aten::bmm")
    # grad of a only
    assert backward and sum(tree.value(n, "flops") for n in backward) == 2 * (2 * 3 * 4 * 5 * 6)


def test_regression_foreach_ops_were_named_after_their_implementation_class():
    import torch

    from dc_torch.ops import op_name

    assert op_name(torch._foreach_mul_) == "torch._foreach_mul_"
    assert op_name(torch.softmax) == "torch.softmax"


def test_regression_first_operator_of_a_window_paid_for_torchs_name_table(tmp_path):
    """Naming the first operator built torch's overridable-function table
    (~10 ms) inside the window, billed to the user's first module; the adapter
    now builds it when the session is created (``prepare``), long before the
    first step starts, so opening the window costs the step nothing."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(f"""
        import torch
        from torch.overrides import _get_overridable_functions
        from dc_core.record.session import Session
        from dc_torch.adapter import TorchAdapter
        session = Session(logdir={str(tmp_path)!r}, steps={{"start": 0, "count": 1}}, cpu_sampling_hz=0,
                          system_interval_ms=0, framework="torch", adapter=TorchAdapter())
        print(_get_overridable_functions.cache_info().currsize)  # built when the session was made
        session.step_begin(0)  # opens the window: the adapter installs
        session.step_end(0)
        session.close()
    """)
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "1"
