"""A JAX window's memory by context: the arrays live at its highest observed point.

JAX keeps no allocation history a profiler can read, but every live array
knows the Python stack that made it (``Array.traceback``): the data
``jax.profiler.device_memory_profile()`` is built from, read here array by
array, because the pprof it gives merges arrays by stack and so cannot tell
which of them are the train state's. At each step end of a window the live
arrays' bytes are summed (one pass, under a microsecond an array); when
the sum is the highest yet, the arrays are taken whole (stack, bytes per
device, category); the window's end takes them if no step end did.

Each array's bytes go to the user's frames of the stack that made it (in
the ``optimizer`` phase for the optimizer's state or what optax or Flax's
optimizer made, else in the step's default phase), then, for the train state's leaves, to the module frames
of the leaf's path (``params/Dense_0/kernel`` → ``MLP/Dense_0 (Dense)``).
Categories: leaves of the train state handed to ``prof.step(state)`` (or
returned by the step ``deepcontext run`` drives) are ``parameter`` (under a
``params`` key, or an NNX ``Param``) or ``optimizer_state`` (optax states,
an ``opt_state`` key, NNX ``OptState``); without a state, arrays made inside
a Flax ``init`` (or an NNX layer's constructor) are parameters, those made
inside an optax ``init`` optimizer state; the rest are ``temporary``.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dc_core.collect.collector import KIND_MODULE, KIND_PYTHON
from dc_core.collect.ownfiles import profiler_files
from dc_jax.context import in_optimizer, is_library

#: What JAX cannot give (said in the profile's memory note).
NOTE = (
    "JAX gives the arrays live at one moment (the window's highest step end, else its end), "
    "not an allocation history: no alloc_bytes or free_bytes, no peak inside a step "
    "(XLA's temporaries), no peak node"
)
NOTE_NO_STATE = (
    "; parameters and optimizer state are told by where they were made (a Flax or optax "
    "init): pass the train state to prof.step(state) to tell them after an update"
)
_TIMELINE_POINTS = 512  # at most, per device: a long time-range window halves its resolution
_PARAM_KEYS = ("params", "param")
_OPTIMIZER_KEYS = ("opt_state", "optimizer", "optimizer_state")
_FLAX = "/flax/"
_OPTAX = "/optax/"

Device = tuple[int, int]  # (c10 device type: 0 cpu, 1 gpu, 9 other; index)
Leaf = tuple[Any, str, tuple[str, ...]]  # (weak reference, category, module scope)


@dataclass
class Capture:
    """The live arrays at one moment, grouped by (stack, category, module scope)."""

    t_ns: int
    groups: dict[tuple[Any, str, tuple[str, ...]], dict[Device, int]] = field(default_factory=dict)
    held: dict[Device, int] = field(default_factory=dict)  # of them, alive when the window opened
    total: dict[Device, int] = field(default_factory=dict)


class MemoryWatch:
    """Memory of one window at a time: `start`, `state`, `step_end`, `finish`."""

    def __init__(self) -> None:
        self.on = False
        self.readout: dict[str, Any] | None = None
        self.error: Exception | None = None  # reading the window's memory failed
        self.stated = False  # a train state was handed over in the window
        self._clock: Any = None
        self._leaves: dict[int, Leaf] = {}
        self._held: dict[int, Any] = {}
        self._best: Capture | None = None
        self._timeline: dict[Device, list[tuple[int, int]]] = {}
        # id of a sharding → (it, its devices of this process, how many devices it has)
        self._devices: dict[int, tuple[Any, list[Device], int]] = {}

    @property
    def note(self) -> str:
        return NOTE + ("" if self.stated else NOTE_NO_STATE)

    def start(self, clock: Any) -> None:
        """A window opens: the arrays alive now are held (made before it)."""
        self.on, self.readout, self.error, self.stated = True, None, None, False
        self._clock = clock
        self._leaves, self._best, self._timeline = {}, None, {}
        self._held = {id(a): weakref.ref(a) for a in _live_arrays()}

    def state(self, state: Any) -> None:
        """The train state after a step: its leaves' categories and module scopes
        (kept by identity and weak reference, never the arrays themselves)."""
        if self.on:
            self._leaves = state_leaves(state)
            self.stated = True

    def step_end(self) -> None:
        """A step ended: sum the live arrays; take them whole at a new highest."""
        if not self.on:
            return
        now = self._clock()
        total: dict[Device, int] = {}
        for array in _live_arrays():
            devices, size = self._sizes(array)
            for device in devices:
                total[device] = total.get(device, 0) + size
        for device, size in total.items():
            _append(self._timeline.setdefault(device, []), (now, size))
        best = self._best
        if best is None or sum(total.values()) > sum(best.total.values()):
            self._best = self._capture(now)

    def finish(self, session: Any, modules: Mapping[str, str]) -> None:
        """The window closes: its highest capture (else one now) → per-node columns
        in ``session``'s collector (nodes made here, before it is snapshotted).
        Never raises: a failure is `result`'s to raise, the session's to handle."""
        if not self.on:
            return
        self.on = False
        try:
            best = self._best or self._capture(self._clock())
            self.readout = _readout(best, self._timeline, _Placer(session, modules))
        except Exception as exc:
            self.error = exc
        finally:
            self._best, self._held, self._leaves, self._devices = None, {}, {}, {}

    def outcome(self) -> tuple[bool, str]:
        """``Adapter.memory_state``: whether the last window was read, and the note."""
        if self.readout is None and self.error is None:
            return False, "no window of this JAX adapter read its memory"
        return True, self.note

    def result(self) -> dict[str, Any]:
        """``Adapter.memory_readout``: the last window's readout (its failure raised)."""
        if self.error is not None:
            raise self.error
        return self.readout or {"devices": [], "bad_reports": 0}

    # --- internals ---------------------------------------------------------------
    def _sizes(self, array: Any) -> tuple[list[Device], int]:
        """(devices of this process, bytes on each) of ``array``; a sharding's devices
        are looked up once (the costly part: ``device_set`` and hashing a sharding)."""
        try:
            sharding = array.sharding
            entry = self._devices.get(id(sharding))
            if entry is None or entry[0] is not sharding:
                if len(self._devices) > 4096:  # a job making shardings anew: stay bounded
                    self._devices.clear()
                keys = [_device_key(d) for d in sharding.device_set]
                entry = (sharding, [k for k in keys if k[0] >= 0], max(len(keys), 1))
                self._devices[id(sharding)] = entry
            return entry[1], array.on_device_size_in_bytes() // entry[2]
        except Exception:  # deleted or donated meanwhile
            return [], 0

    def _capture(self, now: int) -> Capture:
        capture = Capture(now)
        told: dict[Any, str] = {}  # stack → category, for arrays of no known state
        for array in _live_arrays():
            devices, size = self._sizes(array)
            if not devices:
                continue
            try:
                traceback = array.traceback
            except Exception:
                traceback = None
            leaf = self._leaves.get(id(array))
            if leaf is not None and leaf[0]() is array:
                category, scope = leaf[1], leaf[2]
            else:
                category = told.get(traceback)
                if category is None:
                    category = told[traceback] = stack_category(traceback)
                scope = ()
            ref = self._held.get(id(array))
            held = ref is not None and ref() is array
            group = capture.groups.setdefault((traceback, category, scope), {})
            for device in devices:
                group[device] = group.get(device, 0) + size
                capture.total[device] = capture.total.get(device, 0) + size
                if held:
                    capture.held[device] = capture.held.get(device, 0) + size
        return capture


def state_leaves(state: Any) -> dict[int, Leaf]:
    """``id`` → (weak reference, category, module scope) of the arrays of a train
    state that are parameters or optimizer state; the scope is the leaf's
    module path in the model (``("Dense_0",)``), () where none is known."""
    import jax

    def marker(x: Any) -> bool:
        return _optax_state(x) or _variable_kind(x) is not None

    found: list[tuple[Any, str, tuple[str, ...]]] = []  # (array, category, key names)
    for path, leaf in jax.tree_util.tree_flatten_with_path(state, is_leaf=marker)[0]:
        names = tuple(_key_name(k) for k in path)
        if _optax_state(leaf):
            category = "optimizer_state"
        elif _variable_kind(leaf) is not None:
            category = _variable_kind(leaf) or ""
        elif any(n in _OPTIMIZER_KEYS for n in names):
            category = "optimizer_state"
        elif any(n in _PARAM_KEYS for n in names):
            category = "parameter"
        else:
            continue
        if category:
            for inner, array in jax.tree_util.tree_flatten_with_path(leaf)[0]:
                if isinstance(array, jax.Array):
                    inner_names = () if leaf is array else tuple(_key_name(k) for k in inner)
                    found.append((array, category, names + _named(inner_names)))
    # optax mirrors the parameters' tree: an optimizer leaf's longest suffix
    # that ends one parameter's path alone names its module
    owners: dict[tuple[str, ...], tuple[str, ...] | None] = {}
    for _, category, names in found:
        if category == "parameter":
            tail = _param_tail(names)
            for i in range(len(tail)):
                owners[tail[i:]] = tail if owners.get(tail[i:], tail) == tail else None
    out: dict[int, Leaf] = {}
    for array, category, names in found:
        if category == "parameter":
            tail = _param_tail(names)
        else:
            suffixes = (owners.get(names[i:]) for i in range(len(names)))
            tail = next((t for t in suffixes if t is not None), ())
        out[id(array)] = (weakref.ref(array), category, tail[:-1])
    return out


def stack_category(traceback: Any) -> str:
    """A category from where an array was made, for arrays of no known state."""
    if traceback is None:
        return "temporary"
    for frame in traceback.frames:
        file, function = frame.file_name.replace("\\", "/"), frame.function_name
        if _OPTAX in file and "init" in function.rsplit(".", 1)[-1]:
            return "optimizer_state"
        if "/flax/nnx/training/optimizer" in file and function.endswith("__init__"):
            return "optimizer_state"
        if _FLAX in file and function.rsplit(".", 1)[-1] in ("init", "init_with_output"):
            return "parameter"
        if "/flax/nnx/nn/" in file and function.endswith("__init__"):
            return "parameter"
    return "temporary"


class _Placer:
    """Stacks and module scopes → nodes of the session's collector."""

    def __init__(self, session: Any, modules: Mapping[str, str]) -> None:
        self.session, self.modules = session, modules
        self.own = frozenset(profiler_files())
        self.roots = {path.split("/", 1)[0] for path in modules}

    def node(self, traceback: Any, scope: tuple[str, ...], optimizer: bool) -> int:
        """``optimizer``: the optimizer's state, whose phase is ``optimizer`` wherever made."""
        s = self.session
        stack = list(reversed(traceback.frames)) if traceback is not None else []
        optimizer = optimizer or any(in_optimizer(f.file_name) for f in stack)
        phase = "optimizer" if optimizer else s.default_phase
        frames = [s.phase_frame(phase)]
        for f in stack:
            if not is_library(f.file_name) and f.file_name not in self.own:
                frames.append(s.frame(KIND_PYTHON, f.function_name, f.file_name, f.line_num))
        frames += [s.frame(KIND_MODULE, path, detail=cls) for path, cls in self._modules(scope)]
        return s.collector.path(0, frames)

    def _modules(self, scope: tuple[str, ...]) -> list[tuple[str, str]]:
        """Module frames of a leaf's scope: the model's own paths where the trace or
        the Flax hooks saw them (``MLP``, ``MLP/Dense_0``; a container such as NNX's
        ``layers`` left out, as in the ops' paths), else the scope's own names
        (less a leading container index: the state's tuple)."""
        for i in range(len(scope)):
            inner = "/".join(scope[i:])
            roots = [r for r in self.roots if f"{r}/{inner}" in self.modules]
            if len(roots) == 1:
                tail = scope[i:]
                paths = [
                    roots[0],
                    *(f"{roots[0]}/" + "/".join(tail[: j + 1]) for j in range(len(tail))),
                ]
                return [(p, self.modules[p]) for p in paths if p in self.modules]
        while scope and scope[0].isdigit():
            scope = scope[1:]
        return [("/".join(scope[: j + 1]), "") for j in range(len(scope))]


def _readout(
    best: Capture, timeline: Mapping[Device, list[tuple[int, int]]], placer: _Placer
) -> dict[str, Any]:
    """``Collector.memory_snapshot()``'s shape (see ``dc_core/_native.pyi``)."""
    by_device: dict[Device, dict[str, dict[int, int]]] = {}
    nodes: dict[tuple[Any, tuple[str, ...], bool], int] = {}
    for (traceback, category, scope), sizes in best.groups.items():
        key = (traceback, scope, category == "optimizer_state")
        node = nodes.get(key)
        if node is None:
            node = nodes[key] = placer.node(*key)
        for device, size in sizes.items():
            column = by_device.setdefault(device, {}).setdefault(category, {})
            column[node] = column.get(node, 0) + size
    count = placer.session.collector.node_count()
    devices = []
    for device in sorted(by_device):
        points = timeline.get(device, [])
        columns = {}
        for category, values in by_device[device].items():
            column = [0] * count
            for node, size in values.items():
                column[node] += size
            columns[category] = column
        devices.append(
            {
                "type": device[0],
                "index": device[1],
                "alloc_bytes": [],
                "free_bytes": [],
                "peak_bytes": columns,
                "peak": best.total.get(device, 0),
                "peak_ns": best.t_ns,
                "peak_node": -1,
                "held_at_peak": best.held.get(device, 0),
                "allocator_peak": 0,
                "max_reserved": 0,
                "live": points[-1][1] if points else best.total.get(device, 0),
                "timeline_ns": [t for t, _ in points],
                "timeline_bytes": [b for _, b in points],
                "live_dropped": 0,
                "unknown_frees": 0,
            }
        )
    # JAX keeps no allocation history: the profile names what it lacks
    return {"devices": devices, "bad_reports": 0, "missing": ["alloc_bytes", "free_bytes"]}


def _live_arrays() -> list[Any]:
    """The live arrays of the default backend and of the host's."""
    import jax

    arrays = list(jax.live_arrays())
    if jax.default_backend() != "cpu":
        try:
            arrays += jax.live_arrays("cpu")
        except Exception:  # no host backend
            pass
    return arrays


def _device_key(device: Any) -> Device:
    """(c10 device type, index) of a JAX device; (-1, -1) for another process's.
    Every CPU device is the one host device (c10 has one ``cpu``)."""
    import jax

    if device.process_index != jax.process_index():
        return (-1, -1)
    if device.platform == "cpu":
        return (0, 0)
    index = getattr(device, "local_hardware_id", None)
    return (
        1 if device.platform in ("gpu", "cuda", "rocm") else 9,
        device.id if index is None else index,
    )


def _append(points: list[tuple[int, int]], point: tuple[int, int]) -> None:
    """Add a timeline point; at the cap, neighbours merge into their higher."""
    points.append(point)
    if len(points) > _TIMELINE_POINTS:
        points[:] = [max(points[i : i + 2], key=lambda p: p[1]) for i in range(0, len(points), 2)]


def _key_name(key: Any) -> str:
    for attribute in ("key", "name", "idx"):
        if hasattr(key, attribute):
            return str(getattr(key, attribute))
    return str(key)


def _named(names: tuple[str, ...]) -> tuple[str, ...]:
    """An NNX variable's inner path (``value``) is not part of the model's."""
    return tuple(n for n in names if n not in ("value", "raw_value"))


def _param_tail(names: tuple[str, ...]) -> tuple[str, ...]:
    """A parameter's path in the model: after the last ``params`` key (Linen), else all."""
    last = max((i for i, n in enumerate(names) if n in _PARAM_KEYS), default=-1)
    return names[last + 1 :]


def _optax_state(x: Any) -> bool:
    return type(x).__module__.startswith("optax") and isinstance(x, tuple)


def _variable_kind(x: Any) -> str | None:
    """An NNX variable's category ("" for neither parameter nor optimizer state),
    None for anything that is not an NNX variable."""
    mro = [c.__name__ for c in type(x).__mro__]
    if "Variable" not in mro or not type(x).__module__.startswith("flax"):
        return None
    if "OptState" in mro:
        return "optimizer_state"
    return "parameter" if "Param" in mro else ""
