"""What dc_lightning tells DeepContext's core about itself: the object of its
``deepcontext.adapters`` entry point (pyproject.toml). Imports no Lightning."""

from __future__ import annotations

from dc_core.record.adapter import AdapterPackage, Demo

ADAPTER = AdapterPackage(
    name="lightning",
    package="dc_lightning",
    order=0,
    drivers={
        "lightning.pytorch.trainer.trainer": "dc_lightning.launch:install",
        "pytorch_lightning.trainer.trainer": "dc_lightning.launch:install",
    },
    demo=Demo(
        run="dc_lightning.demo:demo", needs=(("lightning", "pytorch_lightning"),), extra="lightning"
    ),
)
