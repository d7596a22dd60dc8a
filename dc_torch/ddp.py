"""The settings a ``DistributedDataParallel`` module ran with, for the
profile's ``ddp`` environment entry (`dc_core.model.comm.DDP_SETTINGS`): what
the analyzer's advice on DDP's exposed all-reduce starts from. Its
collectives themselves are `dc_torch.collectives`'."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dc_core.model.comm import DDP_ENV, ddp_entry

if TYPE_CHECKING:
    from dc_torch.state import Frames

#: The module whose reducer issues the gradients' all-reduces from C++.
_DDP = getattr(torch.nn.parallel, "DistributedDataParallel", None)


def environment(frames: Frames) -> dict[str, str]:
    """The ``ddp`` entry of the first ``DistributedDataParallel`` module the
    window named (its bucket cap, the buckets its reducer made, its
    communication hook); empty without one."""
    if _DDP is None:
        return {}
    for cache in (frames.module_names, frames.rooted_names):
        for _root, modules in list(cache.values()):
            for module in list(modules):
                if isinstance(module, _DDP):
                    return {DDP_ENV: ddp_entry(settings(module))}
    return {}


def settings(ddp: Any) -> dict[str, object]:
    """``ddp``'s settings that decide when its all-reduces launch, by the
    names of ``DistributedDataParallel``'s arguments
    (`dc_core.model.comm.DDP_SETTINGS`), and how many buckets its reducer
    reduced in its last step; those it lacks are left out."""
    out: dict[str, object] = {}
    cap = getattr(ddp, "bucket_bytes_cap", None)
    if isinstance(cap, int):
        out["bucket_cap_mb"] = f"{cap / (1 << 20):g}"
    for name in ("gradient_as_bucket_view", "static_graph", "find_unused_parameters"):
        if isinstance(getattr(ddp, name, None), bool):
            out[name] = getattr(ddp, name)
    try:  # the reducer's own account (a private method: where it is missing, without it)
        logged = ddp._get_ddp_logging_data()
    except Exception:
        return out
    if logged.get("num_buckets_reduced"):
        out["buckets"] = logged["num_buckets_reduced"]
    if logged.get("comm_hook"):
        out["comm_hook"] = logged["comm_hook"]
    return out
