"""Plugin identity, shared by the backend and the loader.

The plugin name is the directory name of the profile files
(``<run>/plugins/deepcontext/...``), so the tab and the files cannot disagree.
"""

from __future__ import annotations

from ..store.logdir import PLUGIN_NAME

#: Bumped when the JSON the routes return changes incompatibly; the frontend
#: checks it against the one it was written for.
DATA_VERSION = 1

TAB_NAME = "DeepContext"

#: Metrics the views offer, in selector order, with their display names.
METRICS = {
    "cpu_time_ns": "CPU time",
    "device_time_ns": "Device time",
    "count": "Count",
    "samples": "Samples",
    "alloc_bytes": "Alloc bytes",
    "flops": "FLOPs",
}

__all__ = ["PLUGIN_NAME", "DATA_VERSION", "TAB_NAME", "METRICS"]
