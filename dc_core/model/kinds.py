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
#: ``sharding`` is a sharded-training runtime's own work under the module it
#: serves (FSDP's parameter gathering, gradient reduction, resharding): the
#: overhead of sharding, kept apart from the model's operators.
KINDS = (
    "root",
    "python",
    "module",
    "operator",
    "native",
    "kernel",
    "phase",
    "compiled",
    "sharding",
)

#: Kinds that are a place in the user's program, under which operators are
#: attributed: a line of Python, a module, a compiled region.
CONTEXT_KINDS = ("python", "module", "compiled")

#: The namespace of the profiler's own operators (``native/opcapture.cc``
#: names a cold window's call-path resolving ``deepcontext::call_paths``):
#: its time, never the user's to change.
OWN_OPERATORS = "deepcontext::"

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

#: The memory family, per node and exclusive like the others, in bytes: what a
#: context allocated and freed in the window, and what it held at the peak.
#: Per category ``peak_live_bytes.<category>``; another device than the
#: window's main one adds ``@<device>`` (``peak_live_bytes@cpu``).
MEMORY_METRICS = ("alloc_bytes", "free_bytes", "peak_live_bytes")

#: What the bytes live at a window's memory peak were, in the order reports
#: list them: the metric ``peak_live_bytes.<category>`` per node, which the
#: node's ``peak_live_bytes`` splits into.
MEMORY_CATEGORIES = (
    "parameter",
    "gradient",
    "optimizer_state",
    "saved_for_backward",
    "temporary",
    "input",
)

#: Metrics that are a state at one moment of the window (its memory peak),
#: not a total over its steps: a diff compares them as they are, never per step.
AT_PEAK_METRICS = ("peak_live_bytes",)


def base_metric(name: str) -> str:
    """A metric's family: ``peak_live_bytes.gradient@cuda:1`` → ``peak_live_bytes``
    (a category after ``.``, another device after ``@``)."""
    return name.partition("@")[0].partition(".")[0]


def at_peak(name: str) -> bool:
    """Whether a metric is a state at the window's memory peak (`AT_PEAK_METRICS`)."""
    return base_metric(name) in AT_PEAK_METRICS


def unit_of(name: str) -> str:
    """A metric's unit by its name: ``peak_live_bytes.gradient@cpu`` → ``bytes``; ``1`` if unknown."""
    base = base_metric(name)
    return UNITS.get(base) or ("bytes" if base in MEMORY_METRICS else "1")


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
