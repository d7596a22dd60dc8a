"""The heavy routes under load: kept answers, one computation per key at a
time, a bounded number at once and 503 beyond. Threads meet on events, not
clocks; a deadline only keeps a broken build from hanging the suite."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from tensorboard.plugins.base_plugin import TBContext

from dc_core.store.logdir import write_profile
from dc_core.tensorboard import browse
from dc_core.tensorboard.answers import Answers, Busy
from dc_core.tensorboard.params import Ref
from dc_core.tensorboard.plugin import DeepContextPlugin
from dc_core.tensorboard.store import ProfileStore
from tests.tensorboard.conftest import A, Api, make_profile

HANG_GUARD_S = 120


def until(condition) -> None:
    """Wait for ``condition()``, failing only if it never comes."""
    deadline = time.monotonic() + HANG_GUARD_S
    while not condition():
        assert time.monotonic() < deadline, "the threads never got there"
        time.sleep(0.002)


def plugin_with(logdir: Path, answers: Answers) -> DeepContextPlugin:
    return DeepContextPlugin(
        TBContext(logdir=str(logdir)), store=ProfileStore(logdir, listing_ttl_s=0), answers=answers
    )


class Planted:
    """Stands in for `browse.flame`: counts its calls and, while ``gate`` is
    unset, blocks in each, after telling ``entered``."""

    def __init__(self, real) -> None:
        self.real, self.calls, self.lock = real, 0, threading.Lock()
        self.gate, self.entered = threading.Event(), threading.Semaphore(0)

    def __call__(self, *args, **kwargs):
        with self.lock:
            self.calls += 1
        self.entered.release()
        assert self.gate.wait(HANG_GUARD_S)
        return self.real(*args, **kwargs)


def in_threads(count: int, work) -> tuple[list[threading.Thread], list]:
    results: list = [None] * count

    def one(i: int) -> None:
        results[i] = work(i)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    return threads, results


def test_a_kept_answer_equals_a_fresh_one(api: Api, plugin):
    query = {**A, "node": 0, "metric": "cpu_time_ns", "min": 0}
    first = api.json("/flame", **query)
    assert plugin.answers.computed == 1
    again = api.json("/flame", **query)
    assert plugin.answers.computed == 1  # the kept one
    fresh = browse.flame(plugin.store.index(Ref("run-a", 0, (5, 8))), 0, "cpu_time_ns", 0.0, 3000)
    assert first == again == fresh
    assert [n["label"] for n in again["nodes"]][:2] == ["steps 5\u20137", "backward"]
    gzipped = api.client.get(
        "/data/plugin/deepcontext/flame",
        query_string={k: str(v) for k, v in query.items()},
        headers={"Accept-Encoding": "gzip"},
    )
    assert gzipped.headers["Content-Encoding"] == "gzip" and plugin.answers.computed == 1


def test_identical_concurrent_requests_compute_once(logdir, monkeypatch):
    planted = Planted(browse.flame)
    monkeypatch.setattr(browse, "flame", planted)
    plugin = plugin_with(logdir, Answers(slots=2))
    query = {**A, "node": "0", "metric": "cpu_time_ns"}
    threads, results = in_threads(8, lambda i: Api(plugin).json("/flame", **query))
    planted.entered.acquire(timeout=HANG_GUARD_S)
    until(lambda: plugin.answers.waiting() == 7)  # the other seven wait for the first
    planted.gate.set()
    for t in threads:
        t.join(HANG_GUARD_S)
    assert planted.calls == 1 and plugin.answers.computed == 1
    assert (
        all(r == results[0] for r in results)
        and results[0]["nodes"][0]["label"] == "steps 5\u20137"
    )


def test_a_changed_file_is_not_answered_from_the_cache(api: Api, plugin, logdir, src):
    query = {**A, "node": 0, "metric": "cpu_time_ns", "min": 0}
    before = api.json("/flame", **query)
    assert before["nodes"][0]["incl"] == 1070
    path = write_profile(make_profile(src, 0, (5, 8), scale=5), logdir, "run-a")
    stat = os.stat(path)
    # a new mtime even on a coarse clock
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    after = api.json("/flame", **query)
    assert after["nodes"][0]["incl"] == 1500 + 50 + 20 + 600 + 100  # aten::mm at scale 5
    assert after != before and plugin.answers.computed == 2


def test_the_saturated_plugin_answers_503_with_retry_after(logdir, monkeypatch):
    planted = Planted(browse.flame)
    monkeypatch.setattr(browse, "flame", planted)
    plugin = plugin_with(logdir, Answers(slots=2, wait_s=0, retry_after_s=3))
    query = {**A, "metric": "cpu_time_ns"}
    threads, results = in_threads(2, lambda i: Api(plugin).get("/flame", **query, node=i))
    for _ in range(2):  # both slots taken, each by its own parameters
        assert planted.entered.acquire(timeout=HANG_GUARD_S)
    busy = Api(plugin).get("/flame", **query, node=2)
    assert busy.status_code == 503 and busy.headers["Retry-After"] == "3"
    assert "busy" in busy.get_json()["error"]
    assert Api(plugin).get("/runs").status_code == 200  # light routes take no slot
    planted.gate.set()
    for t in threads:
        t.join(HANG_GUARD_S)
    assert [r.status_code for r in results] == [200, 200]
    assert Api(plugin).get("/flame", **query, node=2).status_code == 200  # slots free again


def test_the_cache_stays_bounded_over_many_distinct_parameters(logdir):
    plugin = plugin_with(logdir, Answers(max_entries=8, max_bytes=64 << 10))
    api = Api(plugin)
    for i in range(60):
        api.json("/flat", **A, metric="cpu_time_ns", limit=i + 1)
        api.json("/search", **A, q=f"aten{i}", metric="count")
        assert len(plugin.answers) <= 8 and plugin.answers.bytes <= 64 << 10
    assert plugin.answers.computed == 120 and len(plugin.answers) == 8


def test_answers_bound_bytes_and_skip_an_answer_too_large_to_keep():
    answers = Answers(max_entries=100, max_bytes=8 << 10)
    for i in range(50):
        answers.get(("k", i), lambda: {"i": i, "pad": "x" * 100})
        assert answers.bytes <= 8 << 10
    answers.get("huge", lambda: {"pad": os.urandom(4096).hex()})  # over a quarter of the bytes
    assert "huge" not in answers._entries and answers.bytes <= 8 << 10


def test_an_error_reaches_every_waiter_and_is_not_kept():
    answers, gate, calls = Answers(), threading.Event(), []

    def fail():
        calls.append(1)
        assert gate.wait(HANG_GUARD_S)
        raise LookupError("gone")

    threads, results = in_threads(3, lambda i: _outcome(lambda: answers.get("k", fail)))
    until(lambda: answers.waiting() == 2)
    gate.set()
    for t in threads:
        t.join(HANG_GUARD_S)
    assert results == ["LookupError"] * 3 and len(calls) == 1 and len(answers) == 0
    assert answers.get("k", lambda: {"ok": 1}) and answers.computed == 2


def _outcome(call) -> str:
    try:
        call()
        return "ok"
    except (LookupError, Busy) as exc:
        return type(exc).__name__
