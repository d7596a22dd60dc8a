"""The cross-rank tree: merged paths, statistics over ranks, the summary index."""

from __future__ import annotations

import hashlib
import json
import os
import warnings

import numpy as np
import pytest

from dc_core.ensemble import PATH_SEP, cross_rank, merge
from dc_core.ensemble import index as index_mod
from dc_core.model.tree import tree_from_lists
from dc_core.store.logdir import find_profiles, write_profile
from dc_core.store.profile import Profile, ProfileError


def rank_profile(rank: int, mm: int = 100, extra: bool = False, steps=(5, 7)) -> Profile:
    """forward › step › aten::mm, plus a node only some ranks have."""
    kids = [("python:step|t.py:3", f"aten::mm @cpu_time_ns={mm},count=2")]
    if extra:
        kids.append("aten::nonzero @cpu_time_ns=40,count=1")
    tree = tree_from_lists(("forward @cpu_time_ns=10", *kids))
    return Profile(
        tree=tree, steps=steps, step_times_ns=[100 + rank, 100 + rank], rank=rank, host=f"h{rank}"
    )


def write_ranks(tmp_path, values, extra_on=(), run="r"):
    for rank, mm in enumerate(values):
        write_profile(rank_profile(rank, mm, rank in extra_on), tmp_path, run)
    return find_profiles(tmp_path)


def test_stats_over_ranks_are_exact_and_absent_counts_zero(tmp_path):
    files = write_ranks(tmp_path, [100, 100, 500], extra_on=(1,))
    e, errors = merge(files)
    assert not errors and [c.rank for c in e.columns] == [0, 1, 2]
    mm = e.find(["forward", "t.py:3 step", "aten::mm"])
    s = e.stats("cpu_time_ns")
    assert e.values("cpu_time_ns", mm).tolist() == [100, 100, 500]
    assert (s.sum[mm], s.min[mm], s.max[mm], e.columns[s.argmax[mm]].rank) == (700, 100, 500, 2)
    assert s.mean[mm] == pytest.approx(700 / 3)
    assert s.imbalance[mm] == pytest.approx((500 - 700 / 3) / 500)
    only = e.find(["forward", "aten::nonzero"])
    assert e.values("cpu_time_ns", only).tolist() == [0, 40, 0]  # absent on ranks 0 and 2: 0
    assert s.min[only] == 0 and e.columns[s.argmax[only]].rank == 1
    forward = e.find("forward")
    assert e.values("cpu_time_ns", forward).tolist() == [110, 150, 510]  # inclusive
    assert e.label(mm) == PATH_SEP.join(["forward", "t.py:3 step", "aten::mm"])
    assert e.find(e.label(mm)) == mm


def test_merged_tree_sums_exclusive_values(tmp_path):
    e, _ = merge(write_ranks(tmp_path, [100, 300], extra_on=(0,)))
    tree = e.tree()
    assert tree.value(tree.find("forward"), "cpu_time_ns") == 20
    assert tree.value(tree.find("forward", "t.py:3 step", "aten::mm"), "cpu_time_ns") == 400
    assert tree.inclusive("cpu_time_ns")[0] == 20 + 400 + 40
    excl = e.exclusive("cpu_time_ns")
    assert excl[e.find("forward")].tolist() == [10, 10]


def test_a_merged_sum_past_int64_is_held_at_its_limit_without_a_warning(tmp_path):
    big = 2**63 - 1  # a corrupt or fuzzed file's value: two ranks of it pass int64
    e, _ = merge(write_ranks(tmp_path, [big, big]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tree = e.tree()
    mm = tree.find("forward", "t.py:3 step", "aten::mm")
    assert 0 < tree.value(mm, "cpu_time_ns") <= big and tree.value(mm, "cpu_time_ns") > 2**62


def test_worker_processes_give_the_same_ensemble(tmp_path):
    files = write_ranks(tmp_path, [100 * (r + 1) for r in range(12)], extra_on=(3, 7))
    serial, _ = merge(files, workers=1)
    pooled, _ = merge(files, workers=2)
    assert pooled.parent == serial.parent and [
        pooled.node_frame(i) for i in range(len(pooled))
    ] == [serial.node_frame(i) for i in range(len(serial))]
    assert np.array_equal(pooled.incl["cpu_time_ns"], serial.incl["cpu_time_ns"])
    assert [c.rank for c in pooled.columns] == list(range(12))


def test_bad_files_are_named_and_the_rest_merged(tmp_path):
    files = write_ranks(tmp_path, [100, 200, 300])
    files[1].path.write_bytes(b"not a profile")
    e, errors = merge(files, workers=2 if len(files) >= 4 else 1)
    assert [c.rank for c in e.columns] == [0, 2]
    assert (
        len(errors) == 1 and errors[0].file == str(files[1].path) and "corrupt" in errors[0].message
    )
    # errors cross process boundaries whole (a worker's are pickled)
    import pickle

    back = pickle.loads(pickle.dumps(errors[0]))
    assert isinstance(back, ProfileError) and (back.file, back.message) == (
        errors[0].file,
        errors[0].message,
    )


def test_index_is_saved_beside_the_profiles_and_reused(tmp_path, monkeypatch):
    values = [100 + r for r in range(index_mod.INDEX_FROM)]
    files = write_ranks(tmp_path, values)
    first, _ = cross_rank(files)
    place = index_mod.index_dirs(files)[0]
    assert (place / "meta.json").is_file() and place.parent.name == ".index"
    assert find_profiles(tmp_path) == files  # the index is not taken for a rank directory
    calls = []
    monkeypatch.setattr(
        index_mod, "merge", lambda *a, **k: calls.append(1) or (_ for _ in ()).throw(AssertionError)
    )
    again, errors = cross_rank(files)
    assert not calls and not errors
    assert np.array_equal(np.asarray(again.incl["cpu_time_ns"]), first.incl["cpu_time_ns"])
    assert again.columns == first.columns and again.frames == first.frames


def test_index_is_rebuilt_when_a_rank_file_changes(tmp_path):
    values = [100] * index_mod.INDEX_FROM
    files = write_ranks(tmp_path, values)
    e, _ = cross_rank(files)
    mm = e.find(["forward", "t.py:3 step", "aten::mm"])
    assert e.stats("cpu_time_ns").max[mm] == 100
    write_profile(rank_profile(3, 900), tmp_path, "r")
    os.utime(files[3].path, ns=(1, 1))  # even if the mtime went backwards
    e, _ = cross_rank(find_profiles(tmp_path))
    assert (
        e.stats("cpu_time_ns").max[mm] == 900
        and e.columns[e.stats("cpu_time_ns").argmax[mm]].rank == 3
    )


def read_meta(place):
    return json.loads((place / "meta.json").read_bytes().split(b"\n", 1)[1])


def write_meta(place, meta):
    """Rewrite meta.json with a checksum that matches: only the structural checks can refuse it."""
    body = json.dumps(meta).encode()
    digest = hashlib.sha1(body)
    for i in range(len(meta["metrics"])):
        digest.update((place / f"{i}.npy").read_bytes())
    (place / "meta.json").write_bytes(digest.hexdigest().encode() + b"\n" + body)


@pytest.mark.parametrize(
    "damage", ["truncate_npy", "bad_json", "wrong_shape", "flipped_value", "bad_parent"]
)
def test_a_damaged_index_is_rebuilt_not_trusted(tmp_path, damage):
    files = write_ranks(tmp_path, [100 + r for r in range(index_mod.INDEX_FROM)])
    good, _ = cross_rank(files)
    place = index_mod.index_dirs(files)[0]
    meta = read_meta(place)
    if damage == "truncate_npy":
        (place / "0.npy").write_bytes((place / "0.npy").read_bytes()[:50])
    elif damage == "bad_json":
        (place / "meta.json").write_text("{" * 10_000)
    elif damage == "wrong_shape":
        np.save(place / "0.npy", np.zeros((3, 3), np.int64))
        write_meta(place, meta)
    elif damage == "flipped_value":  # a valid array with one wrong value: only the checksum tells
        data = bytearray((place / "0.npy").read_bytes())
        data[-3] ^= 0x10
        (place / "0.npy").write_bytes(bytes(data))
    else:
        meta["parent"][2] = 5
        write_meta(place, meta)
    again, _ = cross_rank(files)
    assert np.array_equal(np.asarray(again.incl["cpu_time_ns"]), good.incl["cpu_time_ns"])
    assert read_meta(place)["parent"] == good.parent  # rewritten


def test_index_goes_to_the_cache_when_the_logdir_cannot_take_it(tmp_path, monkeypatch):
    logdir = tmp_path / "logs"
    files = write_ranks(logdir, [100] * index_mod.INDEX_FROM)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    beside, cached = index_mod.index_dirs(files)
    assert cached.is_relative_to(tmp_path / "cache" / "deepcontext" / "index")
    # a file: nothing can be created under it
    beside.parent.parent.joinpath(".index").write_text("")
    cross_rank(files)
    assert (cached / "meta.json").is_file()
    calls = []
    monkeypatch.setattr(index_mod, "merge", lambda *a, **k: calls.append(1))
    e, _ = cross_rank(files)
    assert not calls and len(e.columns) == index_mod.INDEX_FROM


def test_unwritable_index_places_only_cost_time(tmp_path, monkeypatch):
    files = write_ranks(tmp_path, [100] * index_mod.INDEX_FROM)
    monkeypatch.setattr(
        index_mod, "index_dirs", lambda files: [tmp_path / "f" / "x", tmp_path / "f" / "y"]
    )
    (tmp_path / "f").write_text("a file where a directory should be")
    e, errors = cross_rank(files)
    assert not errors and len(e.columns) == index_mod.INDEX_FROM


def test_a_metric_or_node_only_later_ranks_have_is_zero_on_the_others():
    first = Profile(tree=tree_from_lists("forward @cpu_time_ns=10"), steps=(5, 7), rank=0)
    later = Profile(
        tree=tree_from_lists(("forward @cpu_time_ns=20", "aten::mm @device_time_ns=7")),
        steps=(5, 7),
        rank=1,
    )
    again = Profile(tree=tree_from_lists(("backward @cpu_time_ns=5",)), steps=(5, 7), rank=2)
    e, _ = merge([first, later, again])
    mm, backward = e.find(["forward", "aten::mm"]), e.find("backward")
    assert e.values("device_time_ns", mm).tolist() == [0, 7, 0]
    # grown past the metric's last rank
    assert e.values("device_time_ns", backward).tolist() == [
        0,
        0,
        0,
    ]
    assert e.values("cpu_time_ns", 0).tolist() == [10, 20, 5]
