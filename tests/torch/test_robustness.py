"""The adapter never breaks training: user errors pass through, threads and
DataLoader workers are safe, internal errors disable the profiler only."""

from __future__ import annotations

import logging
import threading

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import dc_torch
from dc_core.model.opnames import op_name
from dc_core.record.config import StepRange
from tests.torch.conftest import find, only_profile
from tests.torch.models import Exploding, TwoLine, train

QUIET = {"cpu_sampling_hz": 0, "system_interval_ms": 0}


def test_user_exception_propagates_unchanged(tmp_path):
    model = Exploding()
    error = None
    with pytest.raises(KeyError) as caught:
        with dc_torch.profile(
            logdir=str(tmp_path), steps=StepRange(start=0, count=3), **QUIET
        ) as prof:
            try:
                model(torch.randn(2, 4))
            except KeyError as exc:
                error = exc
                raise
            prof.step()
    assert caught.value is error and caught.value.args == ("boom from the user's forward",)
    profile = only_profile(tmp_path)  # what was collected is still written
    assert profile.steps == (0, 1)
    modules = [profile.tree.node_frame(n) for n in range(len(profile.tree))]
    assert any(f.kind == "module" and f.detail == "Exploding" for f in modules)


def test_user_exception_inside_a_torch_call_propagates(tmp_path):
    with dc_torch.profile(logdir=str(tmp_path), steps=StepRange(start=0, count=1), **QUIET):
        with pytest.raises(RuntimeError, match="cannot be multiplied"):
            torch.mm(torch.ones(2, 3), torch.ones(2, 3))
    assert only_profile(tmp_path).steps == (0, 1)


def test_internal_error_disables_profiler_and_training_goes_on(tmp_path, monkeypatch, caplog):
    from dc_torch import state

    def broken(self, module, root):
        raise RuntimeError("adapter bug")

    monkeypatch.setattr(state.Frames, "module", broken)
    batches = [torch.randn(4, 8, generator=torch.Generator().manual_seed(i)) for i in range(4)]
    torch.manual_seed(3)
    plain = train(TwoLine(), 4, batches=batches)
    torch.manual_seed(3)
    model = TwoLine()
    with caplog.at_level(logging.ERROR, logger="deepcontext"):
        with dc_torch.profile(
            logdir=str(tmp_path), steps=StepRange(start=1, count=2), **QUIET
        ) as prof:
            profiled = train(model, 4, prof, batches=batches)
    assert profiled == plain
    assert sum("disabled itself" in r.getMessage() for r in caplog.records) == 1
    assert prof.session.disabled


@pytest.mark.keeps_no_accounts  # a second thread computes all along: its time adds to the steps' wall time
def test_threads_do_not_corrupt_the_profile(tmp_path):
    model = TwoLine()
    other = TwoLine()
    stop = threading.Event()
    errors = []

    def background():
        try:
            while not stop.is_set():
                with torch.no_grad():
                    other(torch.randn(2, 8))
        except Exception as exc:
            errors.append(exc)

    worker = threading.Thread(target=background)
    worker.start()
    try:
        with dc_torch.profile(
            logdir=str(tmp_path),
            steps=StepRange(start=1, count=3),
            cpu_sampling_hz=200,
            system_interval_ms=0,
        ) as prof:
            train(model, 5, prof)
    finally:
        stop.set()
        worker.join()
    assert not errors
    tree = only_profile(tmp_path).tree
    softmax = find(
        tree,
        lambda fs: fs[0].name == "forward" and op_name(fs[-1].name) == op_name("torch.softmax"),
    )
    assert [tree.value(n, "count") for n in softmax] == [3]  # the training thread's count is exact
    backward = find(
        tree,
        lambda fs: fs[0].name == "backward" and op_name(fs[-1].name) == op_name("torch.softmax"),
    )
    assert [tree.value(n, "count") for n in backward] == [3]


class Squares(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, index):
        x = torch.full((8,), float(index)).sin()  # torch work inside the worker process
        return x, x.cos()


def test_dataloader_workers_and_dataloader_phase(tmp_path):
    model = TwoLine()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Squares(), batch_size=8, num_workers=2)
    with dc_torch.profile(logdir=str(tmp_path), steps=StepRange(start=2, count=3), **QUIET) as prof:
        for x, y in loader:
            loss = (model(x) - y).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            prof.step()
    tree = only_profile(tmp_path).tree
    dataloader = tree.find("dataloader")
    assert dataloader is not None and tree.value(dataloader, "count") == 3
    assert tree.inclusive("cpu_time_ns")[dataloader] > 0
    softmax = find(
        tree,
        lambda fs: fs[0].name == "forward" and op_name(fs[-1].name) == op_name("torch.softmax"),
    )
    assert [tree.value(n, "count") for n in softmax] == [3]


@pytest.mark.parametrize("where", ["phase", "closure"])
def test_an_error_inside_an_optimizer_hook_leaves_the_users_step_whole(
    tmp_path, monkeypatch, caplog, where
):
    """torch iterates its global optimizer hooks while it calls them: turning the
    profiler off from inside one must not take a hook out under that iteration
    (which would raise in the user's ``optimizer.step()``); they go at the next
    step boundary."""
    from dc_torch import closure, phases

    def broken(*args, **kwargs):
        raise RuntimeError("planted")

    if where == "phase":
        monkeypatch.setattr(phases.PhaseHooks, "_step_frame", broken)
    else:
        monkeypatch.setattr(closure.ClosureHooks, "wrap", broken)
    model = TwoLine()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = 0
    with dc_torch.profile(logdir=str(tmp_path), steps=StepRange(start=0, count=3), **QUIET) as prof:
        for _ in range(4):

            def closure_fn():
                opt.zero_grad()
                loss = model(torch.randn(4, 8)).sum()
                loss.backward()
                return loss

            opt.step(closure_fn)
            steps += 1
            prof.step()
    assert steps == 4
    assert sum("planted" in r.getMessage() for r in caplog.records) == 1
