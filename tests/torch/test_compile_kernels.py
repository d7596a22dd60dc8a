"""Inductor's kernels under the source lines they came from (C++ backend on CPU: slow)."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest
import torch

import dc_torch
from dc_core.collect.collector import (
    FLAG_BACKWARD,
    INHERIT,
    INNERMOST,
    KIND_KERNEL,
    KIND_MODULE,
    KIND_PYTHON,
)
from dc_core.record.config import StepRange
from dc_torch.compiled import deepcontext_backend
from dc_torch.inductor import Generated, compile_fx_kwargs, kernel_sites
from tests.torch.conftest import find, only_profile
from tests.torch.models import TwoLine, train

MODELS = os.path.join(os.path.dirname(__file__), "models.py")


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    """One compiled TwoLine trained 6 steps with a window over steps 2-4; the
    generated modules' kernel globals seen before, during and after the window."""
    logdir = tmp_path_factory.mktemp("compile_kernels")
    regions = []

    def backend(gm, example_inputs, **kwargs):
        compiled = deepcontext_backend(gm, example_inputs, **kwargs)
        regions.append(compiled._deepcontext_region)
        return compiled

    def kernels():
        return {
            (id(g), name): g.namespace[name]
            for r in regions
            for g in r.generated
            for name in g.namespace
            if name.startswith(("cpp_", "triton_", "extern_kernels"))
        }

    seen = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(
            "TORCHINDUCTOR_CACHE_DIR",
            os.path.join(os.path.expanduser("~"), ".cache", "deepcontext-tests", "inductor"),
        )
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = torch.compile(TwoLine(), backend=backend)
        with dc_torch.profile(
            logdir=str(logdir),
            steps=StepRange(start=2, count=3),
            cpu_sampling_hz=0,
            system_interval_ms=0,
        ) as prof:
            for step in range(6):
                losses = train(model, 1, prof, seed=step)
                seen[step] = (kernels(), losses)
        torch._dynamo.reset()
    return SimpleNamespace(tree=only_profile(logdir).tree, regions=regions, seen=seen)


def _kernel_nodes(tree, name_prefix, backward):
    return find(
        tree,
        lambda fs: (
            fs[-1].kind == "kernel"
            and fs[-1].name.startswith(name_prefix)
            and fs[-1].backward == backward
        ),
    )


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Using `torch.compile\\(module\\)` when there are global hooks")
def test_fused_kernel_under_the_helper_line_inside_the_compiled_frame(profiled):
    tree = profiled.tree
    fused = [
        n for n in _kernel_nodes(tree, "cpp_fused_", False) if "softmax" in tree.node_frame(n).name
    ]
    assert len(fused) == 1
    node = fused[0]
    assert tree.value(node, "count") == 3 and tree.value(node, "cpu_time_ns") > 0
    assert tree.node_frame(node).detail == "cpu"
    path = tree.path_frames(node)
    assert path[0].name == "forward"
    helper = path[-2]
    assert (helper.kind, helper.name, helper.file, helper.line) == ("python", "sharpen", MODELS, 10)
    assert any(f.kind == "compiled" and f.name.endswith("(inductor)") for f in path)
    # beside the graph operations of the same line: one node for the line, ops and kernel under it
    softmax = [
        n
        for n in find(tree, lambda fs: fs[-1].name == "torch.softmax" and fs[0].name == "forward")
        if tree.node_frame(tree.parent[n]).name == "sharpen"
    ]
    assert [tree.parent[n] for n in softmax] == [tree.parent[node]]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Using `torch.compile\\(module\\)` when there are global hooks")
def test_matmul_kernel_under_the_linear_module_and_its_line(profiled):
    tree = profiled.tree
    (addmm,) = _kernel_nodes(tree, "extern_kernels.addmm", False)
    assert tree.value(addmm, "count") == 3 and tree.value(addmm, "cpu_time_ns") > 0
    module, line = tree.path_frames(addmm)[-3:-1]
    assert (module.kind, module.name, module.detail) == ("module", "lin", "Linear")
    assert (line.name, line.file, line.line) == ("forward", MODELS, 21)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Using `torch.compile\\(module\\)` when there are global hooks")
def test_backward_kernels_flagged_under_the_same_forward_sources(profiled):
    tree = profiled.tree
    backward = _kernel_nodes(tree, "cpp_fused_", True) + _kernel_nodes(
        tree, "extern_kernels.mm", True
    )
    assert len(backward) >= 2
    by_name = {tree.node_frame(n).name: n for n in backward}
    assert all(tree.path_frames(n)[0].name == "backward" for n in backward)
    assert all(tree.value(n, "count") == 3 and tree.value(n, "cpu_time_ns") > 0 for n in backward)
    softmax_bwd = next(n for name, n in by_name.items() if "softmax_backward" in name)
    assert [(f.name, f.line) for f in tree.path_frames(softmax_bwd)[-3:-1]] == [
        ("forward", 22),
        ("sharpen", 10),
    ]
    mm = by_name["extern_kernels.mm"]
    assert [(f.kind, f.name) for f in tree.path_frames(mm)[-3:-1]] == [
        ("module", "lin"),
        ("python", "forward"),
    ]
    # under the region's autograd node, which sits where the forward region's caller is
    region_op = tree.path_frames(mm)[-4]
    assert region_op.backward and region_op.detail == "CompiledFunctionBackward"


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Using `torch.compile\\(module\\)` when there are global hooks")
def test_kernels_swapped_only_inside_the_window_and_results_unchanged(profiled):
    def shimmed(kernels):
        return {
            key
            for key, k in kernels.items()
            if hasattr(k, "__wrapped__") or type(k).__name__ == "_Namespace"
        }

    seen = profiled.seen
    # seen after each step's ``prof.step()``: the window holds steps 2-4, so after steps 2 and 3 it is open
    for step in (2, 3):
        # the window's region: its kernels timed while the window is open
        assert shimmed(seen[step][0])
    for step in (0, 1, 4, 5):
        # outside: the generated module's own globals
        assert seen[step][0] and not shimmed(seen[step][0])
    generated = [g for r in profiled.regions for g in r.generated]
    assert not any(g.saved for g in generated)
    # the shims change nothing: the same model and data without profiling give the same losses
    torch._dynamo.reset()
    torch.manual_seed(0)
    plain = torch.compile(TwoLine(), backend=deepcontext_backend)
    losses = [train(plain, 1, seed=step)[0] for step in range(6)]
    torch._dynamo.reset()
    assert losses == pytest.approx([seen[step][1][0] for step in range(6)], rel=1e-6)


def _node(name, trace="", modules=None):
    meta = {"stack_trace": trace} if trace else {}
    if modules:
        meta["nn_module_stack"] = modules
    return SimpleNamespace(name=name, meta=meta)


def _trace(*frames):
    return "".join(
        f'  File "{file}", line {line}, in {func}\n    code\n' for file, line, func in frames
    )


def test_kernel_sites_in_call_order_with_common_prefix_and_trace_fallback():
    lin = {"1": ("L['self'].lin", torch.nn.Linear)}
    at21 = _trace(("/u/m.py", 21, "forward"))
    at22 = _trace(("/u/m.py", 22, "forward"), ("/u/m.py", 10, "sharpen"))
    nodes = [
        _node("addmm", at21, lin),
        _node("mm_1", at21, lin),
        _node("exp", at22),
        _node("mul", at21, lin),
    ]
    graph = SimpleNamespace(graph=SimpleNamespace(nodes=nodes))
    mapping = {
        "cppCodeToPost": {
            "extern_kernels.mm:3": ["mm_1"],
            "extern_kernels.mm:1": ["addmm"],
            "cpp_fused_exp_mul_0:2": ["exp", "mul"],  # two lines fused: placed at what they share
            "cpp_fused_gone_1:4": [
                "renamed_by_a_pass"
            ],  # names the graph lost: read the stack traces
        }
    }
    traces = {"cpp_fused_gone_1:4": [at21]}
    compiled = SimpleNamespace(
        inductor_provenance_mapping_str=json.dumps(mapping),
        inductor_provenance_stack_traces_str=json.dumps(traces),
    )
    sites = kernel_sites(graph, compiled)
    module = (KIND_MODULE, "lin", "", 0, "Linear")
    line21 = (KIND_PYTHON, "forward", "/u/m.py", 21, "")
    assert sites["extern_kernels.mm"] == [[module, line21], [module, line21]]
    assert sites["cpp_fused_exp_mul_0"] == [[]]
    assert sites["cpp_fused_gone_1"] == [[module, line21]]
    assert list(sites) == ["extern_kernels.mm", "cpp_fused_exp_mul_0", "cpp_fused_gone_1"]


class _FakeHub:
    """What the shims use of the hub: frames, scopes, the device tracer, the
    window's capture, ``active``, ``fail``."""

    def __init__(self):
        self.active = True
        self.entered = []
        self.frames = {}
        self.session = SimpleNamespace(frame=lambda *f: self.frames.setdefault(f, len(self.frames)))
        self.collector = SimpleNamespace(enter=self._enter, exit=lambda: None, depth=lambda: 1)
        self.device = SimpleNamespace(on=False)
        self.window = SimpleNamespace(capture="native")

    def _enter(self, path, parent, capture, user_depth):
        # the path is the kernel's whole place; it adds no Python frames, so no stack walk for its depth
        assert (parent, capture, user_depth) == (INNERMOST, False, INHERIT)
        self.entered.append(path)
        return 0

    def fail(self, exc, where):
        raise AssertionError(f"the profiler failed in {where}: {exc!r}")


def _generated(namespace):
    line = (KIND_PYTHON, "forward", "/u/m.py", 21, "")
    other = (KIND_PYTHON, "forward", "/u/m.py", 30, "")
    sites = {"cpp_fused_0": [[line]], "extern_kernels.mm": [[line], [other]]}
    return Generated(namespace, sites, "cpu", backward=True)


def test_shims_time_each_call_site_in_turn_and_restore_the_originals():
    extern = SimpleNamespace(mm=lambda a, b: a * b, addmm=lambda a: a)
    fused = lambda x: x + 1
    namespace = {"cpp_fused_0": fused, "extern_kernels": extern}
    hub = _FakeHub()
    generated = _generated(namespace)
    generated.swap(hub)
    assert namespace["cpp_fused_0"] is not fused and namespace["extern_kernels"] is not extern
    assert namespace["cpp_fused_0"](1) == 2
    assert [namespace["extern_kernels"].mm(2, 3) for _ in range(3)] == [6, 6, 6]
    assert namespace["extern_kernels"].addmm is extern.addmm  # not a recorded kernel: untouched
    kernel_mm = hub.frames[(KIND_KERNEL, "extern_kernels.mm", "", 0, "cpu", FLAG_BACKWARD)]
    line21 = hub.frames[(KIND_PYTHON, "forward", "/u/m.py", 21, "")]
    line30 = hub.frames[(KIND_PYTHON, "forward", "/u/m.py", 30, "")]
    assert hub.entered[1:] == [(line21, kernel_mm), (line30, kernel_mm), (line21, kernel_mm)]
    hub.active = False  # a failed profiler: straight through
    assert namespace["cpp_fused_0"](1) == 2 and len(hub.entered) == 4
    generated.restore()
    assert namespace == {"cpp_fused_0": fused, "extern_kernels": extern}


def test_shared_generated_module_regression_originals_back_whatever_the_restore_order():
    """Inductor gives graphs with identical code one module: two ``Generated`` share
    its globals, and a second swap must not save the first one's shims as originals."""
    fused, extern = (lambda x: x), SimpleNamespace(mm=lambda a, b: a)
    for order in ((0, 1), (1, 0)):
        namespace = {"cpp_fused_0": fused, "extern_kernels": extern}
        pair = [_generated(namespace), _generated(namespace)]
        hub = _FakeHub()
        pair[0].swap(hub)
        pair[1].swap(hub)
        for i in order:
            pair[i].restore()
        assert namespace == {"cpp_fused_0": fused, "extern_kernels": extern}


def test_torch_compile_mode_and_options_become_inductor_config_patches():
    assert compile_fx_kwargs({}) == {}
    kwargs = compile_fx_kwargs(
        {"mode": "max-autotune-no-cudagraphs", "options": {"trace.enabled": False}}
    )
    assert kwargs == {
        "config_patches": {
            "max_autotune": True,
            "coordinate_descent_tuning": True,
            "trace.enabled": False,
        }
    }
