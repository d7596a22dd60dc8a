"""FSDP2's parameter-group methods, wrapped for a window (dc_torch.sharding):
each runs once as a ``sharding`` frame, the group's own exception reaches the
caller unchanged, an error of ours turns the profiler off and the methods are
put back. A stand-in group class takes FSDP's place in ``sys.modules``; the
real FSDP2 runs in tests/distributed/test_fsdp.py."""

from __future__ import annotations

import logging
import sys
import types

import pytest
import torch

import dc_torch
from dc_core.record.config import StepRange
from dc_torch import sharding
from tests.torch.conftest import only_profile

QUIET = {"cpu_sampling_hz": 0, "system_interval_ms": 0}


class Boom(Exception):
    pass


class Group:
    """What the wrapper sees of ``FSDPParamGroup``: its methods and module path."""

    _module_fqn = "blocks.0"

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.fail = False

    def pre_forward(self, module, args, kwargs):
        self.calls.append("pre_forward")
        torch.ones(4).add(1)
        if self.fail:
            raise Boom("from the group")
        return args, kwargs

    def post_forward(self, module, input, output):
        self.calls.append("post_forward")
        return output

    @staticmethod
    def _prefetch_unshard(target, pass_type):
        target.calls.append(f"{pass_type}_prefetch")


@pytest.fixture
def group_class(monkeypatch):
    module = types.ModuleType(sharding.GROUPS)
    module.FSDPParamGroup = Group
    monkeypatch.setitem(sys.modules, sharding.GROUPS, module)
    plain = dict(vars(Group))
    yield Group
    # every method is put back as it was when the window closed
    assert {k: v for k, v in vars(Group).items()} == plain


def test_each_method_runs_once_as_a_sharding_frame(tmp_path, group_class):
    group, model = group_class(), torch.nn.Linear(4, 4)
    with dc_torch.profile(logdir=str(tmp_path), steps=StepRange(start=0, count=1), **QUIET):
        assert group.pre_forward(model, (1,), {}) == ((1,), {})
        Group._prefetch_unshard(group, "forward")
        group.post_forward(model, (), "out")
    assert group.calls == ["pre_forward", "forward_prefetch", "post_forward"]
    tree = only_profile(tmp_path).tree
    frames = {tree.node_frame(n).name: n for n in tree.find_all(lambda f: f.kind == "sharding")}
    assert set(frames) == {"FSDP::pre_forward", "FSDP::forward_prefetch", "FSDP::post_forward"}
    assert all(tree.value(n, "count") == 1 for n in frames.values())
    # with no module around them, under the lines that called them
    for node in frames.values():
        caller = tree.node_frame(tree.parent[node])
        assert (
            caller.kind == "python"
            and caller.name == "test_each_method_runs_once_as_a_sharding_frame"
        )
    # a prefetch issued outside any group's work names no issuer
    assert tree.node_frame(frames["FSDP::forward_prefetch"]).detail == ""


def test_the_groups_own_exception_reaches_the_caller_unchanged(tmp_path, group_class):
    group, model = group_class(), torch.nn.Linear(4, 4)
    group.fail = True
    with dc_torch.profile(logdir=str(tmp_path), steps=StepRange(start=0, count=1), **QUIET) as prof:
        with pytest.raises(Boom) as caught:
            group.pre_forward(model, (), {})
    assert caught.value.args == ("from the group",) and caught.value.__context__ is None
    assert group.calls == ["pre_forward"]  # once
    assert not prof.session.disabled


def test_an_error_of_ours_turns_the_profiler_off_and_the_group_runs_once(
    tmp_path, group_class, monkeypatch, caplog
):
    def broken(self, label, backward, detail=""):
        raise RuntimeError("sharding bug")

    monkeypatch.setattr(sharding.ShardingHooks, "_frame", broken)
    group, model = group_class(), torch.nn.Linear(4, 4)
    with caplog.at_level(logging.ERROR, logger="deepcontext"):
        with dc_torch.profile(
            logdir=str(tmp_path), steps=StepRange(start=0, count=2), **QUIET
        ) as prof:
            assert group.pre_forward(model, (2,), {}) == ((2,), {})
            group.pre_forward(model, (3,), {})  # the methods are FSDP's own again
            prof.step()
    assert group.calls == ["pre_forward", "pre_forward"]
    assert prof.session.disabled
    assert sum("disabled itself" in r.getMessage() for r in caplog.records) == 1
