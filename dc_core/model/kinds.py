"""The profile's vocabulary, in one place: frame kinds, phases, metrics,
severities and system-monitor series.

Everything that names one of these imports it from here: the collectors (the
native constants are checked against ``KINDS`` by a test), the tree and the
file format, the analyzer, the CLI and the TensorBoard tab (``/runs`` sends
`vocabulary()` to the JS, which lists none of it itself).
"""

from __future__ import annotations

from typing import Any

#: Frame kinds; the index is the kind's number in collectors and files.
KINDS = ("root", "python", "module", "operator", "native", "kernel", "phase", "compiled")

#: Kinds that are a place in the user's program, under which operators are
#: attributed: a line of Python, a module, a compiled region.
CONTEXT_KINDS = ("python", "module", "compiled")

#: Phase frame names, in the order reports list them.
PHASES = (
    "forward",
    "backward",
    "optimizer",
    "eval",
    "dataloader",
    "compile",
    "other",
    "unattributed",
)

#: Metrics, in the order views offer them: name -> (unit, display label).
METRICS = {
    "cpu_time_ns": ("ns", "CPU time"),
    "device_time_ns": ("ns", "Device time"),
    "count": ("1", "Count"),
    "samples": ("1", "Samples"),
    "alloc_bytes": ("bytes", "Alloc bytes"),
    "flops": ("1", "FLOPs"),
}
UNITS = {name: unit for name, (unit, _) in METRICS.items()}

#: Finding severities, most severe first.
SEVERITIES = ("critical", "warning", "info")

#: System-monitor series: name -> (unit, one value per device/core per sample).
#: ``Collector.monitor_samples()`` returns ``t_ns`` and then these, in this order.
MONITOR_SERIES = {
    "cpu_percent": ("%", True),
    "rss_bytes": ("bytes", False),
    "mem_used_percent": ("%", False),
    "disk_read_bytes": ("bytes", False),
    "disk_write_bytes": ("bytes", False),
    "net_rx_bytes": ("bytes", False),
    "net_tx_bytes": ("bytes", False),
    "gpu_util_percent": ("%", True),
    "gpu_mem_bytes": ("bytes", True),
}
MONITOR_COLUMNS = ("t_ns", *MONITOR_SERIES)


def kind_id(name: str) -> int:
    """Number of a frame kind: ``kind_id("operator") == 3``; ``ValueError`` if unknown."""
    return KINDS.index(name)


def vocabulary() -> dict[str, Any]:
    """The vocabulary as JSON for the tab: kinds, context kinds, metrics, severities."""
    return {
        "kinds": list(KINDS),
        "context_kinds": list(CONTEXT_KINDS),
        "metrics": [{"name": n, "unit": u, "label": label} for n, (u, label) in METRICS.items()],
        "severities": list(SEVERITIES),
    }
