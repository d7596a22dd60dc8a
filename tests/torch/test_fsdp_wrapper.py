"""FSDP1's runtime functions, wrapped for a window (dc_torch.fsdp_wrapper):
each runs once as a ``sharding`` frame, a gather another unit's work issues
is a prefetch naming its issuer, FSDP's own exception reaches the caller
unchanged and the functions are put back. A stand-in module takes the
runtime's place in ``sys.modules``; the real FSDP1 runs in
tests/distributed/test_fsdp1.py."""

from __future__ import annotations

import sys
import types

import pytest
import torch
from torch import nn

import dc_torch
from dc_core.record.config import StepRange
from dc_torch import fsdp_wrapper
from tests.torch.conftest import only_profile

QUIET = {"cpu_sampling_hz": 0, "system_interval_ms": 0}
RECORD = fsdp_wrapper.RECORD


class Boom(Exception):
    pass


class Handle:
    """What the wrappers read of a ``FlatParamHandle``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._training_state = types.SimpleNamespace(name="IDLE")
        self._ran_pre_backward_hook = False
        self.fail = False


class Unit(nn.Module):
    """An FSDP1 unit as the wrappers see it: a module holding its handle."""

    def __init__(self, handle: Handle | None, *inner: nn.Module) -> None:
        super().__init__()
        self._handle = handle
        self._is_root = handle is None
        self._fsdp_wrapped_module = nn.Sequential(*inner)


@pytest.fixture
def runtime(monkeypatch):
    """The stand-in runtime; ``calls`` records what FSDP's functions did."""
    module = types.ModuleType(fsdp_wrapper.RUNTIME)
    calls: list[tuple[str, str]] = []

    def _unshard(state, handle, unshard_stream, pre_unshard_stream):
        calls.append(("unshard", handle.name))
        if handle.fail:
            raise Boom("from FSDP")

    def _pre_forward(state, handle, unshard_fn, module_, args, kwargs):
        calls.append(("pre_forward", handle.name if handle else "root"))
        if handle is not None:
            module._unshard(state, handle, None, None)  # its own gather, by the module's name
            for target in kwargs.pop("prefetch", ()):
                target._training_state = types.SimpleNamespace(name="FORWARD")
                module._unshard(state, target, None, None)
        return args, kwargs

    module._unshard, module._pre_forward = _unshard, _pre_forward
    monkeypatch.setitem(sys.modules, fsdp_wrapper.RUNTIME, module)
    plain = dict(vars(module))
    yield module, calls
    assert dict(vars(module)) == plain  # put back when the window closed


def test_each_function_runs_once_and_a_prefetch_names_its_issuer(tmp_path, runtime):
    module, calls = runtime
    first, second = Handle("first"), Handle("second")
    root = Unit(None, Unit(first, nn.Linear(2, 2)), Unit(second, nn.Linear(2, 2)))
    with dc_torch.profile(logdir=str(tmp_path), steps=StepRange(start=0, count=1), **QUIET):
        module._pre_forward(root, None, None, root, (), {})  # the root's: names the units
        module._pre_forward(root, first, None, root, (), {"prefetch": [second]})
    assert calls == [
        ("pre_forward", "root"),
        ("pre_forward", "first"),
        ("unshard", "first"),
        ("unshard", "second"),
    ]
    tree = only_profile(tmp_path).tree
    work = tree.find_all(lambda f: f.kind == "sharding")
    counts: dict[str, int] = {}
    for node in work:
        name = tree.node_frame(node).name
        counts[name] = counts.get(name, 0) + tree.value(node, "count")
    # the unit's own gather is no frame of its own: it is its pre-forward's
    assert counts == {RECORD + "_pre_forward": 2, RECORD + "_pre_forward_prefetch": 1}
    (prefetch,) = [tree.node_frame(n) for n in work if tree.node_frame(n).name.endswith("prefetch")]
    # named as the model names the unit, without the wrapper's segment
    assert prefetch.detail == "issued in 0" and not prefetch.backward


def test_fsdps_own_exception_reaches_the_caller_once_and_unchanged(tmp_path, runtime):
    module, calls = runtime
    handle = Handle("unit")
    handle.fail = True
    root = Unit(None, Unit(handle, nn.Linear(2, 2)))
    with dc_torch.profile(logdir=str(tmp_path), steps=StepRange(start=0, count=1), **QUIET) as prof:
        with pytest.raises(Boom) as caught:
            module._pre_forward(root, handle, None, root, (), {})
    assert caught.value.args == ("from FSDP",) and caught.value.__context__ is None
    assert calls == [("pre_forward", "unit"), ("unshard", "unit")]  # each once
    assert not prof.session.disabled
    assert torch.ones(1).item() == 1.0
