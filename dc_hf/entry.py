"""What dc_hf tells DeepContext's core about itself: the object of its
``deepcontext.adapters`` entry point (pyproject.toml). Imports no transformers."""

from __future__ import annotations

from dc_core.record.adapter import AdapterPackage

ADAPTER = AdapterPackage(
    name="hf", package="dc_hf", order=3, drivers={"transformers.trainer": "dc_hf.launch:install"}
)
