"""What dc_torch tells DeepContext's core about itself: the object of its
``deepcontext.adapters`` entry point (pyproject.toml). Imports no torch."""

from __future__ import annotations

from dc_core.record.adapter import AdapterPackage, Demo

ADAPTER = AdapterPackage(
    name="torch",
    package="dc_torch",
    order=1,
    drivers={"torch": "dc_torch.launch:install"},
    time_loop=("torch", "dc_torch.loop:Profiler"),
    demo=Demo(run="dc_torch.demo:run_demo", needs=(("torch",),), extra="torch"),
)
