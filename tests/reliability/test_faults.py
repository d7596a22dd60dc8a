"""Internal faults at every hook boundary leave training as it would have been.

Each fault is raised by the profiler's own code (`faults.FaultyCollector`) in
the first step of a window. Afterwards the user's losses and weights are
bit-identical to an unprofiled run, torch's global state (mode stacks, global
hooks, patched methods) is as before the window, exactly one error is logged,
and the window collected up to the fault is written.
"""

from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")

import dc_torch
from dc_core.record.config import StepRange
from dc_core.store.logdir import load_profiles
from tests.invariants import violations
from tests.reliability.faults import PATHS, inject
from tests.reliability.workload import same_training, single_process_group, torch_state, train

#: Every (capture path, fault point) there is.
CASES = [(capture, point) for capture, points in PATHS.items() for point in sorted(points)]
QUIET = {"system_interval_ms": 0}


def _errors(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "deepcontext" and r.levelno >= logging.ERROR
    ]


@pytest.fixture
def process_group(tmp_path):
    """Collectives need a process group: one gloo rank, destroyed after the test."""
    import torch.distributed as dist

    single_process_group(str(tmp_path))
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize(("capture", "point"), CASES)
def test_fault_leaves_training_and_torch_as_they_were(
    point, capture, tmp_path, monkeypatch, caplog, request
):
    if point == "collective":
        request.getfixturevalue("process_group")
    mode = "comprehensive" if point == "aten" else "lightweight"
    plain = train()
    before = torch_state()
    once = ("sampler", "writer", "capture start", "capture stop")  # once per window
    made = inject(monkeypatch, point, nth=1 if point in once else 2, capture=capture)
    logdir = tmp_path / "logs"
    with caplog.at_level(logging.WARNING, logger="deepcontext"):
        with dc_torch.profile(
            logdir=str(logdir),
            steps=StepRange(start=1, count=2),
            mode=mode,
            cpu_sampling_hz=50 if point == "sampler" else 0,
            **QUIET,
        ) as prof:
            profiled = train(profiler=prof)
            during = torch_state()
    assert [c.raised for c in made] == [1], f"the {point} fault never fired"
    assert same_training(profiled, plain)
    assert during == before == torch_state()  # restored at the fault, not only at exit
    errors = _errors(caplog)
    assert len(errors) == 1 and "disabled itself" in errors[0], errors
    assert prof.session.disabled
    profiles, bad = load_profiles(logdir)
    assert not bad
    if point in ("writer", "capture start"):
        # the writer failed, or the window never opened: nothing half-written either
        assert profiles == []
        assert not list(logdir.rglob("*.partial")) if logdir.exists() else True
    else:
        assert [p.steps[0] for p in profiles] == [1]  # the partial window, from its first step
        assert profiles[0].tree.find("forward") is not None


@pytest.mark.parametrize("faults", [1, 7])
def test_repeated_faults_never_stack_modes(faults, tmp_path, monkeypatch):
    """Regression (issue 11 item 3): each fault inside an operator hook left its
    function mode on torch's stack (0 -> 7 over 7 faults, plain steps x2.14 slower)."""
    before = torch_state()
    for i in range(faults):
        with monkeypatch.context() as patch:
            inject(patch, "operator", nth=1)
            with dc_torch.profile(
                logdir=str(tmp_path / str(i)),
                steps=StepRange(start=0, count=2),
                cpu_sampling_hz=0,
                **QUIET,
            ) as prof:
                train(steps=2, profiler=prof)
                assert torch._C._len_torch_function_stack() == 0  # gone at the next step boundary
    assert torch_state() == before


def test_profilers_closed_out_of_order_restore_torch(tmp_path):
    """Regression (issue 11 item 3): closing the first of two open profilers first
    left ``zero_grad`` and ``DataLoader.__next__`` patched and a mode on the stack."""
    before = torch_state()
    first = dc_torch.profile(
        logdir=str(tmp_path / "a"), steps=StepRange(start=0, count=5), cpu_sampling_hz=0, **QUIET
    )
    second = dc_torch.profile(
        logdir=str(tmp_path / "b"), steps=StepRange(start=0, count=5), cpu_sampling_hz=0, **QUIET
    )
    first.start()
    second.start()
    train(steps=2)
    first.stop()
    losses_while_second, _ = train(steps=2)
    second.stop()
    assert torch_state() == before
    assert losses_while_second == train(steps=2)[0]
    for logdir in ("a", "b"):
        profiles, bad = load_profiles(tmp_path / logdir)
        assert not bad and len(profiles) == 1
        assert profiles[0].tree.find("forward") is not None


def test_exit_failure_never_reaches_the_user(tmp_path, monkeypatch, caplog, python_capture):
    """Regression (issue 11 item 7): an error from ``collector.exit()`` in a hook's
    ``finally`` replaced the user's result with the profiler's exception."""
    inject(monkeypatch, "operator exit", nth=1)
    with caplog.at_level(logging.ERROR, logger="deepcontext"):
        with dc_torch.profile(
            logdir=str(tmp_path), steps=StepRange(start=0, count=1), cpu_sampling_hz=0, **QUIET
        ):
            out = torch.mm(torch.ones(2, 3), torch.ones(3, 2))
    assert out.tolist() == [[3.0, 3.0], [3.0, 3.0]]
    assert len(_errors(caplog)) == 1


@pytest.mark.parametrize("calls", [7, 40, 70])
def test_an_error_inside_the_native_callback_stops_it_and_turns_the_profiler_off(
    calls, tmp_path, caplog
):
    """C++ errors in the RecordFunction callback never reach torch's dispatcher:
    the capture stops at once, the window closes with what it had, one error is
    logged and the profiler is off; training is bit-identical. The operators
    left open by the fault are forgotten: before, the next step's phases
    nested in them (at call 70 the forward phase had -48 ms of its own time;
    at call 7, now and then, the optimizer's step was counted twice)."""
    from dc_torch import native

    extension, why = native.load()
    if extension is None:
        pytest.skip(f"no native capture here: {why}")
    plain = train()
    before = torch_state()
    logdir = tmp_path / "logs"
    extension.inject_fault(calls)  # the callback that many calls into the window throws
    try:
        with caplog.at_level(logging.WARNING, logger="deepcontext"):
            with dc_torch.profile(
                logdir=str(logdir),
                steps=StepRange(start=1, count=2),
                capture="native",
                cpu_sampling_hz=0,
                **QUIET,
            ) as prof:
                profiled = train(profiler=prof)
    finally:
        extension.inject_fault(-1)
    assert same_training(profiled, plain)
    assert torch_state() == before and not extension.active()
    errors = _errors(caplog)
    assert len(errors) == 1 and "disabled itself" in errors[0] and "injected fault" in errors[0], (
        errors
    )
    assert prof.session.disabled
    profiles, bad = load_profiles(logdir)
    assert not bad and [p.steps[0] for p in profiles] == [1]
    assert profiles[0].env["capture"].startswith("native")
    assert violations(profiles[0]) == []
