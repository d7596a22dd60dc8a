"""The tab's "All ranks" view on a window of 1,024 ranks: first answer cold
< 2 s, warm < 300 ms, a node's distribution over the ranks < 300 ms; exits 1,
printing OVER, when one is missed.

Writes the rank files with the project's writer (`synthetic.rank_profile`:
~2,000-node GPT-shaped trees, seeded per-rank noise, one planted slow rank
doing 4x the work in one MLP), then times the plugin's routes in-process
(TensorBoard's WSGI app, werkzeug Client) with a second thread alive, as in
TensorBoard's threaded server (where the merge runs in-process, not in a
worker pool):

- cold: a fresh plugin's first ``/allranks``, with no summary index yet (every
  rank file is read and merged, and the index written beside them);
- cold, index: a fresh plugin again (TensorBoard restarted): the index is read;
- warm: ``/allranks`` once the merged window is held (best of 5);
- distribution: ``/allranks/node`` of the planted slow MLP (first, then best of 5),
  checked to name the planted rank as the max rank.

Usage: python benchmarks/tab_ranks.py [--ranks 1024]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from synthetic import SLOW_MODULE, write_run  # after the path is set

BUDGET_COLD_S, BUDGET_WARM_S, BUDGET_NODE_S = 2.0, 0.300, 0.300
PREFIX = "/data/plugin/deepcontext"


def client_for(logdir: Path):
    """A fresh plugin (nothing cached) behind TensorBoard's WSGI app."""
    from tensorboard.backend.application import TensorBoardWSGI
    from tensorboard.plugins.base_plugin import TBContext
    from werkzeug.test import Client

    from dc_core.tensorboard.plugin import DeepContextPlugin

    return Client(TensorBoardWSGI([DeepContextPlugin(TBContext(logdir=str(logdir)))]))


def timed(client, route: str, query: dict) -> tuple[float, dict]:
    start = time.perf_counter()
    response = client.get(PREFIX + route, query_string=query)
    took = time.perf_counter() - start
    if response.status_code != 200:
        raise SystemExit(
            f"{route} answered {response.status_code}: {response.get_data(as_text=True)[:500]}"
        )
    return took, response.get_json()


def find_node(client, query: dict, labels: list[str]) -> int:
    """The merged node on the path ``labels``, opened a level at a time as the tab does."""
    node = 0
    for label in labels:
        _, kids = timed(client, "/allranks/children", {**query, "node": node, "limit": 2000})
        node = next(r["id"] for r in kids["children"][str(node)] if r["label"] == label)
    return node


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1024)
    args = parser.parse_args()
    logdir = Path(tempfile.mkdtemp(prefix="dc-bench-tab-ranks-"))
    try:
        return run(logdir, args.ranks)
    finally:
        shutil.rmtree(logdir, ignore_errors=True)


def run(logdir: Path, ranks: int) -> int:
    """Write, time and check; returns the exit status."""
    slow = ranks * 5 // 7
    started = time.perf_counter()
    write_run(logdir, ranks, slow_rank=slow)
    size = sum(p.stat().st_size for p in logdir.rglob("*.pb"))
    print(
        f"{ranks:,} rank files ({size / 2**20:.0f} MiB) written in {time.perf_counter() - started:.1f} s; "
        f"planted slow rank {slow}"
    )
    query = {"run": "bench", "window": "10-12", "metric": "cpu_time_ns"}
    server = threading.Event()
    alive = threading.Thread(target=server.wait, daemon=True)  # TensorBoard serves from threads
    alive.start()
    try:
        cold, _ = timed(client_for(logdir), "/allranks", query)
        client = client_for(logdir)
        cold_index, _ = timed(client, "/allranks", query)
        warm = min(timed(client, "/allranks", query)[0] for _ in range(5))
        block = SLOW_MODULE.rsplit(".", 1)[0]
        node = find_node(
            client,
            query,
            [
                "forward",
                "train.py:40 train",
                "model.py:120 forward",
                f"{block} (Block)",
                f"{SLOW_MODULE} (MLP)",
            ],
        )
        first_node, dist = timed(client, "/allranks/node", {**query, "node": node})
        node_warm = min(
            timed(client, "/allranks/node", {**query, "node": node})[0] for _ in range(5)
        )
    finally:
        server.set()
    right = dist["node"]["max_rank"] == slow and len(dist["values"]) == ranks
    print(
        f"{'All ranks, cold (no index yet)':<40} {cold * 1e3:8.0f} ms   budget {BUDGET_COLD_S * 1e3:.0f} ms"
    )
    print(
        f"{'All ranks, cold (index beside files)':<40} {cold_index * 1e3:8.0f} ms   budget {BUDGET_COLD_S * 1e3:.0f} ms"
    )
    print(f"{'All ranks, warm':<40} {warm * 1e3:8.1f} ms   budget {BUDGET_WARM_S * 1e3:.0f} ms")
    print(
        f"{'distribution of one node, first':<40} {first_node * 1e3:8.1f} ms   budget {BUDGET_NODE_S * 1e3:.0f} ms"
    )
    print(f"{'distribution of one node, warm':<40} {node_warm * 1e3:8.1f} ms")
    print(
        f"{SLOW_MODULE}: max rank {dist['node']['max_rank']}, imbalance {dist['node']['imbalance']:.2f}, "
        f"{len(dist['bins'])} bins: {'ok' if right else 'WRONG'}"
    )
    ok = (
        max(cold, cold_index) < BUDGET_COLD_S
        and warm < BUDGET_WARM_S
        and first_node < BUDGET_NODE_S
        and right
    )
    print(f"budget: {'ok' if ok else 'OVER'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
