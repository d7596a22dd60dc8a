"""The DeepContext tab under concurrent load, in a real ``tensorboard`` process.

On two 100k-node windows (`tensorboard_plugin.synthetic`): the flame route
cold (the first request after start: the profile is read then), warm (the
same request again), and warm but not yet asked (the profile loaded, other
parameters); then 500 heavy-route requests 50 at a time (p50, p95,
failures), then 500 at once on parameters not asked before (how many 503s,
p95 of those answered), and the TensorBoard process's resident memory
at start, after that load and after 400 more requests each with its own
parameters (what the kept answers cost: bounded). Budgets: flame warm <= 300 ms; 50 at a time p95 <= 2 s,
none failed. Exits 1, printing OVER, when one is missed.

The heavy requests cycle through `MIX`: flame graphs rooted at several
nodes, hot paths, flat and bottom-up tables, searches and a diff, each with
its own parameters, the way many open tabs ask for many views at once.

Usage: python benchmarks/tab_load.py [--nodes N] [--requests 500] [--concurrency 50]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.tensorboard_plugin import synthetic
from dc_core.store.logdir import write_profile

BUDGET_FLAME_WARM_S, BUDGET_P95_S = 0.300, 2.0
ROUTE = "/data/plugin/deepcontext/"
#: Seconds a client waits for one answer before counting it failed.
CLIENT_TIMEOUT_S = 180


def mix(metric: str, nodes: int) -> list[tuple[str, dict]]:
    """Heavy requests with distinct parameters (24 of them) for ``metric``."""
    ref = {"run": "bench", "rank": "0", "window": "5-8", "metric": metric}
    b = {"b_run": "bench", "b_rank": "0", "b_window": "8-11"}
    out = [("flame", {**ref, "node": str(n)}) for n in (0, 1, 2, 3, 4)]
    out += [("flame", {**ref, "node": "0", "min": "0", "max": str(m)}) for m in (1000, 3000, 6000)]
    out += [("hotpath", {**ref, "node": str(n)}) for n in (0, 1, 2)]
    out += [("flat", {**ref, "sort": s}) for s in ("excl", "incl")]
    out += [("bottomup", {**ref, "kinds": k}) for k in ("operator", "kernel", "operator,kernel")]
    out += [("search", {**ref, "q": q}) for q in ("gemm_7", "aten::op1", "blocks.3", "fn12")]
    out += [("node", {**ref, "node": str(nodes // d)}) for d in (2, 3)]
    out += [("diff", {**ref, **b}), ("diff/children", {**ref, **b, "node": "1,2"})]
    return out


def get(url: str) -> tuple[int, float, dict]:
    """(status, seconds, headers) of one GET; status 0 when no answer came."""
    start = time.perf_counter()
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
    try:
        with urllib.request.urlopen(request, timeout=CLIENT_TIMEOUT_S) as answer:
            answer.read()
            return answer.status, time.perf_counter() - start, dict(answer.headers)
    except urllib.error.HTTPError as exc:
        exc.read()
        return exc.code, time.perf_counter() - start, dict(exc.headers)
    except OSError:
        return 0, time.perf_counter() - start, {}


def url_of(base: str, route: str, query: dict) -> str:
    return f"{base}{ROUTE}{route}?{urllib.parse.urlencode(query)}"


def rss_mib(pid: int) -> float:
    """Resident memory of process ``pid`` and its children (Linux)."""
    total = 0
    for p in [pid, *children(pid)]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def flame_timings(base: str, nodes: int) -> tuple[float, float, float]:
    """Flame route: cold, warm (median of 5 repeats), and the profile loaded
    but these parameters not asked before (median of 5 distinct ones)."""
    query = {"run": "bench", "rank": "0", "window": "5-8", "metric": "cpu_time_ns", "node": "0"}
    status, cold, _ = get(url_of(base, "flame", query))
    assert status == 200, status
    warm = statistics.median(get(url_of(base, "flame", query))[1] for _ in range(5))
    fresh = statistics.median(
        get(url_of(base, "flame", {**query, "min": f"0.00{k}"}))[1] for k in range(3, 8)
    )
    return cold, warm, fresh


def paced(
    base: str, requests: list[tuple[str, dict]], concurrency: int
) -> list[tuple[int, float, dict]]:
    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(lambda rq: get(url_of(base, *rq)), requests))


def at_once(base: str, requests: list[tuple[str, dict]]) -> list[tuple[int, float, dict]]:
    """Every request on its own thread, released together."""
    results: list = [None] * len(requests)
    gate = threading.Barrier(len(requests))

    def one(i: int) -> None:
        gate.wait()
        results[i] = get(url_of(base, *requests[i]))

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument(
        "--distinct",
        type=int,
        default=400,
        help="requests, each with its own parameters, at the end",
    )
    args = parser.parse_args()
    from tests.tensorboard.test_browser import _start_tensorboard

    logdir = Path(tempfile.mkdtemp(prefix="dc-load-"))
    tmp = Path(tempfile.mkdtemp(prefix="dc-load-tb-"))
    try:
        for seed, steps in ((0, (5, 8)), (1, (8, 11))):
            write_profile(synthetic(args.nodes, seed, steps), logdir, "bench")
        proc, base = _start_tensorboard(logdir, tmp)
        try:
            return measure(proc.pid, base, args)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)


def measure(pid: int, base: str, args: argparse.Namespace) -> int:
    get(f"{base}{ROUTE}runs")
    before = rss_mib(pid)
    cold, warm, fresh = flame_timings(base, args.nodes)
    print(
        f"flame route, {args.nodes} nodes: cold {cold * 1e3:.0f} ms, warm {warm * 1e3:.1f} ms "
        f"({warm / BUDGET_FLAME_WARM_S:.2f} of the {BUDGET_FLAME_WARM_S * 1e3:.0f} ms budget), "
        f"loaded but not asked before {fresh * 1e3:.0f} ms"
    )
    heavy = mix("device_time_ns", args.nodes)
    requests = [heavy[i % len(heavy)] for i in range(args.requests)]
    started = time.perf_counter()
    paced_results = paced(base, requests, args.concurrency)
    wall = time.perf_counter() - started
    times = [t for status, t, _ in paced_results if status == 200]
    failed = sum(status != 200 for status, _, _ in paced_results)
    p95 = percentile(times, 0.95)
    print(
        f"{args.requests} requests ({len(heavy)} distinct), {args.concurrency} at a time: p50 "
        f"{percentile(times, 0.5) * 1e3:.0f} ms, p95 {p95 * 1e3:.0f} ms ({p95 / BUDGET_P95_S:.2f} of the "
        f"{BUDGET_P95_S:.0f} s budget), {failed} failed, {wall:.1f} s in all"
    )
    heavy = mix("count", args.nodes)
    burst = at_once(base, [heavy[i % len(heavy)] for i in range(args.requests)])
    answered = [t for status, t, _ in burst if status == 200]
    busy = [h for status, _, h in burst if status == 503]
    other = len(burst) - len(answered) - len(busy)
    retry = sorted({h.get("Retry-After", "-") for h in busy})
    print(
        f"{args.requests} at once ({len(heavy)} distinct, not asked before): {len(answered)} answered "
        f"(p95 {percentile(answered, 0.95) * 1e3:.0f} ms), {len(busy)} answered 503 "
        f"(Retry-After {', '.join(retry) or '-'}), "
        f"{other} failed otherwise"
    )
    loaded = rss_mib(pid)
    ref = {"run": "bench", "rank": "0", "window": "5-8", "metric": "cpu_time_ns"}
    distinct = [("flat", {**ref, "limit": str(1 + i)}) for i in range(args.distinct // 2)]
    distinct += [
        ("flame", {**ref, "node": "0", "min": "0", "max": str(100 + i)})
        for i in range(args.distinct // 2)
    ]
    paced(base, distinct, 8)
    after = rss_mib(pid)
    print(
        f"TensorBoard's resident memory: {before:.0f} MiB at start, {loaded:.0f} MiB after the load above "
        f"(both profiles read), {after:.0f} MiB after {len(distinct)} more distinct requests "
        f"({after / before:.2f}x start, {after - loaded:+.0f} MiB for the distinct ones)"
    )
    ok = warm <= BUDGET_FLAME_WARM_S and p95 <= BUDGET_P95_S and failed == 0
    if not ok:
        print("OVER BUDGET", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
