"""Readers survive any file: one regression test per defect of issue 11 (the
reader half), each named after the bug it pins, plus the profiles the fuzzer
(`test_fuzz_readers`) mutates."""

from __future__ import annotations

import errno
import json
import os
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from dc_core.analyzer import analyze, analyze_ranks
from dc_core.cli import main
from dc_core.cli.present import report_json
from dc_core.export import FORMATS, exporter
from dc_core.export.nested import dumps
from dc_core.model import views
from dc_core.model.processors import collapse_recursion, prune_small
from dc_core.model.tree import Frame, Tree, tree_from_lists
from dc_core.store import profile_pb2
from dc_core.store.logdir import (
    DEFAULT_MAX_BYTES,
    MAX_BYTES_ENV,
    STALE_TEMP_S,
    find_profiles,
    load_profiles,
    max_profile_bytes,
    profile_path,
    read_profile,
    write_profile,
)
from dc_core.store.profile import Profile, ProfileError, Series, decode, encode

# --- the profiles: real ones, written by the project's own writer -------------


def model_tree(scale: int = 1) -> Tree:
    """A small tree holding a frame of every kind."""
    return tree_from_lists(
        (
            "forward",
            (
                "python:train_step|/w/train.py:12",
                (
                    "module:encoder",
                    (
                        "python:forward|/w/model.py:3",
                        (
                            f"aten::mm @cpu_time_ns={300 * scale},count=3",
                            (
                                "native:at::native::cpu_mm @cpu_time_ns=40,samples=2",
                                f"kernel:sgemm_128 @device_time_ns={900 * scale}",
                            ),
                        ),
                        "aten::relu @cpu_time_ns=50,count=1,alloc_bytes=4096",
                    ),
                ),
                (
                    "compiled:graph_0 @cpu_time_ns=70",
                    "kernel:triton_fused @device_time_ns=120,flops=1000",
                ),
            ),
        ),
        (
            "backward",
            (
                "module:encoder",
                (
                    "python:forward|/w/model.py:3",
                    (
                        "aten::mm [backward] @cpu_time_ns=600,count=3",
                        "kernel:sgemm_128 @device_time_ns=1800",
                    ),
                ),
            ),
        ),
        ("optimizer", "python:step|/w/optim.py:1 @cpu_time_ns=100,count=1"),
        ("dataloader", "python:__next__|/w/data.py:9 @cpu_time_ns=5000,samples=5"),
    )


def model_profile(rank: int = 0, steps: tuple[int, int] = (5, 8), scale: int = 1) -> Profile:
    """A window with findings (with evidence), system series and environment."""
    tree = model_tree(scale)
    mm = tree.find("forward", "train.py:12 train_step", "encoder", "model.py:3 forward", "aten::mm")
    times = list(range(0, 700 * 10_000_000, 10_000_000))  # more points than the tab draws
    return Profile(
        tree=tree,
        steps=steps,
        step_times_ns=[10_000_000 * scale, 12_000_000, 30_000_000][: steps[1] - steps[0]],
        rank=rank,
        host="node-a",
        framework="torch",
        world_size=2,
        start_unix_ns=1_700_000_000_000_000_000,
        duration_ns=52_000_000,
        init_ns=3_000_000,
        system=[
            Series("cpu_percent", 0, [0, 5_000_000], [20.0, 80.0]),
            Series("rss_bytes", -1, times, [1e9 + 1e6 * i for i in range(len(times))]),
            Series("gpu_util_percent", 0, [0, 5_000_000], [10.0, 90.0]),
        ],
        drops={"nodes": 0, "events": 2},
        env={"torch": "2.13.0", "host": "node-a"},
        findings=[
            {
                "rule": "hotspot",
                "severity": "info",
                "message": "mm is hot",
                "suggestion": "fuse it",
                "path": ["forward", "aten::mm"],
                "evidence": {"share": 0.5, "operators": ["aten::mm"], "split": {"forward_ns": 300}},
                "node": mm,
            },
            {
                "rule": "memory_growth",
                "severity": "warning",
                "message": "rss grows",
                "suggestion": "detach",
                "path": [],
                "evidence": {"run": ".", "rank": rank, "steps": list(steps)},
                "node": -1,
            },
        ],
    )


def memory_model_profile() -> Profile:
    """`model_profile` with memory: per node bytes on two devices, the peak's
    facts, a timeline, a metric asked for and not collected."""
    from dc_core.store.profile import DeviceMemory

    profile = model_profile(0)
    tree = profile.tree
    mm = tree.find("forward", "train.py:12 train_step", "encoder", "model.py:3 forward", "aten::mm")
    step = tree.find("optimizer", "optim.py:1 step")
    data = tree.find("dataloader", "data.py:9 __next__")
    for node, metric, value in (
        (mm, "alloc_bytes", 3 << 20),
        (mm, "free_bytes", 1 << 20),
        (mm, "peak_live_bytes.saved_for_backward", 2 << 20),
        (step, "peak_live_bytes.optimizer_state", 4 << 20),
        (data, "peak_live_bytes.input@cpu", 1 << 20),
    ):
        tree.add(node, metric, value)
    for node, metric, value in (
        (mm, "peak_live_bytes", 2 << 20),
        (step, "peak_live_bytes", 4 << 20),
        (data, "peak_live_bytes@cpu", 1 << 20),
    ):
        tree.add(node, metric, value)
    profile.memory = [
        DeviceMemory(
            "cuda:0",
            peak_bytes=6 << 20,
            peak_t_ns=4_000_000,
            peak_node=mm,
            peak_step=6,
            peak_phase="forward",
            held_at_peak_bytes=4 << 20,
            allocator_peak_bytes=2 << 20,
            max_reserved_bytes=8 << 20,
            live_dropped=1,
            unknown_frees=2,
            timeline_t_ns=[0, 2_000_000, 4_000_000],
            timeline_bytes=[4 << 20, 5 << 20, 6 << 20],
        ),
        DeviceMemory("cpu", peak_bytes=1 << 20, peak_node=data, peak_phase="dataloader"),
    ]
    profile.memory_missing = ["peak_live_bytes.gradient"]
    profile.memory_note = "gradients are not marked on this path"
    return profile


def model_logdir(root: Path) -> list[Path]:
    """Two ranks of one window and a second window of rank 0, under run ``run``."""
    return [
        write_profile(model_profile(0, (5, 8)), root, "run"),
        write_profile(model_profile(1, (5, 8), scale=3), root, "run"),
        write_profile(model_profile(0, (8, 10), scale=2), root, "run"),
    ]


def chain_profile(depth: int, recursion: bool = False, rank: int = 0) -> Profile:
    """A call chain ``depth`` deep under ``forward`` (one Python frame per
    level, or one function recursing), an operator on every other level."""
    tree = Tree()
    node = tree.child(0, Frame("phase", "forward"))
    for level in range(depth):
        frame = Frame(
            "python", "f" if recursion else f"f{level}", "/w/deep.py", 1 if recursion else level + 1
        )
        node = tree.child(node, frame)
        tree.add(node, "cpu_time_ns", 10)
        if level % 2 == 0:
            tree.add(tree.child(node, Frame("operator", "aten::mm")), "cpu_time_ns", 5)
    return Profile(tree=tree, steps=(0, 1), step_times_ns=[1_000_000], rank=rank, host="h")


def snapshot_profile() -> Profile:
    """A profile from a (reference) collector's snapshot and monitor columns."""
    from dc_core.collect import reference
    from dc_core.record.snapshot import profile_from_snapshot

    c = reference.Collector()
    forward = c.intern(6, "forward")
    line = c.intern(1, "train", "/w/t.py", 4)
    op = c.intern(3, "aten::add", detail="cpu")
    node = c.path(0, [forward, line, op])
    c.add(node, c.metric("cpu_time_ns", "ns"), 1234)
    monitor = {
        "t_ns": [100, 200, 300],
        "rss_bytes": [1, 2, 3],
        "cpu_percent": [[10.0, 20.0], [30.0], []],
    }
    return profile_from_snapshot(
        c.snapshot(),
        monitor,
        window_t0=100,
        steps=(3, 5),
        step_times_ns=[7, 9],
        rank=2,
        host="h/ost",
        run="r",
    )


def message(profile: Profile) -> profile_pb2.Profile:
    msg = profile_pb2.Profile()
    msg.ParseFromString(encode(profile))
    return msg


def place(
    logdir: Path, data: bytes, rank: int = 0, steps: tuple[int, int] = (5, 8), run: str = "run"
) -> Path:
    """Raw bytes where a profile of ``run``/``rank``/``steps`` is looked for."""
    path = profile_path(logdir, run, rank, "node-a", steps)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# --- item 2: parents that are no tree --------------------------------------------


@pytest.mark.parametrize(
    "rewire",
    [
        {2: 3, 3: 2},  # a two-node cycle
        {4: 4},  # a node its own parent
        {1: 9},  # a forward parent (into the subtree below)
        {5: -1},  # a second root
    ],
)
def test_parent_cycle_is_rejected_not_looped(tmp_path, capsys, rewire):
    msg = message(model_profile())
    for node, parent in rewire.items():
        msg.tree.parent[node] = parent
    with pytest.raises(ProfileError) as caught:
        decode(msg.SerializeToString(), "cycle.pb")
    # the first node whose parent is not before it
    node = min(n for n, p in rewire.items() if not 0 <= p < n)
    why = f"corrupt profile (parents do not form a tree: node {node} has parent {rewire[node]}, not a node before it)"
    assert caught.value.file == "cycle.pb" and caught.value.message == why
    # every reader names it and goes on with the others
    model_logdir(tmp_path)
    bad = place(tmp_path, msg.SerializeToString(), steps=(20, 21))
    start = time.monotonic()
    assert main(["report", str(tmp_path), "--view", "bottom-up", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["profiles"]) == 3 and doc["errors"] == [{"file": str(bad), "message": why}]
    assert main(["export", str(tmp_path), "--format", "pprof", "--out", str(tmp_path / "out")]) == 0
    # the path alone on a line if long
    assert f"skipped {bad}: {why}" in " ".join(capsys.readouterr().out.split())
    assert len(list((tmp_path / "out").iterdir())) == 3
    assert time.monotonic() - start < 30


def test_every_writer_puts_parents_before_children(collector):
    """What `decode` requires of a file holds for what the project writes:
    both collectors' snapshots (mirrored backward paths included) and trees
    built by `Tree.child`."""
    from dc_core.record.snapshot import profile_from_snapshot

    a, b = collector.intern(1, "a", "/a.py", 1), collector.intern(1, "b", "/b.py", 2)
    forward, backward = collector.intern(6, "forward"), collector.intern(6, "backward")
    top = collector.path(0, [forward, a, b, a])
    collector.add(top, collector.metric("cpu_time_ns", "ns"), 5)
    collector.mirror(top, collector.child(0, backward))
    collector.path(collector.path(0, [forward, b]), [a, b])
    profile = profile_from_snapshot(collector.snapshot(), {}, window_t0=0, steps=(0, 1))
    assert len(profile.tree) == 12
    assert all(p < i for i, p in enumerate(profile.tree.parent) if i)
    assert decode(encode(profile)).tree.parent == profile.tree.parent
    assert all(p < i for i, p in enumerate(model_tree().parent) if i)


# --- item 4: one bad file must not stop a reader -----------------------------------


@pytest.mark.parametrize(
    "evidence, why",
    [
        ("{not json", "unreadable evidence"),
        ("[" * 100_000 + "]" * 100_000, "unreadable evidence"),  # deeper than the parser's stack
        (
            '{"a": ' * 40 + "1" + "}" * 40,
            "nested at most 32",
        ),  # parses, but TensorBoard's cleaner recurses
        ("[1, 2]", "not a JSON object"),
        ('"text"', "not a JSON object"),
    ],
)
def test_bad_evidence_json_is_named_not_a_traceback(tmp_path, capsys, monkeypatch, evidence, why):
    # each skipped file on one line, whatever the path's length
    monkeypatch.setenv("COLUMNS", "1000")
    msg = message(model_profile(1))
    msg.findings[0].evidence_json = evidence
    with pytest.raises(ProfileError, match=why) as caught:
        decode(msg.SerializeToString(), "evidence.pb")
    assert caught.value.file == "evidence.pb" and "finding 0" in caught.value.message
    good = write_profile(model_profile(0), tmp_path, "run")
    bad = place(tmp_path, msg.SerializeToString(), rank=1)
    export = ["export", str(tmp_path), "--format", "hatchet", "--out", str(tmp_path / "o")]
    for argv in (["report", str(tmp_path)], export, ["analyze", str(tmp_path), "--dry-run"]):
        assert main(argv) == 0, argv
        lines = [
            line for line in capsys.readouterr().out.splitlines() if line.startswith("skipped")
        ]
        assert lines == [
            f"skipped {bad}: corrupt profile ({caught.value.message.split('(', 1)[1]}"
        ], argv
    assert read_profile(good).rank == 0


@pytest.mark.parametrize("name", ["²-vm", "٣-vm", "-vm", "x-vm"])
def test_superscript_rank_directory_is_skipped_not_a_crash(tmp_path, capsys, name):
    good = write_profile(model_profile(0), tmp_path, "run")
    odd = good.parent.parent / name
    odd.mkdir()
    (odd / "steps-1-2.pb").write_bytes(good.read_bytes())
    (good.parent / "steps-²-3.pb").write_bytes(good.read_bytes())
    assert [f.path for f in find_profiles(tmp_path)] == [good]
    assert main(["report", str(tmp_path), "--json"]) == 0
    assert [p["rank"] for p in json.loads(capsys.readouterr().out)["profiles"]] == [0]


def test_oversized_file_is_refused_by_name_without_reading_it(tmp_path, capsys, monkeypatch):
    # each skipped file on one line, whatever the path's length
    monkeypatch.setenv("COLUMNS", "1000")
    monkeypatch.delenv(MAX_BYTES_ENV, raising=False)
    good = write_profile(model_profile(0), tmp_path, "run")
    huge = place(tmp_path, b"", rank=1)
    with open(huge, "wb") as handle:  # sparse: larger than the default cap, no disk used
        handle.truncate(DEFAULT_MAX_BYTES + 1)
    tracemalloc.start()
    try:
        with pytest.raises(
            ProfileError, match=r"512\.0 MiB is over the 512 MiB size limit"
        ) as caught:
            read_profile(huge)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert caught.value.file == str(huge) and MAX_BYTES_ENV in caught.value.message
    assert peak < 1 << 20  # refused from its size, not read
    # the cap: an environment variable every reader shares, and a flag of each command
    size = good.stat().st_size
    monkeypatch.setenv(MAX_BYTES_ENV, str(size - 1))
    profiles, errors = load_profiles(tmp_path)
    assert profiles == [] and [e.file for e in errors] == [str(good), str(huge)]
    monkeypatch.delenv(MAX_BYTES_ENV)
    export = ["export", str(tmp_path), "--format", "chrome", "--out", str(tmp_path / "o")]
    for argv in (["report", str(tmp_path)], export, ["analyze", str(tmp_path), "--dry-run"]):
        # nothing left to read
        assert main(argv + ["--max-file-mb", str((size - 1) / 2**20)]) == 1, argv
        lines = [
            line for line in capsys.readouterr().out.splitlines() if line.startswith("skipped")
        ]
        assert lines == [
            f"skipped {good}: {size} bytes is over the {size - 1} bytes size limit for profiles "
            f"(raise it with {MAX_BYTES_ENV} or --max-file-mb)",
            f"skipped {huge}: 512.0 MiB is over the {size - 1} bytes size limit for profiles "
            f"(raise it with {MAX_BYTES_ENV} or --max-file-mb)",
        ], argv


def test_invalid_size_cap_names_the_variable(tmp_path, capsys, monkeypatch):
    write_profile(model_profile(0), tmp_path, "run")
    for value in ("lots", "-5", "0", "1e9"):
        with pytest.raises(ValueError, match=MAX_BYTES_ENV):
            max_profile_bytes({MAX_BYTES_ENV: value})
        monkeypatch.setenv(MAX_BYTES_ENV, value)
        assert main(["report", str(tmp_path)]) == 2
        assert MAX_BYTES_ENV in capsys.readouterr().err
    assert (
        max_profile_bytes({MAX_BYTES_ENV: " 1024 "}) == 1024
        and max_profile_bytes({}) == DEFAULT_MAX_BYTES
    )
    with pytest.raises(SystemExit):
        main(["report", str(tmp_path), "--max-file-mb", "nan"])
    assert "--max-file-mb" in capsys.readouterr().err


def test_a_fifo_named_like_a_profile_does_not_block_readers(tmp_path):
    good = write_profile(model_profile(0), tmp_path, "run")
    fifo = good.parent / "steps-20-20.pb"
    os.mkfifo(fifo)
    assert [f.path for f in find_profiles(tmp_path)] == [good]
    caught: list = []
    reader = threading.Thread(
        target=lambda: caught.append(_error_of(lambda: read_profile(fifo))), daemon=True
    )
    reader.start()
    reader.join(5)
    assert caught and caught[0] == f"{fifo}: not a regular file"


def _error_of(call) -> str | None:
    try:
        call()
    except ProfileError as exc:
        return str(exc)
    return None


def test_series_with_mismatched_columns_is_rejected(tmp_path):
    msg = message(model_profile())
    # 700 values, 10 times: the tab's downsampling indexed past the times
    del msg.system[1].t_ns[10:]
    with pytest.raises(
        ProfileError, match="system series has times and values of different lengths"
    ):
        decode(msg.SerializeToString(), "series.pb")


def test_unlistable_directory_is_passed_over(tmp_path, monkeypatch, caplog):
    good = write_profile(model_profile(0), tmp_path, "run")
    other = write_profile(model_profile(1), tmp_path, "run")
    real_scandir = os.scandir

    def scandir(path="."):
        if Path(path) == other.parent:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)  # root may list any directory whatever its mode
    assert [f.path for f in find_profiles(tmp_path)] == [good]
    assert str(other.parent) in caplog.text and "Permission denied" in caplog.text


# --- item 5: every walk is iterative -------------------------------------------------


@pytest.mark.parametrize("recursion", [False, True], ids=["distinct", "recursion"])
def test_deep_chain_of_5000_levels_through_every_reader(recursion):
    profile = decode(encode(chain_profile(5000, recursion)), "deep.pb")
    other = decode(encode(chain_profile(5000, recursion, rank=1)), "deep1.pb")
    start = time.monotonic()
    for view in ("top-down", "bottom-up", "flat"):
        doc = report_json([profile], [], view=view)
        text = dumps(doc)
        assert text.count('"children": [') == _count_nodes(doc["profiles"][0]["tree"])
    for fmt in FORMATS:
        assert exporter(fmt)(profile, "cpu_time_ns")
    assert views.flat(profile.tree) and views.bottom_up(profile.tree, "incl", ["operator"])
    assert prune_small(profile.tree, "cpu_time_ns") and collapse_recursion(profile.tree)
    assert isinstance(analyze(profile), list) and isinstance(analyze_ranks([profile, other]), list)
    assert time.monotonic() - start < 60


def test_bottom_up_of_a_deep_chain_is_bounded_and_keeps_totals():
    """Inverting a chain N deep costs N nodes per node: bounded by a caller
    depth and a node budget, the cost kept on the deepest caller shown."""
    tree = chain_profile(2000).tree
    out = views.bottom_up(tree)
    depth = [0] * len(out)
    for node in range(1, len(out)):
        depth[node] = depth[out.parent[node]] + 1
    assert max(depth) == 1 + views.MAX_CALLERS
    assert len(out) <= 4 * len(tree) + 1024 + len(tree.frames)
    totals = {out.node_frame(k).label(): out.inclusive("cpu_time_ns")[k] for k in out.children(0)}
    assert totals["aten::mm"] == 5 * 1000 and totals["deep.py:1 f0"] == 10
    assert out.total("cpu_time_ns") == tree.total("cpu_time_ns")
    small = views.bottom_up(tree, max_nodes=100)
    assert len(small) <= 100 + len(tree.frames)
    assert {
        small.node_frame(k).label(): small.inclusive("cpu_time_ns")[k] for k in small.children(0)
    } == totals


def _count_nodes(root: dict) -> int:
    count, stack = 0, [root]
    while stack:
        node = stack.pop()
        count += 1
        stack.extend(node["children"])
    return count


def test_report_json_and_hatchet_of_a_100000_deep_chain(tmp_path, capsys):
    """`report --json` and `export --format hatchet` raised RecursionError past ~500 levels."""
    write_profile(chain_profile(100_000, recursion=True), tmp_path)
    assert main(["report", str(tmp_path), "--json"]) == 0
    out = capsys.readouterr().out
    # the root, forward, the chain, its operators
    assert out.count('"children": [') == 2 + 100_000 + 50_000
    assert out.startswith('{"version": 1, "profiles": [{"run": ".", "rank": 0')
    assert out.rstrip().endswith('"findings": []}], "errors": []}')
    assert (
        main(["export", str(tmp_path), "--format", "hatchet", "--out", str(tmp_path / "out")]) == 0
    )
    (written,) = (tmp_path / "out").iterdir()
    text = written.read_text()
    assert text.count('"children": [') == 1 + 100_000 + 50_000  # no root in Hatchet's literal
    assert text.startswith('[{"frame": {"name": "forward", "type": "phase"')


def test_nested_dumps_is_json_dumps_at_any_depth():
    from dc_core.export.nested import dumps_iteratively

    doc = report_json([model_profile()], [ProfileError("x.pb", "bad")])
    doc["odd"] = [[], {}, [[1, {"a": [None, True, 1.5, "é\x00"]}]], {"k": {"deep": [[[]]]}}]
    assert dumps_iteratively(doc) == json.dumps(doc) == dumps(doc)
    deep: list = []
    for _ in range(5000):
        deep = [deep, {"x": 1}]
    with pytest.raises(RecursionError):
        json.dumps(deep)
    assert dumps(deep) == "[" * 5000 + "[]" + ', {"x": 1}]' * 5000


# --- item 7: the source route, analyze's writes, killed writers' temporaries -------


def test_nul_in_a_frames_file_name_is_400_not_500(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    from tensorboard.plugins.base_plugin import TBContext

    from dc_core.tensorboard.plugin import DeepContextPlugin
    from dc_core.tensorboard.store import ProfileStore
    from tests.tensorboard.conftest import Api

    tree = tree_from_lists(("forward", "python:f|/w/a\x00b.py:3 @cpu_time_ns=5"))
    write_profile(Profile(tree=tree, steps=(0, 1)), tmp_path, "run")
    monkeypatch.chdir(tmp_path)
    api = Api(
        DeepContextPlugin(
            TBContext(logdir=str(tmp_path)), store=ProfileStore(tmp_path, listing_ttl_s=0)
        )
    )
    body = api.json("/source", status=400, run="run", rank=0, window="0-1", node=2)
    assert "NUL" in body["error"]


def test_analyze_on_a_read_only_logdir_is_one_line_per_file_not_a_traceback(
    tmp_path, capsys, monkeypatch
):
    paths = model_logdir(tmp_path)
    before = [p.read_bytes() for p in paths]

    def read_only(*args, **kwargs):
        raise PermissionError(errno.EROFS, "Read-only file system")

    # what mkstemp raises there (root ignores chmod)
    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    assert main(["analyze", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    errors = captured.err.strip().splitlines()
    assert len(errors) == len(paths) and "Traceback" not in captured.err
    assert sorted(errors) == sorted(
        f"error: cannot store the findings in {path}: Read-only file system (they are printed only)"
        for path in paths
    )
    assert "hotspot" in captured.out  # the findings were still computed and shown, for every file
    assert captured.out.count("run rank") == len(paths)
    assert [p.read_bytes() for p in paths] == before


@pytest.mark.parametrize("stored_rank", [3, -1])
def test_analyze_rewrites_in_place_when_the_stored_rank_differs_from_its_directory(
    tmp_path, stored_rank
):
    path = write_profile(model_profile(0), tmp_path, "run")
    moved = model_profile(0)
    moved.rank = stored_rank  # -1 would go to "-1-node-a", a directory no reader lists
    path.write_bytes(encode(moved))
    assert main(["analyze", str(tmp_path)]) == 0
    files = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert files == [str(path.relative_to(tmp_path))]
    stored = read_profile(path)
    assert stored.rank == stored_rank
    assert [f["message"] for f in stored.findings] == [
        f["message"] for f in analyze(read_profile(path))
    ]
    assert "hotspot" in {f["rule"] for f in stored.findings} and "rss grows" not in str(
        stored.findings
    )


def test_stale_temporaries_of_killed_writers_are_removed_on_the_next_write(tmp_path):
    first = write_profile(model_profile(0, (0, 1)), tmp_path)
    stale = first.parent / ".tmp-k1ll3d_x.pb.partial"
    live = first.parent / ".tmp-wr1t1ng_.pb.partial"
    foreign = first.parent / ".tmp-notours.txt"
    for path in (stale, live, foreign):
        path.write_bytes(b"partial")
    old = time.time() - STALE_TEMP_S - 60
    for path in (stale, foreign):
        os.utime(path, (old, old))
    assert [f.path for f in find_profiles(tmp_path)] == [first]  # never read
    second = write_profile(model_profile(0, (5, 8)), tmp_path)
    assert sorted(p.name for p in first.parent.iterdir()) == sorted(
        [first.name, second.name, live.name, foreign.name]
    )
