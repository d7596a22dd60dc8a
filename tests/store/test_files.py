"""Profile files: round trip, layout, atomic writes, bad files."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from dc_core.model.tree import tree_from_lists
from dc_core.store import profile_pb2
from dc_core.store.logdir import find_profiles, load_profiles, read_profile, write_profile
from dc_core.store.profile import SCHEMA_VERSION, Profile, ProfileError, Series, decode, encode


def make_profile(rank: int = 0, steps=(5, 8)) -> Profile:
    tree = tree_from_lists(("forward", ("python:step|t.py:3", "aten::mm @cpu_time_ns=100,count=3")))
    return Profile(
        tree=tree,
        steps=steps,
        step_times_ns=[10, 20, 30],
        rank=rank,
        host="hostA",
        framework="torch",
        system=[
            Series("cpu_percent", 0, [0, 5], [12.5, 50.0]),
            Series("rss_bytes", -1, [0], [1e6]),
        ],
        drops={"nodes": 2},
        env={"torch": "2.13.0"},
        findings=[
            {
                "rule": "hotspot",
                "severity": "info",
                "message": "m",
                "suggestion": "s",
                "path": ["forward", "aten::mm"],
                "evidence": {"share": 0.5},
                "node": 3,
            }
        ],
    )


def test_round_trip_keeps_everything():
    original = make_profile()
    back = decode(encode(original))
    assert back.tree.frames == original.tree.frames
    assert back.tree.parent == original.tree.parent and back.tree.excl == original.tree.excl
    assert back.steps == (5, 8) and back.step_times_ns == [10, 20, 30]
    assert back.system[0].values == [12.5, 50.0] and back.system[0].unit == "%"
    assert back.drops == {"nodes": 2} and back.env == {"torch": "2.13.0"}
    assert back.findings[0]["evidence"] == {"share": 0.5} and back.findings[0]["node"] == 3


@pytest.mark.parametrize("waited", [-1, 0, 7_000_000])
def test_the_waits_for_a_cpu_round_trip_with_unknown_kept_apart_from_none(waited):
    original = dataclasses.replace(
        make_profile(),
        others_wait_ns=waited,
        loader_wait_ns=waited,
        loader_cpu_ns=waited,
        loader_workers=3,
        step_wait_ns=[1, 2, 3],
    )
    back = decode(encode(original))
    assert (back.others_wait_ns, back.loader_wait_ns) == (waited, waited)
    assert (back.loader_cpu_ns, back.loader_workers) == (waited, 3)
    assert back.step_wait_ns == [1, 2, 3]


def test_layout_and_discovery(tmp_path):
    write_profile(make_profile(0), tmp_path, "runA")
    write_profile(make_profile(1), tmp_path, "runA")
    write_profile(make_profile(0), tmp_path / "nested" / "runB")
    files = find_profiles(tmp_path)
    assert [(f.run, f.rank, f.steps) for f in files] == [
        ("nested/runB", 0, (5, 8)),
        ("runA", 0, (5, 8)),
        ("runA", 1, (5, 8)),
    ]
    assert files[1].path == tmp_path / "runA/plugins/deepcontext/0-hostA/steps-5-7.pb"
    assert read_profile(files[2]).rank == 1


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda data: data[: len(data) // 2], "corrupt profile"),
        (lambda data: b"\xff\xff\xff garbage", "corrupt profile"),
        (lambda data: b"", "not a DeepContext profile"),
    ],
)
def test_bad_files_are_named_and_skipped(tmp_path, damage, message):
    good = write_profile(make_profile(0), tmp_path)
    bad = write_profile(make_profile(1), tmp_path)
    bad.write_bytes(damage(bad.read_bytes()))
    profiles, errors = load_profiles(tmp_path)
    assert [p.rank for p in profiles] == [0] and profiles[0].source == str(good)
    assert len(errors) == 1 and errors[0].file == str(bad) and message in errors[0].message


def test_future_version_rejected(tmp_path):
    msg = profile_pb2.Profile()
    msg.ParseFromString(encode(make_profile()))
    msg.version = SCHEMA_VERSION + 1
    with pytest.raises(ProfileError, match=rf"schema version {SCHEMA_VERSION + 1} is newer"):
        decode(msg.SerializeToString(), "x.pb")


def test_kill_mid_write_leaves_no_partial_file(tmp_path):
    """A writer killed while writing leaves only its temporary, which readers ignore."""
    first = write_profile(make_profile(0, (0, 1)), tmp_path)
    script = textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {os.getcwd()!r})
        from tests.store.test_files import make_profile
        from dc_core.store import logdir
        real_fdopen = os.fdopen
        class Slow:
            def __init__(self, f): self.f = f
            def __enter__(self): return self
            def __exit__(self, *a): self.f.close()
            def write(self, data):
                self.f.write(data[:10]); self.f.flush(); print("writing", flush=True); time.sleep(60)
            def flush(self): pass
            def fileno(self): return self.f.fileno()
        logdir.os.fdopen = lambda fd, mode: Slow(real_fdopen(fd, mode))
        logdir.write_profile(make_profile(0, (5, 8)), {str(tmp_path)!r})
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    leftovers = list(first.parent.glob(".tmp-*"))
    assert len(leftovers) == 1
    profiles, errors = load_profiles(tmp_path)
    assert [p.steps for p in profiles] == [(0, 1)] and errors == []


def test_profiles_are_created_under_the_umask_and_a_rewrite_keeps_the_mode(tmp_path):
    from dc_core.store.logdir import rewrite_profile

    old = os.umask(0o027)
    try:
        path = write_profile(make_profile(), tmp_path, "run")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o640  # 0666 under umask 027, not mkstemp's 0600
    path.chmod(0o604)
    rewrite_profile(make_profile(), path)
    assert path.stat().st_mode & 0o777 == 0o604
