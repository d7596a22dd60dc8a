"""The Communication view: per module that collectives serve (FSDP's
parameter groups), what a step spends on it, as ``deepcontext report``'s
"communication by module" table says it (`communication_json`, one
implementation): compute, exposed communication and the sharding runtime,
which add up to the module's time, and beside them the collectives' own time
and bytes. Each row carries its module's node, for the details panel.
"""

from __future__ import annotations

from ..cli.present import COMMUNICATION_COLUMNS, communication_json
from .store import Index
from .tables import frame_fields

#: What a window without collectives says.
NO_COLLECTIVES = (
    "this window has no collectives: communication is shown per module for "
    "sharded training (FSDP2's fully_shard) and other jobs whose steps communicate"
)

#: The parts a module's time is split into, in the bars' order.
PARTS = ("compute_ns", "exposed_ns", "runtime_ns")


def communication_view(index: Index) -> dict:
    """The view's rows, most exposed first, each with its module's frame
    fields (``label``), ``node``, `COMMUNICATION_COLUMNS` per step,
    ``calls`` per step and ``exposed_by``; ``columns`` as (key, title) and
    ``parts``, the keys that add up to a module's time; ``message`` when
    there are none."""
    tree = index.tree
    rows = []
    for item in communication_json(index.profile):
        rows.append({**item, **frame_fields(index, tree.frame[item["node"]])})
    return {
        "columns": [list(column) for column in COMMUNICATION_COLUMNS],
        "parts": list(PARTS),
        "rows": rows,
        "message": "" if rows else NO_COLLECTIVES,
    }
