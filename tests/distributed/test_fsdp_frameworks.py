"""FSDP2 through Lightning (``ModelParallelStrategy``) on two CPU ranks: with
the one-line callback, and with no callback under ``deepcontext run --
torchrun``. Each rank's gathers and reductions sit under the block whose
parameters they move, named as the LightningModule's ``named_modules()``
names it, as many as torch.profiler's FSDP records of that block count."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from dc_core.model.comm import by_module
from dc_core.store.logdir import find_profiles, read_profile
from tests.distributed.spawn import launch

SCRIPT = Path(__file__).with_name("lightning_fsdp.py")
GATHER, REDUCE = "c10d::_allgather_base_", "c10d::_reduce_scatter_base_"


def check(root: Path, logdir: Path) -> None:
    profiles = [read_profile(f) for f in find_profiles(logdir)]
    assert sorted(p.rank for p in profiles) == [0, 1]
    for p in profiles:
        tree = p.tree
        peer = json.loads((root / f"peer-{p.rank}.json").read_text())
        sharded, records = peer["sharded"], peer["records"]
        assert set(sharded) <= set(peer["modules"])
        gathers, reduces, moved = Counter(), Counter(), Counter()
        # Lightning's own broadcasts (outside the steps) are no FSDP group's
        for node in tree.find_all(lambda f: f.kind == "operator" and f.name in (GATHER, REDUCE)):
            name = tree.node_frame(node).name
            modules = [f.name for f in tree.path_frames(node) if f.kind == "module"]
            # the innermost sharded module above it: the one whose group it moves
            owner = next(m for m in reversed(modules) if m in sharded)
            count = tree.value(node, "count")
            (gathers if name == GATHER else reduces)[owner] += count
            moved[name, owner] += tree.value(node, "comm_bytes")
        for module, group in sharded.items():
            fqn = group["fqn"]
            suffix = f" ({fqn})" if fqn else ""
            # FSDP names the root's records with no FQN at all, or "()"
            assert gathers[module] == records.get(f"FSDP::all_gather{suffix}"), module
            assert reduces[module] == records.get(f"FSDP::post_backward_reduce{suffix}"), module
            assert moved[GATHER, module] == gathers[module] * group["bytes"], module
            assert moved[REDUCE, module] == reduces[module] * group["bytes"], module
        # the report's rows: one per sharded module, each with its exposed wait
        rows = {row.module.name: row for row in by_module(tree, "cpu_time_ns")}
        assert set(rows) == set(sharded)
        assert all(row.calls > 0 and row.exposed_ns > 0 for row in rows.values())


@pytest.mark.slow
def test_lightning_model_parallel_strategy_with_the_callback(tmp_path):
    launch(tmp_path, sys.executable, str(SCRIPT), str(tmp_path))
    check(tmp_path, tmp_path / "lightning_logs")


@pytest.mark.slow
def test_lightning_fsdp_under_deepcontext_run_torchrun(tmp_path):
    deepcontext = [sys.executable, "-m", "dc_core", "run", "--logdir", str(tmp_path / "out")]
    torchrun = ["torchrun", "--nproc-per-node", "2", str(SCRIPT), str(tmp_path), "bare"]
    done = launch(tmp_path, *deepcontext, "--no-report", "--", *torchrun)
    assert "2 processes profiled" in done.stderr
    check(tmp_path, tmp_path / "out")
