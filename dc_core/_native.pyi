"""Typed contract of the collector.

`dc_core._native.Collector` (C++, built from `native/`) and
`dc_core.collect.reference.Collector` (pure Python) implement exactly this
interface; `tests/collect/test_collector.py` runs one suite against both, and
`tests/collect/test_contract_signatures.py` checks both against this file (every
name below exists natively; the reference has all but those under a "native
collector only" heading, with these parameters and defaults).
`tests/collect/test_contract_constants.py` checks the constants against
`dc_core.model.kinds` (kinds, metric units, monitor columns).

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

from collections.abc import Sequence
from typing import Any

# Frame kinds: the index of their name in dc_core.model.kinds.KINDS.
KIND_ROOT: int  # 0
KIND_PYTHON: int  # 1
KIND_MODULE: int  # 2
KIND_OPERATOR: int  # 3
KIND_NATIVE: int  # 4
KIND_KERNEL: int  # 5
KIND_PHASE: int  # 6
KIND_COMPILED: int  # 7
KIND_SHARDING: int  # 8

FLAG_BACKWARD: int  # 1

# Metrics registered at construction, ids in registration order; units as in
# dc_core.model.kinds.UNITS.
METRIC_CPU_TIME: int  # 0, "cpu_time_ns", unit "ns"
METRIC_COUNT: int  # 1, "count", unit "1"
METRIC_SAMPLES: int  # 2, "samples", unit "1"

def now_ns() -> int:
    """Monotonic clock (CLOCK_MONOTONIC) in nanoseconds; the clock of every scope."""

# --- native collector only (the reference has none) ---
def demangle(name: str) -> str:
    """The collector's C++ demangler (``abi::__cxa_demangle``): ``"_ZN2at6native6cpu_mmEv"``
    → ``"at::native::cpu_mm()"``; a name that is not a mangled C++ name comes back
    as it is. Used by `dc_core.collect.symbols` for names read from ELF symbol tables;
    native only (the reference collector records no native frames)."""

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
    def mark_step(self) -> None:
        """A step ended: each node's exclusive ``cpu_time_ns`` since the last
        mark is that step's value. The snapshot's ``step_bounds`` then holds,
        per node, the least (``cpu_time_ns.min``) and greatest
        (``cpu_time_ns.max``) value over the marked steps, 0 for a step the
        node did not run in; ``steps_marked`` counts the marks. Two columns
        however many steps. Cleared by ``reset``."""

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
        ns. With no open scope it returns -1 and does nothing.

        *Time between scopes.* Within an open scope S, the time from the end
        of one scope opened inside S's subtree (not inside an open operator)
        to the start of the next is the Python code that ran between the two
        calls. It is billed, as ``cpu_time_ns``, to the deepest node both
        scopes' *contexts* (the node their own ``frames`` hang from: ``base``
        plus the captured Python frames) descend from, below S; where they
        share none below S (calls from two lines of the outermost function),
        to the outermost node below S of the earlier one's context (the code
        returning from it), else of the later one's (on the way to it). S's
        first stretch (to its first scope) goes to that scope's outermost node
        below S, its last stretch (after its last scope) to the last one's.
        Either way it counts as S's nested time, so S keeps as its own only
        what no scope inside it locates (a scope with no call below it). For
        ``S → f.py:3 g → a`` then ``S → f.py:3 g → b`` the time between ``a``
        and ``b`` lands on ``f.py:3 g``; every ns of S is billed once.
        """
    def exit_own(self) -> int:
        """Close this thread's innermost scope as ``exit`` does; returns its
        exclusive ns (what no operator or scope inside it, nor the time
        between them, was billed), or -1 with no open scope."""
    def top(self) -> int:
        """Node of this thread's innermost open scope, or 0 (root)."""
    def depth(self) -> int:
        """Number of open scopes on this thread."""
    def unwind(self, depth: int) -> None:
        """Close scopes until ``depth()`` == ``depth`` (used after exceptions)."""
    def lend(self, thread: int, start_ns: int, end_ns: int) -> None:
        """Thread ``thread`` (its ``threading.get_ident()``) waited from
        ``start_ns`` to ``end_ns`` (``now_ns`` clock) for work the calling
        thread recorded (a backward pass run from a thread the step joins):
        that span leaves its time, so the wall time is billed once, where the
        work was. It is taken at that thread's next scope or operator boundary
        out of its time between recorded things (or its closing scope's last
        stretch), never out of what it recorded itself. A thread not seen, or
        with no open scope, is left as it is; at most 64 spans wait per thread."""

    # --- CPU sampler ----------------------------------------------------
    def start_sampler(self, hz: float, native: bool = False) -> None:
        """Start a background thread that ticks ``hz`` times a second and bills
        CPU time: at each tick, every thread that has a scope open (or, with
        native operator capture, an operator) gets ``n`` added to ``samples``
        of the node it is in at that moment (its innermost open operator, else
        its innermost open scope), where ``n`` is the number of whole periods
        (``1/hz`` s) of CPU time the thread ran since the previous tick, its
        remainder carried to the next tick it runs in. A thread whose CPU clock
        did not move since the previous tick (blocked in a wait, sleeping) is
        idle and gets nothing at that tick. A thread with nothing open gets
        nothing, and what it ran then is not carried (no sample lands outside
        every scope); CPU time run while no sampler ran is billed to nobody.
        So a thread busy all the time gets ~``hz`` samples a second, and
        ``samples / hz`` estimates its CPU seconds inside scopes; no Python
        frames are read. Threads without a Python thread state (a framework's
        own C++ workers) are not sampled. The native sampler never
        takes the GIL: it keeps ticking while another thread holds it (the
        reference's sampler is a Python thread and cannot).
        With ``native`` (comprehensive mode), each such sample also carries
        the thread's native frames (``KIND_NATIVE``) below its innermost
        interpreter frame, as a path under the node the sample lands on. A
        native frame is named by ``dladdr`` where it can
        (name = demangled exported symbol, file = library path, line 0); an
        address no exported symbol covers is *unresolved*: name =
        ``"<library basename>+0x<offset>"``, file = library path, line =
        offset (> 0) from the library's mapping start, one frame per address,
        named later from the library's full symbol table by
        ``dc_core.collect.symbols.resolve`` when the snapshot is read. Code outside
        any loaded object is one ``"[unknown]"`` frame (file "", line 0),
        runs of it folded into one. A thread whose native stack could not be
        taken in time keeps its sample, without native frames, and counts in
        ``drops["samples"]`` (as do ticks the sampler fell behind on).
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
        """Columns of the samples kept since the last reset, named and ordered
        as ``dc_core.model.kinds.MONITOR_COLUMNS``: ``t_ns`` (now_ns
        clock), ``cpu_percent`` (list of per-core lists), ``rss_bytes``,
        ``mem_used_percent``, ``disk_read_bytes``, ``disk_write_bytes``,
        ``net_rx_bytes``, ``net_tx_bytes``, ``gpu_util_percent`` and
        ``gpu_mem_bytes`` (lists of per-device lists, empty without NVML)."""

    # --- output ---------------------------------------------------------
    def snapshot(self) -> dict:
        """Flat copy of everything collected:

        ``{"parent": array('q'), "frame": array('q'),            # per node; parent[0] == -1
           "metrics": {name: array('q')}, "units": {name: unit},  # per node, exclusive
           # per frame; name/file/detail index strings
           "frames": {"kind", "name", "file", "line", "detail", "flags": array('q')},
           "strings": list[str],
           "step_bounds": {"cpu_time_ns.min", "cpu_time_ns.max": array('q')},  # per node; only once a step was marked
           "steps_marked": int,
           "drops": {"nodes": int, "samples": int, "monitor": int}}``"""
    def reset(self) -> None:
        """Drop nodes, metric values, scopes of every thread, samples and drop
        counters; keep frames, strings and metric registrations; stop the
        sampler and the monitor."""

    # --- native operator capture (native collector only; the reference has none) ---
    def capture_start(
        self,
        backward_frame: int,
        nested: bool,
        context_code: Any,
        namer: Any,
        gil_free: bool = True,
        unscoped_frame: int = -1,
    ) -> bool:
        """Start recording operators reported through ``capture_api()`` from any
        thread. Backward functions mirror their forward context under the root's
        child of ``backward_frame``; operators of a thread with no open scope
        hang under the root's child of ``unscoped_frame`` (-1: the root itself);
        ``nested`` records every operator (else the
        outermost of each call from Python); frames of code object
        ``context_code`` name a module by their first local through
        ``namer(module, outermost_module) -> frame id``. Returns whether frames
        are read without the GIL (False: the GIL-held public-API walk).
        RuntimeError if another collector is capturing."""
    def capture_stop(self) -> tuple[int, int]:
        """Stop recording; returns (operators recorded without their Python path
        because the stack was deeper than the walk reads, namer errors)."""
    def capturing(self) -> bool:
        """Whether capture is on."""
    def capture_api(self) -> Any:
        """A capsule (``dc_core._native.capture_api``) holding the C table of
        ``dc_core/include/capture_api.h``; valid while this collector lives."""
    # --- memory by context (native collector only) ------------------------
    def memory_start(self, max_live: int = 1048576, timeline_points: int = 512) -> None:
        """Clear and start memory tracking (native/memory.h): allocator reports
        through the capture table's ``memory`` entry are billed to the reporting
        thread's innermost recorded operator (else its innermost scope); at most
        ``max_live`` blocks are kept live (the rest count in ``live_dropped``),
        at most ``timeline_points`` timeline points per device."""
    def memory_stop(self) -> None:
        """Stop tracking; what was tracked stays readable until the next start."""
    def memory_on(self) -> bool:
        """Whether memory tracking is on."""
    def memory_report(
        self,
        ptr: int,
        size: int,
        device_type: int,
        device_index: int,
        node: int,
        total: int = 0,
        reserved: int = 0,
    ) -> None:
        """An allocator report as the capture table gives it, billed to ``node``
        (``size`` < 0: a free, billed back to its allocation)."""
    def memory_hold(
        self,
        ptr: int,
        size: int,
        device_type: int,
        device_index: int,
        node: int,
        category: int,
        resident: bool = False,
    ) -> int:
        """A block made before the window joins the live map as ``category``
        (MemCategory's number), billed to ``node``; ``resident``: live since the
        window began (it counts at the peak already reached). Returns the token
        ``memory_release`` takes, 0 when not kept (a tracked block is marked instead)."""
    def memory_release(self, ptr: int, token: int) -> None:
        """A held block is gone (if ``ptr`` still holds the one ``token`` names)."""
    def memory_mark(self, ptr: int, category: int, only_temporary: bool = False) -> bool:
        """The tracked block at ``ptr`` is of ``category`` (with ``only_temporary``,
        only if it is still a temporary); its bytes at the peak move too. False:
        not tracked."""
    def memory_snapshot(self) -> dict:
        """What was tracked: ``{"devices": [{"type", "index", "alloc_bytes",
        "free_bytes": list (per node), "peak_bytes": {category: list},
        "peak", "peak_ns", "peak_node", "held_at_peak", "allocator_peak",
        "max_reserved", "live", "timeline_ns", "timeline_bytes", "live_dropped",
        "unknown_frees"}], "bad_reports": int}``."""

    def module_enter(self, *hook_args: Any) -> None:
        """A module call begins on the calling thread (a global forward
        pre-hook; its arguments are ignored, it returns None). While capturing,
        module calls entered and left between two recorded things (outside
        any open operator) split the time between them: a module's own code
        before its first call and after its last is billed to that module's
        node on the calls' paths, instead of to the deepest node both share.
        Ignored when the counts do not fit those paths; at most 256 kept."""
    def module_exit(self, *hook_args: Any) -> None:
        """A module call ends on the calling thread (a global forward hook,
        ``always_call``); see ``module_enter``."""
    def capture_suspend(self, delta: int) -> None:
        """Suspend (+1) or resume (-1) recording on the calling thread: a region
        recorded by other means (a compiled graph) runs."""
    def capture_seq(self, thread: int, first: int, last: int, node: int) -> None:
        """Forward sequence numbers [first, last) of framework thread ``thread``
        belong to ``node``: the backward of those autograd nodes lands there."""
