"""The user's own call runs exactly once, and its exception reaches the user
unchanged; only what the profiler's own code raises is the profiler's
(issue 11, item 1)."""

from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")

import dc_torch
from dc_core.record.config import StepRange
from tests.reliability.workload import torch_state

QUIET = {"cpu_sampling_hz": 0, "system_interval_ms": 0}


def _window(tmp_path, **config):
    return dc_torch.profile(
        logdir=str(tmp_path), steps=StepRange(start=0, count=2), **QUIET, **config
    )


def _backward_once_failing(
    error: BaseException, retain_graph: bool
) -> tuple[list[str], list[float]]:
    """A hook raises ``error`` in the first backward; the user catches it and
    runs backward again. Returns what the user saw and the gradient."""
    a = torch.ones(2, requires_grad=True)
    h = a * 3.0
    calls = []

    def hook(grad):
        calls.append(1)
        if len(calls) == 1:
            raise error
        return grad

    h.register_hook(hook)
    loss = h.sum()
    seen = []
    try:
        loss.backward(retain_graph=retain_graph)
    except type(error) as exc:
        seen.append(f"{type(exc).__name__}: {exc}")
        if retain_graph:
            loss.backward()
    seen.append(f"hook ran {len(calls)}x")
    return seen, a.grad.tolist() if a.grad is not None else []


@pytest.mark.parametrize(
    "error, retain_graph",
    [
        (ValueError("from the user's hook"), True),
        (torch.OutOfMemoryError("CUDA out of memory (the user's)"), False),
    ],
)
def test_user_exception_in_backward_reaches_the_user_once(error, retain_graph, tmp_path, caplog):
    """Regression: the backward runner sat inside the profiler's ``except``: a
    hook's ValueError never reached the user and backward ran twice
    (``a.grad == [6, 6]`` instead of ``[3, 3]``); an OOM became "Trying to
    backward through the graph a second time"."""
    plain = _backward_once_failing(error, retain_graph)
    with caplog.at_level(logging.ERROR, logger="deepcontext"):
        with _window(tmp_path) as prof:
            profiled = _backward_once_failing(error, retain_graph)
    assert profiled == plain
    assert plain[0][0].startswith(type(error).__name__)
    # the user's error is not the profiler's
    assert not prof.session.disabled and not caplog.records


def test_failing_pass_through_call_is_the_users(tmp_path, caplog):
    """Regression: the first call of a pass-through function (``x.stride(5)``)
    raising disabled the profiler and ran the call a second time."""
    x = torch.ones(2, 3)
    with caplog.at_level(logging.ERROR, logger="deepcontext"):
        with _window(tmp_path) as prof:
            with pytest.raises(IndexError) as caught:
                x.stride(5)
            torch.mm(x, x.t())
    assert "Dimension out of range" in str(caught.value)
    assert not prof.session.disabled and not caplog.records
    assert prof.written and torch_state()["function modes"] == []


def test_user_call_runs_once_when_the_profiler_fails_around_it(
    tmp_path, monkeypatch, caplog, python_capture
):
    """A profiler error after the user's call (recording its output) must not
    run the call again: an in-place op applied twice would change the result."""
    from dc_torch import ops

    def broken(*args):
        raise RuntimeError("profiler bug after the call")

    monkeypatch.setattr(ops, "output_bytes", broken)
    x = torch.ones(3)
    with caplog.at_level(logging.ERROR, logger="deepcontext"):
        with _window(tmp_path, record_shapes=True) as prof:  # output_bytes runs after each call
            y = torch.add(x, 1.0)
            x.mul_(2.0)
    assert y.tolist() == [2.0, 2.0, 2.0] and x.tolist() == [2.0, 2.0, 2.0]
    assert prof.session.disabled and len(caplog.records) == 1
