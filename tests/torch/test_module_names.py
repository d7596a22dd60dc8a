"""How module frames are named: from a naming root (Lightning's module), and
from dynamo's ``nn_module_stack`` inside compiled regions."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

import dc_torch
from dc_core.record.config import StepRange
from dc_torch.compiled import compile_backend
from dc_torch.source import module_frames, module_path
from dc_torch.state import Frames
from tests.torch.conftest import only_profile


class _Interning:
    """What ``Frames`` uses of a session: ``frame`` interning ``(kind, name, file, line, detail)``."""

    def __init__(self):
        self.frames: list[tuple] = []

    def frame(self, *frame):
        if frame not in self.frames:
            self.frames.append(frame)
        return self.frames.index(frame)


class _Lit(nn.Module):  # a LightningModule as Lightning's examples write it
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2))


class _Wrapper(nn.Module):  # what a strategy wraps it in (DDP's ``module``)
    def __init__(self, inner):
        super().__init__()
        self.module = inner


def _names(frames, session, module, root):
    return session.frames[frames.module(module, root)][1:5:3]


def test_regression_modules_named_from_the_naming_root_not_the_first_called():
    lit = _Lit()
    wrapper, loss = _Wrapper(lit), nn.MSELoss()
    session = _Interning()
    frames = Frames(session)
    # today's rule without a naming root: the outermost module called is the root
    assert _names(frames, session, lit.net[2], lit.net) == ("2", "Linear")
    assert _names(frames, session, lit.net, lit.net) == ("Sequential", "Sequential")
    frames.naming_root = lit
    assert _names(frames, session, lit.net, lit.net) == ("net", "Sequential")
    assert _names(frames, session, lit.net[2], lit.net) == ("net.2", "Linear")
    # called through a wrapper: the LightningModule's names, not `module.net.0`
    assert _names(frames, session, lit.net[0], wrapper) == ("net.0", "Linear")
    assert _names(frames, session, lit, wrapper) == ("_Lit", "_Lit")
    # outside the naming root: as without it, from the module called first
    assert _names(frames, session, wrapper, wrapper) == ("_Wrapper", "_Wrapper")
    assert _names(frames, session, loss, lit.net) == ("MSELoss", "MSELoss")
    assert _names(frames, session, loss, loss) == ("MSELoss", "MSELoss")


def test_wrapper_segments_are_left_out_of_module_names():
    """FSDP1's units and activation checkpointing wrap a module in one of their
    own, which adds a segment to ``named_modules()``'s paths and none to the
    model's state dict: module frames go by the state dict's names."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    model = nn.Sequential(checkpoint_wrapper(nn.Sequential(nn.Linear(2, 2), nn.ReLU())))
    assert "0._checkpoint_wrapped_module.0" in dict(model.named_modules())
    session = _Interning()
    frames = Frames(session)
    inner = model[0]._checkpoint_wrapped_module
    assert _names(frames, session, inner[0], model) == ("0.0", "Linear")
    assert _names(frames, session, inner, model) == ("0", "Sequential")
    assert _names(frames, session, model[0], model) == ("0", "CheckpointWrapper")
    assert {n.rpartition(".")[0] for n in model.state_dict()} == {"0.0"}


@pytest.mark.parametrize(
    "source, path",
    [
        ("L['s'].up", "up"),  # a helper's argument: was `L['s.up`
        ("L['self'].inner.blocks.0", "inner.blocks.0"),  # torch >= 2.5 (this one)
        ("L['self']._modules['blocks']._modules['0']", "blocks.0"),  # earlier torch
        ("getattr(L['self'].blocks, '0')", "blocks.0"),
        ("L['self'].layers[0].d['a']", "layers.0.d.a"),
        ("G['model'].up", "up"),
        ("L['mod']", ""),  # the module the compiled function got, called itself
        ("not a source", "not a source"),
    ],
)
def test_regression_module_path_from_dynamo_source_names(source, path):
    assert module_path(source) == path


def test_module_frames_name_the_root_by_its_class():
    node = SimpleNamespace(
        meta={
            "nn_module_stack": {
                "1": ("L['m']", nn.Sequential),
                "2": ("L['m'].up", nn.Linear),
                "3@1": ("L['m'].up", nn.Linear),
            }
        }
    )
    assert [(f[1], f[4]) for f in module_frames(node)] == [
        ("Sequential", "Sequential"),
        ("up", "Linear"),
        ("up", "Linear"),
    ]


class _Holder(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(8, 8)


def _helper(s, x):
    return torch.relu(s.up(x))


def test_regression_compiled_helper_names_the_module_of_its_argument(tmp_path):
    """A compiled function calling a module it got as ``s``: dynamo's source
    ``L['s'].up`` was read as ``L['s.up``."""
    torch._dynamo.reset()
    holder, compiled = _Holder(), torch.compile(_helper, backend=compile_backend("eager"))
    with dc_torch.profile(
        logdir=str(tmp_path),
        steps=StepRange(start=1, count=2),
        cpu_sampling_hz=0,
        system_interval_ms=0,
    ) as prof:
        for _ in range(3):
            compiled(holder, torch.randn(4, 8)).sum().backward()
            prof.step()
    torch._dynamo.reset()
    tree = only_profile(tmp_path).tree
    modules = tree.find_all(lambda f: f.kind == "module")
    assert {(tree.node_frame(n).name, tree.node_frame(n).detail) for n in modules} == {
        ("up", "Linear")
    }
    (up,) = modules
    assert tree.path_frames(up)[-2].kind == "compiled"
    (linear,) = [n for n in tree.find_all(lambda f: f.kind == "operator") if up in tree.path(n)]
    inside = tree.path_frames(linear)[-3:]
    assert [(f.kind, f.name) for f in inside[:2]] == [("module", "up"), ("python", "_helper")]
    assert "linear" in inside[2].name and tree.value(linear, "count") == 2
