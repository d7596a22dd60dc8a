"""Typed contract of the collector.

`dc_core._native.Collector` (C++, built from `native/`) and
`dc_core.reference.Collector` (pure Python) implement exactly this interface;
`tests/core/test_collector.py` runs one suite against both.

Model
-----
* A *frame* is an interned identity ``(kind, name, file, line, detail, flags)``
  with a stable integer id (``0 ..``). Frames and strings survive ``reset()``,
  so adapters may cache frame ids for the life of the collector.
* A *node* is a frame under a parent node. Node ``0`` is the root (its frame is
  the ``KIND_ROOT`` frame with an empty name, frame id ``0``). ``child(parent,
  frame)`` finds or inserts.
* Metrics are int64 columns keyed by node, registered by name once with a unit.
  Values are **exclusive**. ``cpu_time_ns`` (ns) and ``count`` (1) and
  ``samples`` (1) are pre-registered with ids ``METRIC_CPU_TIME``,
  ``METRIC_COUNT`` and ``METRIC_SAMPLES``.
* Scopes are per thread: ``enter`` pushes onto the calling thread's stack,
  ``exit`` pops. On ``exit`` the scope's node gets ``count += 1`` and
  ``cpu_time_ns += elapsed - time spent in nested scopes`` (exclusive time).
* Python call paths: the calling thread's Python stack, outermost first, as
  ``python`` frames ``(name=co_qualname, file=co_filename, line=current line)``.
  Frames whose file starts with a registered skip prefix are left out (the
  profiler's own and the framework's internals). Each scope remembers the
  *user depth* at its entry (the stack depth of the innermost non-skipped
  frame); a capture inside a scope contains only frames deeper than that, which
  is how module frames interleave with Python frames.
* Thread safety: every method is called with the GIL held (the GIL is the
  lock; no extra lock on the hot path). The sampler and the system monitor are
  background threads owned by the collector.
"""

from typing import Sequence

KIND_ROOT: int  # 0
KIND_PYTHON: int  # 1
KIND_MODULE: int  # 2
KIND_OPERATOR: int  # 3
KIND_NATIVE: int  # 4
KIND_KERNEL: int  # 5
KIND_PHASE: int  # 6
KIND_COMPILED: int  # 7

FLAG_BACKWARD: int  # 1

METRIC_CPU_TIME: int  # 0, "cpu_time_ns", unit "ns"
METRIC_COUNT: int  # 1, "count", unit "1"
METRIC_SAMPLES: int  # 2, "samples", unit "1"

def now_ns() -> int:
    """Monotonic clock (CLOCK_MONOTONIC) in nanoseconds; the clock of every scope."""

class Collector:
    def __init__(self, max_nodes: int = 500_000, max_samples: int = 100_000) -> None:
        """``max_nodes`` caps the tree: once reached, ``child`` returns the
        parent itself and counts a drop (``drops["nodes"]``). ``max_samples``
        caps system-monitor samples kept (oldest kept, later ones dropped and
        counted in ``drops["monitor"]``)."""

    # --- identity -------------------------------------------------------
    def intern(
        self, kind: int, name: str, file: str = "", line: int = 0, detail: str = "", flags: int = 0
    ) -> int:
        """Frame id for this identity (same identity, same id)."""
    def skip_prefix(self, prefix: str) -> None:
        """Leave Python frames whose ``co_filename`` starts with ``prefix`` out of captures."""
    def metric(self, name: str, unit: str) -> int:
        """Register (or look up) an int64 metric column; returns its id.
        Re-registering a name with another unit raises ``ValueError``."""

    # --- tree -----------------------------------------------------------
    def child(self, parent: int, frame: int) -> int:
        """Find or insert the node for ``frame`` under ``parent``."""
    def path(self, parent: int, frames: Sequence[int]) -> int:
        """``child`` repeatedly: the node at the end of ``frames`` under ``parent``."""
    def mirror(self, node: int, top: int) -> int:
        """The node whose path below ``top`` repeats ``node``'s path below its
        phase (the root's child it descends from): for ``root → forward → a → b``
        and ``top`` = the backward phase node, ``backward → a → b``. A phase
        node or the root gives ``top``. Memoized per ``(node, top)`` until
        ``reset``; this is how backward work lands under its forward context."""
    def parent(self, node: int) -> int:
        """Parent of ``node``; -1 for the root."""
    def add(self, node: int, metric: int, value: int) -> None:
        """Add ``value`` to the node's exclusive metric."""
    def node_count(self) -> int: ...

    # --- Python call paths --------------------------------------------
    def python_frames(self) -> list[int]:
        """Frame ids of the calling thread's Python stack, outermost first,
        skipped files left out, limited to frames deeper than the user depth of
        the innermost open scope of this thread (all frames if none)."""

    # --- scopes (per thread) -------------------------------------------
    def enter(
        self, frames: Sequence[int], parent: int = -1, capture: bool = False, user_depth: int = -1
    ) -> int:
        """Open a scope and return its node.

        The node is ``path(base, frames)`` where ``base`` is ``parent`` if
        ``parent >= 0``, else the node of this thread's innermost open scope,
        else the root. With ``capture``, the Python frames of
        ``python_frames()`` are inserted between ``base`` and ``frames``.
        The scope records its start time and its user depth: the current user
        depth when ``user_depth`` is -1; the innermost open scope's (0 if none)
        when it is -2, with no stack walk (for scopes that add no Python frames
        of their own, e.g. an ATen op inside a torch call); else ``user_depth``
        (0 for scopes such as phases under which captures start at the
        outermost frame)."""
    def exit(self) -> int:
        """Close this thread's innermost scope; returns its inclusive elapsed
        ns. With no open scope it returns -1 and does nothing."""
    def top(self) -> int:
        """Node of this thread's innermost open scope, or 0 (root)."""
    def depth(self) -> int:
        """Number of open scopes on this thread."""
    def unwind(self, depth: int) -> None:
        """Close scopes until ``depth()`` == ``depth`` (used after exceptions)."""

    # --- CPU sampler ----------------------------------------------------
    def start_sampler(self, hz: float, native: bool = False) -> None:
        """Start a background thread that, ``hz`` times a second, takes the GIL
        and adds 1 to ``samples`` of every Python thread's current path: the
        thread's innermost open scope node (root if none) + its Python frames
        deeper than that scope's user depth. With ``native`` (comprehensive
        mode), each sample also carries the thread's native frames
        (``KIND_NATIVE``, name = demangled symbol, file = library path),
        the interpreter's own frames replaced by the Python frames, native
        frames below the innermost interpreter frame appended after them.
        Idempotent; stopped by ``stop_sampler``, ``reset``, at interpreter
        exit and in a forked child."""
    def stop_sampler(self) -> None: ...
    def sampler_running(self) -> bool: ...

    # --- system monitor ------------------------------------------------
    def start_monitor(self, interval_ms: int) -> None:
        """Start a background thread sampling at start, every ``interval_ms``
        and once more when stopped (so a short window has two readings): per-core
        CPU utilisation (%), process RSS (bytes), system memory used (%),
        process disk read/write bytes (cumulative), network rx/tx bytes
        (cumulative), and per GPU utilisation (%) and memory used (bytes)
        through NVML (``dlopen("libnvidia-ml.so.1")``, absent = no GPU columns)."""
    def stop_monitor(self) -> None: ...
    def monitor_samples(self) -> dict[str, list]:
        """Columns of the samples kept since the last reset: ``t_ns`` (now_ns
        clock), ``cpu_percent`` (list of per-core lists), ``rss_bytes``,
        ``mem_used_percent``, ``disk_read_bytes``, ``disk_write_bytes``,
        ``net_rx_bytes``, ``net_tx_bytes``, ``gpu_util_percent`` and
        ``gpu_mem_bytes`` (lists of per-device lists, empty without NVML)."""

    # --- output ---------------------------------------------------------
    def snapshot(self) -> dict:
        """Flat copy of everything collected:

        ``{"parent": array('q'), "frame": array('q'),            # per node; parent[0] == -1
           "metrics": {name: array('q')}, "units": {name: unit},  # per node, exclusive
           "frames": {"kind", "name", "file", "line", "detail", "flags": array('q')},  # per frame; name/file/detail index strings
           "strings": list[str],
           "drops": {"nodes": int, "samples": int, "monitor": int}}``"""
    def reset(self) -> None:
        """Drop nodes, metric values, scopes of every thread, samples and drop
        counters; keep frames, strings and metric registrations; stop the
        sampler and the monitor."""
