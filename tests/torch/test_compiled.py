"""torch.compile with the deepcontext backend (Inductor's C++ backend on CPU: slow)."""

from __future__ import annotations

import importlib.metadata
import os

import pytest
import torch

import dc_torch
from dc_core.model.opnames import op_name
from dc_core.record.config import StepRange
from dc_torch.compiled import deepcontext_backend
from tests.torch.conftest import find, only_profile
from tests.torch.models import TwoLine, train


@pytest.fixture
def inductor_cache(monkeypatch):
    """A persistent Inductor cache, so reruns skip the C++ compile."""
    path = os.path.join(os.path.expanduser("~"), ".cache", "deepcontext-tests", "inductor")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", path)
    return path


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Using `torch.compile\\(module\\)` when there are global hooks")
def test_compiled_region_under_calling_line_with_sources(tmp_path, inductor_cache):
    torch._dynamo.reset()
    model = torch.compile(TwoLine(), backend=deepcontext_backend)
    with dc_torch.profile(
        logdir=str(tmp_path),
        steps=StepRange(start=2, count=3),
        cpu_sampling_hz=0,
        system_interval_ms=0,
    ) as prof:
        train(model, 6, prof)
    tree = only_profile(tmp_path).tree
    regions = find(tree, lambda fs: fs[0].name == "forward" and fs[-1].kind == "compiled")
    assert len(regions) == 1
    region = regions[0]
    assert tree.value(region, "count") == 3 and tree.value(region, "cpu_time_ns") > 0
    assert "(inductor)" in tree.node_frame(region).name
    caller = tree.node_frame(tree.parent[region])
    assert caller.kind == "python" and caller.file.endswith("tests/torch/models.py")
    # inside: the graph's operations under the modules and lines they came from
    softmax = find(tree, lambda fs: op_name(fs[-1].name) == op_name("torch.softmax"))
    inside = [n for n in softmax if region in tree.path(n)]
    assert len(inside) == 1 and tree.value(inside[0], "count") == 3
    path = tree.path_frames(inside[0])
    assert path[-2].kind == "python" and path[-2].name == "sharpen"
    linear = [
        n
        for n in range(len(tree))
        if region in tree.path(n) and tree.node_frame(n).kind == "module"
    ]
    assert [(tree.node_frame(n).name, tree.node_frame(n).detail) for n in linear] == [
        ("lin", "Linear")
    ]
    # the compiled backward, flagged, under the same line as the region
    backward = find(
        tree,
        lambda fs: (
            fs[0].name == "backward"
            and fs[-1].backward
            and fs[-1].detail == "CompiledFunctionBackward"
        ),
    )
    assert len(backward) == 1 and tree.value(backward[0], "count") == 3
    assert tree.path_frames(backward[0])[1:-1] == tree.path_frames(region)[1:-1]


def test_backend_is_registered_by_name():
    names = {
        e.name: e.value for e in importlib.metadata.entry_points(group="torch_dynamo_backends")
    }
    if "deepcontext" not in names:
        pytest.skip("package not installed (pip install -e .): entry points not registered")
    assert names["deepcontext"] == "dc_torch.compiled:deepcontext_backend"


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Using `torch.compile\\(module\\)` when there are global hooks")
@pytest.mark.parametrize("mode", ["lightweight", "comprehensive"])
def test_regression_opening_a_window_recompiled_the_model(tmp_path, inductor_cache, mode):
    """The operator mode on torch's function-mode stack failed dynamo's guard,
    so a model compiled before the window recompiled in its first step (and
    dynamo converted the module hooks' frames). Now the mode stands aside
    around compiled modules and the hooks are never traced."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = torch.compile(TwoLine(), backend=deepcontext_backend)
    x = torch.randn(4, 8)
    model(x).sum().backward()  # compiled before any window
    graphs = counters["stats"]["unique_graphs"]
    with dc_torch.profile(
        logdir=str(tmp_path),
        steps=StepRange(start=1, count=2),
        cpu_sampling_hz=0,
        system_interval_ms=0,
        mode=mode,
    ) as prof:
        prof.start()
        for _ in range(4):
            model(x).sum().backward()
            prof.step()
    assert counters["stats"]["unique_graphs"] == graphs
    tree = only_profile(tmp_path).tree
    (region,) = find(tree, lambda fs: fs[0].name == "forward" and fs[-1].kind == "compiled")
    assert tree.value(region, "count") == 2
