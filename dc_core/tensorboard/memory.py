"""The Memory view: one device's bytes live at the window's peak, by context
and by category, its timeline of allocated bytes, and the peak itself.

The tree is the ``peak_live_bytes`` column of the device (`memory_metric`:
the main device's unsuffixed, another's ``@<device>``), inclusive, with each
row's split over `MEMORY_CATEGORIES`; only nodes holding bytes at the peak
are rows. The header says what ``deepcontext report`` says (`memory_line`,
one implementation), so the tab and the terminal agree to the byte.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..cli.present import memory_categories, memory_line, peak_where
from ..model import views
from ..model.kinds import MEMORY_CATEGORIES
from ..model.window import window_label
from ..store.profile import DeviceMemory, memory_metric
from .params import NotFound
from .store import Index
from .tables import frame_fields

#: What a profile without memory says, and how to get it.
NOT_COLLECTED = "memory was not collected: run with memory=True (or deepcontext run --memory)"

#: The columns the tree can be ordered by: live bytes with the children
#: (``incl``), of the node itself (``excl``), the name, or one category's bytes.
SORTS = ("incl", "excl", "name", *MEMORY_CATEGORIES)

PEAK = "peak_live_bytes"


def device_of(index: Index, name: str = "") -> DeviceMemory | None:
    """The device named ``name`` (the main one, the first, for ``""``);
    None when the window has no memory; `NotFound` for a device it lacks."""
    memory = index.profile.memory
    if not memory:
        return None
    if not name:
        return memory[0]
    for device in memory:
        if device.device == name:
            return device
    known = ", ".join(d.device for d in memory)
    raise NotFound(f"this window has no memory for device {name!r} (it has {known})")


def _metrics(index: Index, device: DeviceMemory) -> tuple[str, dict[str, str]]:
    """The tree metric of ``device``'s live bytes at its peak, and per category its metric."""
    memory = index.profile.memory
    return memory_metric(PEAK, memory, device.device), {
        c: memory_metric(f"{PEAK}.{c}", memory, device.device) for c in MEMORY_CATEGORIES
    }


def _holding(index: Index, metric: str):
    """Children of a node that hold bytes at the peak (inclusive above 0)."""
    incl = index.incl(metric)
    return lambda node: [k for k in index.children(node) if incl[k] > 0]


def memory_row(index: Index, device: DeviceMemory, node: int) -> dict:
    """One node of the memory tree: its frame and label, ``bytes`` live at the
    peak with its children, ``self`` its own, ``split`` the inclusive bytes
    per category, and ``kids`` the children that hold any."""
    metric, by_category = _metrics(index, device)
    row = {"id": node, **frame_fields(index, index.tree.frame[node])}
    if node == 0:
        p = index.profile
        row["label"] = window_label(index.ref.window, p.step_times_ns, p.planned_window)
    row["bytes"] = index.incl(metric)[node]
    row["self"] = index.excl(metric)[node]
    row["split"] = {c: index.incl(m)[node] for c, m in by_category.items()}
    row["kids"] = len(_holding(index, metric)(node))
    return row


def _sort_key(index: Index, device: DeviceMemory, sort: str):
    metric, by_category = _metrics(index, device)
    if sort == "name":
        label, frame = index.label, index.tree.frame
        return lambda n: (label(frame[n]).lower(), n)
    column = (
        index.excl(metric)
        if sort == "excl"
        else index.incl(by_category[sort] if sort in by_category else metric)
    )
    return lambda n: (-column[n], n)


def memory_children(
    index: Index,
    device: DeviceMemory | None,
    nodes: Iterable[int],
    sort: str = "incl",
    limit: int = 200,
) -> dict:
    """Rows of the children holding bytes of each of ``nodes``, most bytes
    first: ``{"children": {node: rows}, "more": {node: n}, "total": bytes}``."""
    if device is None:
        return {"children": {str(n): [] for n in nodes}, "more": {}, "total": 0}
    metric, _ = _metrics(index, device)
    holding, key = _holding(index, metric), _sort_key(index, device, sort)
    out, more = {}, {}
    for node in nodes:
        kids = sorted(holding(node), key=key)
        out[str(node)] = [memory_row(index, device, k) for k in kids[:limit]]
        if len(kids) > limit:
            more[str(node)] = len(kids) - limit
    return {"children": out, "more": more, "total": index.incl(metric)[0]}


def missing_line(index: Index) -> str:
    """What the report says of memory metrics the window asked for and did
    not get (``not collected: peak_live_bytes.input (why)``); "" for none."""
    p = index.profile
    if not p.memory_missing:
        return ""
    note = f" ({p.memory_note})" if p.memory_note else ""
    return f"not collected: {', '.join(p.memory_missing)}{note}"


def _peak(index: Index, device: DeviceMemory) -> dict:
    """Where the peak was reached: the node, its call path, the frame and module the report names."""
    tree = index.tree
    node = device.peak_node if 0 < device.peak_node < len(tree) else -1
    where = peak_where(tree, node)
    return {
        "bytes": device.peak_bytes,
        "t_ns": device.peak_t_ns,
        "step": device.peak_step,
        "phase": device.peak_phase,
        "node": node,
        "path": [
            {"id": n, "label": index.label(tree.frame[n]), "kind": tree.node_frame(n).kind}
            for n in (tree.path(node) if node > 0 else [])
        ],
        "frame": where[0].label() if where else "",
        "module": where[1].label() if where and where[1] else "",
    }


def memory_view(
    index: Index,
    device_name: str = "",
    sort: str = "incl",
    threshold: float = 0.05,
    limit: int = 200,
) -> dict:
    """Everything the Memory view first shows of one device of a window.

    ``collected`` false (with ``message``) when the window has no memory;
    otherwise the device list, the report's header ``line``, the peak, the
    categories' bytes at the peak, the allocator's own numbers, the
    timeline, and the tree opened along its heaviest path (``root``,
    ``children``, ``more``, ``chain``, as ``/hotpath`` answers for the tree)."""
    p = index.profile
    device = device_of(index, device_name)
    base = {
        "categories": list(MEMORY_CATEGORIES),
        "missing": missing_line(index),
        "memory_missing": list(p.memory_missing),
        "memory_note": p.memory_note,
        "duration_ns": p.duration_ns,
    }
    if device is None:
        message = (
            f"memory was asked for but not collected: {', '.join(p.memory_missing)}"
            + (f" ({p.memory_note})" if p.memory_note else "")
            if p.memory_missing
            else NOT_COLLECTED
        )
        return {**base, "collected": False, "message": message, "devices": []}
    metric, _ = _metrics(index, device)
    incl = index.incl(metric)
    chain = views.hot_chain(0, _holding(index, metric), incl.__getitem__, threshold * incl[0])
    expand = chain[:-1] if len(chain) > 1 else chain
    tree = memory_children(index, device, expand, sort, limit)
    return {
        **base,
        "collected": True,
        "message": "",
        "devices": [d.device for d in p.memory],
        "device": device.device,
        "metric": metric,
        "line": memory_line(p, device),
        "peak": _peak(index, device),
        "by_category": memory_categories(p, device),
        "held_at_peak_bytes": device.held_at_peak_bytes,
        "allocator_peak_bytes": device.allocator_peak_bytes,
        "max_reserved_bytes": device.max_reserved_bytes,
        "live_dropped": device.live_dropped,
        "unknown_frees": device.unknown_frees,
        "timeline": {"t_ns": list(device.timeline_t_ns), "bytes": list(device.timeline_bytes)},
        "root": memory_row(index, device, 0),
        "chain": chain,
        **tree,
    }
