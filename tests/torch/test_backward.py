"""Backward attribution: how backward nodes are hooked, timed and placed."""

from __future__ import annotations

import torch
from torch.nn import functional as F

import dc_torch
import dc_torch.autograd as autograd
from dc_core.model.opnames import op_name
from dc_core.record.config import StepRange
from dc_core.store.logdir import load_profiles
from dc_torch.autograd import pack, unpack
from tests.torch.conftest import find, only_profile
from tests.torch.models import TwoLine, sharpen

QUIET = {"cpu_sampling_hz": 0, "system_interval_ms": 0}


def _backward_ops(tree, name):
    return find(
        tree,
        lambda fs: (
            fs[0].name == "backward" and op_name(fs[-1].name) == op_name(name) and fs[-1].backward
        ),
    )


def test_marks_round_trip():
    assert unpack(pack(7, 123456, 4321)) == (7, 123456, 4321)
    assert unpack(pack(0, 2**32 - 1, 2**31 - 1)) == (0, 2**32 - 1, 2**31 - 1)
    assert unpack(pack(2**40, 0, 0)) == (2**40, 0, 0)


def test_nodes_are_hooked_through_the_shared_holder_on_this_torch():
    assert autograd._hook_holder(lambda grad: None) is not None


def test_composite_call_inner_nodes_are_timed_and_counted(
    tmp_path, monkeypatch, holder=True, paired=False
):
    if not holder:  # where torch has no usable _register_hook_dict: the public register_prehook
        monkeypatch.setattr(autograd, "_hook_holder", lambda hook: None)
    if paired:  # as for tensors on a device, whose nodes run on autograd's device threads
        attach = autograd.NodeHooks.attach
        monkeypatch.setattr(
            autograd.NodeHooks, "attach", lambda self, node, paired: attach(self, node, True)
        )
    model = TwoLine()
    with dc_torch.profile(logdir=str(tmp_path), steps=StepRange(start=0, count=3), **QUIET) as prof:
        for _ in range(3):
            model(torch.randn(4, 8)).sum().backward()
            prof.step()
    tree = only_profile(tmp_path).tree
    linear = _backward_ops(tree, "torch.nn.functional.linear")
    by_detail = {tree.node_frame(n).detail: n for n in linear}
    # the weight's transpose is the call's inner node
    assert set(by_detail) == {
        "AddmmBackward0",
        "TBackward0",
    }
    # exact per autograd node: each ran once per step
    assert tree.value(by_detail["AddmmBackward0"], "count") == 3
    assert tree.value(by_detail["TBackward0"], "count") == 3
    assert all(tree.value(n, "cpu_time_ns") > 0 for n in linear)
    assert tree.parent[by_detail["AddmmBackward0"]] == tree.parent[by_detail["TBackward0"]]


def test_without_the_holder_register_prehook_gives_the_same_tree(tmp_path, monkeypatch):
    test_composite_call_inner_nodes_are_timed_and_counted(tmp_path, monkeypatch, holder=False)


def test_paired_pre_and_post_hooks_give_the_same_tree(tmp_path, monkeypatch):
    test_composite_call_inner_nodes_are_timed_and_counted(tmp_path, monkeypatch, paired=True)


def test_direct_autograd_backward_closes_its_scopes_when_the_pass_ends(tmp_path):
    """``torch.autograd.backward`` is no entry point of ours (it is timed as an
    operator): the engine's end-of-pass callback closes the last node's scope,
    so scopes stay balanced and later forward work nests under no operator."""
    model = TwoLine()
    with dc_torch.profile(logdir=str(tmp_path), steps=StepRange(start=0, count=2), **QUIET) as prof:
        for _ in range(2):
            torch.autograd.backward(model(torch.randn(4, 8)).sum())
            sharpen(torch.randn(4, 8))  # forward work after the pass
            prof.step()
    tree = only_profile(tmp_path).tree
    for node in range(1, len(tree)):
        path = tree.path_frames(node)
        assert not any(f.kind == "operator" for f in path[:-1]), path  # operators are leaves
    softmax = _backward_ops(tree, "torch.softmax")
    assert len(softmax) == 1 and tree.value(softmax[0], "count") == 2
    after = find(
        tree, lambda fs: op_name(fs[-1].name) == op_name("torch.softmax") and not fs[-1].backward
    )
    assert sum(tree.value(n, "count") for n in after) == 4


def test_a_users_tensor_hook_still_runs_and_changes_the_gradient(tmp_path):
    def run(profiled):
        torch.manual_seed(0)
        lin = torch.nn.Linear(8, 8)
        x = torch.randn(4, 8)
        seen = []

        def step():
            h = lin(x)
            handle = h.register_hook(lambda g: seen.append(g.shape) or g * 0)
            out = torch.softmax(h * 2.0, dim=-1)
            kept = out.register_hook(lambda g: g * 3)
            out.sum().backward()
            handle.remove()
            kept.remove()

        if profiled:
            with dc_torch.profile(
                logdir=str(tmp_path), steps=StepRange(start=0, count=1), **QUIET
            ) as prof:
                step()
                prof.step()
        else:
            step()
        return lin.weight.grad.clone(), seen

    (plain, plain_seen), (profiled, profiled_seen) = run(False), run(True)
    assert torch.equal(plain, profiled) and torch.count_nonzero(profiled) == 0
    assert plain_seen == profiled_seen == [torch.Size([4, 8])]
    tree = only_profile(tmp_path).tree
    assert tree.value(_backward_ops(tree, "torch.softmax")[0], "count") == 1  # our hook ran as well


def test_a_graph_that_outlives_its_window_lands_under_the_phase_by_node_name(tmp_path):
    model = TwoLine()
    window = StepRange(start=0, count=1, every=2, repeat=2)  # steps 0 and 2
    with dc_torch.profile(logdir=str(tmp_path), steps=window, **QUIET) as prof:
        old = model(torch.randn(4, 8)).sum()  # marked in the first window
        prof.step()
        prof.step()
        old.backward()  # run in the second
        prof.step()
    profiles, errors = load_profiles(tmp_path)
    assert not errors and len(profiles) == 2
    tree = profiles[-1].tree
    softmax = find(tree, lambda fs: fs[-1].name == "SoftmaxBackward0")
    assert len(softmax) == 1
    path = tree.path_frames(softmax[0])
    assert [f.name for f in path] == ["backward", "SoftmaxBackward0"] and path[-1].backward
    assert tree.value(softmax[0], "count") == 1


def _alloc_window(logdir, **config):
    x, w = torch.randn(16, 8), torch.randn(8, 16)
    with dc_torch.profile(
        logdir=str(logdir), steps=StepRange(start=0, count=2), **QUIET, **config
    ) as prof:
        for _ in range(2):
            fresh = F.relu(x)
            fresh.view(8, 16).t().add_(1.0)
            torch.cat([fresh, x]).split(4)
            torch.mm(x, w)
            prof.step()
    return only_profile(logdir).tree


def test_alloc_bytes_count_fresh_outputs_not_views(tmp_path):
    tree = _alloc_window(tmp_path, record_shapes=True)

    def alloc(name):
        nodes = find(tree, lambda fs: op_name(fs[-1].name) == op_name(name))
        assert len(nodes) == 1, name
        return tree.value(nodes[0], "alloc_bytes")

    assert alloc("torch.nn.functional.relu") == 2 * 16 * 8 * 4
    assert alloc("torch.cat") == 2 * 32 * 8 * 4
    assert alloc("torch.Tensor.view") == alloc("torch.Tensor.t") == alloc("torch.Tensor.add_") == 0
    assert alloc("torch.Tensor.split") == 0


def test_shapes_are_read_in_comprehensive_windows_or_when_asked(tmp_path):
    """Reading op arguments makes torch box every op's inputs and outputs:
    lightweight windows leave FLOPs and alloc_bytes out unless record_shapes
    asks for them; comprehensive windows take them unless it says no."""
    for name, config, takes in (
        ("light", {}, False),
        ("light+shapes", {"record_shapes": True}, True),
        ("comprehensive", {"mode": "comprehensive"}, True),
        ("comprehensive-shapes", {"mode": "comprehensive", "record_shapes": False}, False),
    ):
        tree = _alloc_window(tmp_path / name, **config)
        relu = find(tree, lambda fs: op_name(fs[-1].name) == op_name("torch.nn.functional.relu"))[0]
        mm = find(
            tree,
            lambda fs: fs[0].name != "backward" and op_name(fs[-1].name) == op_name("torch.mm"),
        )[0]
        assert tree.value(relu, "alloc_bytes") == (2 * 16 * 8 * 4 if takes else 0), name
        assert tree.value(mm, "flops") == (2 * (2 * 16 * 8 * 16) if takes else 0), name
