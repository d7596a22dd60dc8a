"""Adapters are found by entry point (``deepcontext.adapters``), and the core names none of them."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

import dc_core
from dc_core.record.adapter import Adapter, AdapterPackage, adapter_packages, load

ADAPTER_PACKAGES = ("dc_torch", "dc_jax", "dc_lightning", "dc_hf")


def test_every_adapter_package_is_found_by_its_entry_point():
    found = adapter_packages()
    # richest first
    assert [p.package for p in found] == [
        "dc_lightning",
        "dc_torch",
        "dc_jax",
        "dc_hf",
    ]
    assert all(isinstance(p, AdapterPackage) for p in found)


def test_the_drivers_are_the_ones_deepcontext_run_installed_by_name():
    from dc_core.launch.child import Launch, drivers
    from dc_core.launch.settings import RunSettings

    targets = {module: target for p in adapter_packages() for module, target in p.drivers.items()}
    assert targets == {
        "torch": "dc_torch.launch:install",
        "lightning.pytorch.trainer.trainer": "dc_lightning.launch:install",
        "pytorch_lightning.trainer.trainer": "dc_lightning.launch:install",
        "transformers.trainer": "dc_hf.launch:install",
        "jax": "dc_jax.launch:install",
        "flax.nnx": "dc_jax.launch:install_nnx",
    }
    launch = Launch(RunSettings(logdir="unused", run="unused"))
    assert set(drivers(launch)) == set(targets)


def test_time_loops_and_demos_name_what_exists():
    loops = [p.time_loop for p in adapter_packages() if p.time_loop]
    # torch first, as before
    assert loops == [
        ("torch", "dc_torch.loop:Profiler"),
        ("jax", "dc_jax.loop:Profiler"),
    ]
    for package in adapter_packages():
        for target in [
            *package.drivers.values(),
            *(t[1] for t in [package.time_loop] if t),
            *([package.demo.run] if package.demo else []),
        ]:
            assert importlib.util.find_spec(target.partition(":")[0]) is not None, target


def test_a_loaded_time_loop_drives_its_frameworks_adapter():
    pytest.importorskip("torch")
    from dc_torch.adapter import TorchAdapter

    profiler = load("dc_torch.loop:Profiler")(None, enabled=False)
    assert isinstance(profiler.adapter, TorchAdapter) and isinstance(profiler.adapter, Adapter)


def _imported_names(tree: ast.AST) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
        # import_module("dc_torch.demo"), f"dc_{x}" aside
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.append(node.args[0].value)
    return names


def test_the_core_imports_no_adapter_package():
    core = Path(dc_core.__file__).parent
    offenders = []
    for path in sorted(core.rglob("*.py")):
        for name in _imported_names(ast.parse(path.read_text(encoding="utf-8"))):
            if name.split(".")[0] in ADAPTER_PACKAGES or name.startswith("dc_{"):
                offenders.append(f"{path.relative_to(core)}: {name}")
    assert offenders == []
