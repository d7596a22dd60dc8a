"""Native-only behaviour of ``dc_core._native``: what the reference collector
cannot do (native frames) or cannot break the same way (threads across fork and
interpreter exit, thread-state reuse, caches)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
import zlib

import pytest

_native = pytest.importorskip("dc_core._native")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def decode(c):
    """Snapshot as ({node: path of (kind, name, file, line)}, snapshot)."""
    s = c.snapshot()
    strings, fr = s["strings"], s["frames"]

    def frame(f):
        return (fr["kind"][f], strings[fr["name"][f]], strings[fr["file"][f]], fr["line"][f])

    paths = {}
    for node in range(1, len(s["parent"])):
        p = s["parent"][node]
        paths[node] = paths.get(p, ()) + (frame(s["frame"][node]),)
    return paths, s


def compress_for(seconds: float, data: bytes) -> int:
    end, n = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        n += len(zlib.compress(data, 6))  # deflate runs in libz without the GIL
    return n


def compress_until_sampled(
    c, node: int, samples: int, data: bytes, deadline_s: float = 60, unwound: int = 0
) -> None:
    """Compress until ``node``'s subtree holds ``samples`` samples, ``unwound``
    of them below ``node`` itself (their stacks unwound): a loaded host skips
    sampler ticks and a 2 ms unwind can time out (under TSan most do), so a
    fixed time or count gives figures that move with the load."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        compress_for(0.1, data)
        paths, s = decode(c)
        got = s["metrics"]["samples"]
        below = sum(got[n] for n, p in paths.items() if n != node and n in _below(s, node))
        if got[node] + below >= samples and below >= unwound:
            return


def _below(s, node: int) -> set[int]:
    """The nodes of ``node``'s subtree, itself left out."""
    parent, inside = s["parent"], set()
    for n in range(1, len(parent)):
        if parent[n] == node or parent[n] in inside:
            inside.add(n)
    return inside


@pytest.fixture
def c():
    made = _native.Collector()
    yield made
    made.stop_sampler()
    made.stop_monitor()


def test_native_sampler_puts_libz_frames_under_the_scope_the_thread_is_in(c):
    data = os.urandom(1 << 16) * 64  # 4 MiB that deflate cannot shortcut
    phase = c.enter([c.intern(_native.KIND_PHASE, "forward")], 0, False, 0)
    c.start_sampler(200, native=True)
    compress_until_sampled(c, phase, 150, data, unwound=20)
    c.stop_sampler()
    c.exit()
    paths, s = decode(c)
    samples = s["metrics"]["samples"]
    assert samples[phase] + sum(samples[n] for n in paths if n != phase) == sum(samples)
    under_phase, unwound, in_libz = samples[phase], 0, 0
    for node, path in paths.items():
        if path[0][1] != "forward" or node == phase:
            continue
        below = path[1:]
        under_phase += samples[node]
        unwound += samples[node]  # the others' unwind timed out (2 ms): the thread was not running
        # Only native frames follow the scope's node (no Python frames are
        # read): interpreter frames, the collector's own and the trampoline dropped.
        assert all(k == _native.KIND_NATIVE for k, *_ in below), below
        assert not any("libpython" in f or "_native" in f for _, _, f, _ in below), below
        # libz's own frames (exported "deflate", or "??" for its static
        # helpers); a Python with zlib linked into the module has them there.
        if any("libz" in f or "zlib" in os.path.basename(f) for _, _, f, _ in below[1:]):
            in_libz += samples[node]
    # compressed until 20 unwound (25 of 157 with two busy loops beside, 7-19
    # of 165 under TSan): what unwound must be libz's
    assert under_phase >= 150 and unwound >= 20, (
        under_phase,
        unwound,
    )
    assert in_libz >= unwound // 2, (in_libz, unwound, under_phase)


def test_python_sampler_has_no_native_frames(c):
    phase = c.enter([c.intern(_native.KIND_PHASE, "forward")], 0, False, 0)
    c.start_sampler(200)
    compress_until_sampled(c, phase, 40, os.urandom(1 << 20))
    c.stop_sampler()
    c.exit()
    paths, s = decode(c)
    assert s["metrics"]["samples"][phase] >= 40
    assert not any(k == _native.KIND_NATIVE for p in paths.values() for k, *_ in p)


def test_fork_mid_window_child_starts_clean_parent_keeps_working(c):
    op = c.intern(_native.KIND_OPERATOR, "aten::mm")
    c.start_sampler(500)
    c.start_monitor(5)
    outer = c.enter([c.intern(_native.KIND_PHASE, "forward")])
    time.sleep(0.05)
    pid = os.fork()
    if pid == 0:  # child: no sampler/monitor threads exist here
        code = 1
        try:
            ok = not c.sampler_running() and c.depth() == 0 and c.top() == 0
            c.stop_sampler()  # no-ops: nothing to join
            c.stop_monitor()
            node = c.enter([op])
            ok = ok and c.exit() >= 0 and c.snapshot()["metrics"]["count"][node] >= 1
            c.start_sampler(200)  # and a fresh sampler works in the child
            time.sleep(0.05)
            c.stop_sampler()
            code = 0 if ok else 3
        finally:
            os._exit(code)
    deadline = time.monotonic() + 20
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        assert time.monotonic() < deadline, "forked child hung"
        time.sleep(0.01)
    assert os.waitstatus_to_exitcode(status) == 0
    assert c.sampler_running() and c.depth() == 1 and c.top() == outer
    inner = c.enter([op])
    c.exit()
    time.sleep(0.05)
    c.exit()
    c.stop_sampler()
    c.stop_monitor()
    _, s = decode(c)
    assert s["metrics"]["count"][inner] == 1 and s["metrics"]["count"][outer] == 1
    assert sum(s["metrics"]["samples"]) > 0 and len(c.monitor_samples()["t_ns"]) > 2


@pytest.mark.parametrize("native", [False, True], ids=["python", "native"])
def test_exit_without_stopping_threads_does_not_hang(native):
    script = textwrap.dedent(
        f"""
        import threading, time, zlib
        from dc_core import _native
        c = _native.Collector()
        c.start_sampler(1000, native={native})
        c.start_monitor(1)
        def busy():
            end = time.monotonic() + 5
            while time.monotonic() < end:
                zlib.compress(b"x" * 100000)
        threading.Thread(target=busy, daemon=True).start()
        c.enter([c.intern(_native.KIND_PHASE, "forward")], capture=True)
        time.sleep(0.1)
        print("exiting", flush=True)
        """
    )
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "exiting"


GC_IN_THE_WALK = """
import gc, sys
from dc_core import _native

c = _native.Collector()
scope = [c.intern(_native.KIND_PHASE, "forward")]
inner = [c.intern(_native.KIND_OPERATOR, "aten::recorded_by_a_finalizer")]
inside = []


class Garbage:
    def __del__(self):
        caller = sys._getframe(1)
        inside.append(caller.f_code.co_name == "deep" and caller.f_locals["k"] == 0)
        c.enter(inner, capture=True)  # a finalizer that records something
        c.exit()


def deep(k):
    # fresh frames, without frame objects: enter()'s walk makes them
    return deep(k - 1) if k else c.enter(scope, capture=True)


for _ in range(20):
    gc.collect()
    g = Garbage()
    g.me = g  # a cycle: only the GC frees it
    del g
    gc.set_threshold(1)  # the next object made runs it
    deep(30)
    gc.set_threshold(700)
    c.exit()
s = c.snapshot()
names = [s["strings"][s["frames"]["name"][f]] for f in s["frame"]]
print(sum(inside), sum(n for n, name in zip(s["metrics"]["count"], names) if "finalizer" in name))
"""


def test_a_finalizer_the_gc_runs_inside_a_scopes_frame_walk_records_and_returns():
    """enter() walks the Python stack with PyFrame_GetBack, which makes frame
    objects; making one may run the GC, and its finalizers any code. Walked
    under the store's lock, a finalizer that recorded something waited on
    that lock forever (a finalizer that released the GIL let another thread
    in, which then waited on it holding the GIL: the suite hung so once)."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(
        [sys.executable, "-c", GC_IN_THE_WALK],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    # every finalizer ran inside deep(0)'s call, and recorded its operator
    assert done.stdout.split() == ["20", "20"], done.stdout


def test_threads_stopped_from_several_threads_at_once_all_return(c):
    """A window's end on one thread and the atexit hook on another stop the
    same sampler and monitor at once (`deepcontext run`, a process ending
    while its time range closes): every caller returns, the threads end."""
    failures = []

    def stopper(barrier, stop):
        try:
            barrier.wait(10)
            stop()
        except Exception as exc:  # reported below: a hang shows as a thread still alive
            failures.append(exc)

    for _ in range(300):
        c.start_sampler(1000, False)
        c.start_monitor(1)
        barrier = threading.Barrier(3)
        stops = (c.stop_sampler, c.stop_monitor, _native._stop_all)
        threads = [
            threading.Thread(target=stopper, args=(barrier, stop), daemon=True) for stop in stops
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not any(t.is_alive() for t in threads), "a stop never returned"
        assert not failures and not c.sampler_running()


def test_node_cap_drops_captured_python_frames_too():
    c = _native.Collector(max_nodes=3)
    op = c.intern(_native.KIND_OPERATOR, "aten::mm")

    def deep(n):
        return deep(n - 1) if n else c.enter([op], capture=True)

    node = deep(10)
    c.exit()
    paths, s = decode(c)
    assert c.node_count() == 3 and len(paths[node]) == 2  # the cap stopped the path
    # This test's stack, 11 calls of deep() and the operator; 2 nodes fitted.
    assert s["drops"]["nodes"] == len(c.python_frames()) + 11 + 1 - 2
    assert s["metrics"]["count"][node] == 1


def test_eight_threads_with_capture_and_nesting_count_exactly(c):
    outer_f = c.intern(_native.KIND_PHASE, "forward")
    op = c.intern(_native.KIND_OPERATOR, "aten::relu")
    barrier = threading.Barrier(8)

    def work():
        barrier.wait()
        for _ in range(500):
            c.enter([outer_f], capture=True)
            c.enter([op], capture=True)
            c.exit()
            c.exit()

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    paths, s = decode(c)
    counts = {
        p[-1][1]: s["metrics"]["count"][n] for n, p in paths.items() if s["metrics"]["count"][n]
    }
    assert counts == {"forward": 4000, "aten::relu": 4000}
    # The inner capture adds nothing: same user frame as the outer scope.
    relu = [p for p in paths.values() if p[-1][1] == "aten::relu"]
    assert len(relu) == 1 and relu[0][-2][1] == "forward" and relu[0][-3][1].endswith(".work")


def test_a_thread_that_dies_with_open_scopes_leaks_nothing_into_new_threads(c):
    f = c.intern(_native.KIND_PHASE, "dataloader")
    for _ in range(20):  # thread states get reused; each new thread must start empty
        seen = []
        t = threading.Thread(target=lambda: seen.append((c.depth(), c.enter([f]), c.depth())))
        t.start()
        t.join()
        assert seen[0][0] == 0 and seen[0][2] == 1


def test_code_cache_follows_skip_prefixes_added_later(c):
    ns: dict = {}
    exec(compile("def call(fn):\n    return fn()\n", "/virtual/lib/x.py", "exec"), ns)

    def files(ids):
        snap = c.snapshot()
        return [snap["strings"][snap["frames"]["file"][i]] for i in ids]

    before = files(ns["call"](c.python_frames))
    assert "/virtual/lib/x.py" in before  # now cached as not skipped
    c.skip_prefix("/virtual/lib/")
    after = files(ns["call"](c.python_frames))
    assert "/virtual/lib/x.py" not in after and len(after) == len(before) - 1


def test_monitor_reports_this_process(c):
    c.start_monitor(10)
    blob = bytearray(64 << 20)  # RSS must show it
    deadline = time.monotonic() + 5
    while len(c.monitor_samples()["t_ns"]) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    c.stop_monitor()
    m = c.monitor_samples()
    assert len(m["t_ns"]) >= 3 and max(m["rss_bytes"]) > len(blob)
    assert all(len(cores) == os.cpu_count() for cores in m["cpu_percent"])
    del blob


@pytest.mark.requires_cuda
def test_monitor_reads_every_gpu_through_nvml():
    """With a GPU, the monitor's NVML columns hold one value per device per sample."""
    import torch

    from dc_core import _native

    c = _native.Collector()
    c.start_monitor(20)
    time.sleep(0.1)
    c.stop_monitor()
    samples = c.monitor_samples()
    devices = torch.cuda.device_count()
    assert all(len(row) == devices for row in samples["gpu_util_percent"])
    assert all(0 <= v <= 100 for row in samples["gpu_util_percent"] for v in row)
    assert all(v > 0 for row in samples["gpu_mem_bytes"] for v in row)
