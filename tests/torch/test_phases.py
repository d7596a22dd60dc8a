"""Each part of a step in its phase: clipping with the update, evaluation as
``eval``, what follows the update as ``other``, a wait for a backward run on
another thread billed once, as that backward."""

from __future__ import annotations

import threading

import pytest
import torch

import dc_torch
from dc_core.model.opnames import op_name
from dc_core.record.config import StepRange
from tests.torch.conftest import find, only_profile
from tests.torch.models import TwoLine

QUIET = dict(cpu_sampling_hz=0, system_interval_ms=0)


def _phases_of(tree, name: str, backward: bool = False) -> set[str]:
    """The phases holding an operator named ``name`` (either capture path's spelling)."""
    want = op_name(name)
    return {
        fs[0].name
        for fs in map(tree.path_frames, range(1, len(tree)))
        if fs[-1].kind == "operator"
        and op_name(fs[-1].name) == want
        and fs[-1].backward == backward
    }


def _train(tmp_path, before_update=lambda model, loss: None, after_update=lambda model, loss: None):
    """Four steps of a plain loop, steps 1-2 profiled; the profile's tree."""
    model = TwoLine()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with dc_torch.profile(logdir=str(tmp_path), steps=StepRange(start=1, count=2), **QUIET) as prof:
        for _ in range(4):
            loss = model(torch.randn(4, 8)).pow(2).sum()
            loss.backward()
            before_update(model, loss)
            opt.step()
            opt.zero_grad()
            after_update(model, loss)
            prof.step()
    return only_profile(tmp_path).tree


def test_regression_clip_grad_norm_sat_under_forward(tmp_path):
    """34.85 ms of a CNN's clip_grad_norm_ sat at its line under ``forward``:
    clipping is part of the update, under a frame of its own."""
    tree = _train(
        tmp_path,
        before_update=lambda model, loss: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0),
    )
    assert _phases_of(tree, "aten::_foreach_norm") == {"optimizer"}
    (norm,) = find(tree, lambda fs: op_name(fs[-1].name) == op_name("aten::_foreach_norm"))
    frames = tree.path_frames(norm)
    assert frames[-2].name == "clip_grad_norm_" and frames[-2].file.endswith("clip_grad.py")
    assert tree.value(norm, "count") == 2


def test_evaluation_inside_a_training_window_is_eval(tmp_path):
    model, other = TwoLine(), TwoLine()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with dc_torch.profile(logdir=str(tmp_path), steps=StepRange(start=0, count=2), **QUIET) as prof:
        for _ in range(2):
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
            model.eval()
            with torch.no_grad():
                model(torch.randn(4, 8)).exp()  # validation: its ops are eval's
            model.train()
            other.lin.eval()  # one layer frozen is no evaluation
            other.lin.train()
            prof.step()
    tree = only_profile(tmp_path).tree
    assert _phases_of(tree, "aten::exp") == {"eval"}
    assert _phases_of(tree, "aten::softmax") == {"forward", "eval"}
    (softmax,) = find(
        tree, lambda fs: fs[0].name == "eval" and op_name(fs[-1].name) == op_name("aten::softmax")
    )
    assert tree.value(softmax, "count") == 2


def test_a_bad_train_argument_is_torchs_own_error_and_the_profiler_stays_on(tmp_path):
    model = TwoLine()
    with dc_torch.profile(logdir=str(tmp_path), steps=StepRange(start=0, count=2), **QUIET) as prof:
        for _ in range(2):
            with pytest.raises(ValueError, match="training mode is expected to be boolean"):
                model.train(torch.ones(2))  # bool() of it would raise inside the profiler's wrapper
            model.eval()
            model(torch.randn(4, 8)).exp()
            model.train()
            prof.step()
    assert not prof.session.disabled
    assert _phases_of(only_profile(tmp_path).tree, "aten::exp") == {"eval"}


def test_a_host_read_of_the_loss_after_the_update_is_other(tmp_path):
    tree = _train(tmp_path, after_update=lambda model, loss: loss.item())
    assert _phases_of(tree, "aten::item") == {"other"}
    assert _phases_of(tree, "aten::pow") == {"forward"}


def test_two_optimizers_in_a_step_keep_the_second_ones_forward(tmp_path):
    """Once a step has shown it makes two updates, the forward between them is forward."""
    a, b = TwoLine(), TwoLine()
    opt_a, opt_b = torch.optim.SGD(a.parameters(), lr=0.1), torch.optim.SGD(b.parameters(), lr=0.1)
    with dc_torch.profile(logdir=str(tmp_path), steps=StepRange(start=0, count=3), **QUIET) as prof:
        for _ in range(3):
            a(torch.randn(4, 8)).sum().backward()
            opt_a.step()
            b(torch.randn(4, 8)).exp().sum().backward()
            opt_b.step()
            prof.step()
    tree = only_profile(tmp_path).tree
    (exp,) = find(
        tree, lambda fs: fs[0].name == "forward" and op_name(fs[-1].name) == op_name("aten::exp")
    )
    assert tree.value(exp, "count") == 2  # the window's first step learns it, the next two keep it


def test_the_wait_for_a_backward_run_on_another_thread_is_that_backward(tmp_path):
    """The training thread's 9.8 ms wait in ``t.join()`` was forward's own time
    (71% of the window) on top of the backward it waited for: the wall time
    is billed once, as that backward."""
    model = TwoLine()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def run_backward(loss):
        loss.backward()

    def slow_gradient(grad):
        # backward work the training thread waits for, planted well above noise
        threading.Event().wait(0.02)
        return grad

    with dc_torch.profile(logdir=str(tmp_path), steps=StepRange(start=0, count=2), **QUIET) as prof:
        for _ in range(2):
            out = model(torch.randn(4, 8))
            out.register_hook(slow_gradient)
            loss = out.pow(2).sum()
            worker = threading.Thread(target=run_backward, args=(loss,))
            worker.start()
            worker.join()
            opt.step()
            prof.step()
    profile = only_profile(tmp_path)
    tree = profile.tree
    incl = tree.inclusive("cpu_time_ns")
    phases = {tree.node_frame(c).name: c for c in tree.children(0)}
    forward, backward = phases["forward"], phases["backward"]
    assert incl[backward] >= 2 * 20_000_000  # the worker's backward phase, its wait in it
    forward_own = tree.value(forward, "cpu_time_ns") + sum(
        tree.value(n, "cpu_time_ns")
        for n in tree.preorder(forward)
        if tree.node_frame(n).kind == "python"
    )
    assert forward_own < 20_000_000  # not the join's 2 × 20 ms
    assert abs(incl[0] - sum(profile.step_times_ns)) < 0.1 * sum(profile.step_times_ns)
