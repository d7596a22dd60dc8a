"""A fuzzed reader: real profiles, written by the project's own writer, are
mutated (bit flips, truncation, inserted and deleted bytes, huge declared
lengths, parent cycles, out-of-range references, odd strings, deep chains,
huge and negative numbers, bad evidence) and fed to every reader: `decode`,
the report (table and JSON, every view), each exporter, the processors, the
analyzer, the cross-rank merge, the CLI commands and the TensorBoard plugin's
routes. A damaged cross-rank index (its JSON and its arrays) is rebuilt, never
trusted. Hostile logdir layouts (links in and out at every level, dangling
and looping, names with control and bidi characters) are listed, reported
and served from inside the logdir only.

Each case either gives a result or a *named* error (`ProfileError` naming the
file; HTTP 4xx naming it, never 500) within `TIME_LIMIT_S`, and its peak
resident memory grows by less than `MEMORY_LIMIT`.

The harness (settings, bounds, corpus, mutations) is `tests.reliability.fuzzing`.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dc_core.analyzer import analyze, analyze_ranks
from dc_core.cli import main, present
from dc_core.ensemble import cross_rank, merge
from dc_core.ensemble.index import INDEX_FROM, index_dirs
from dc_core.ensemble.rows import merged_json
from dc_core.export import FORMATS, exporter
from dc_core.export.nested import dumps
from dc_core.model import views
from dc_core.model.kinds import MEMORY_CATEGORIES
from dc_core.model.processors import collapse_recursion, filter_kinds, merge_ranks, prune_small
from dc_core.store.logdir import find_profiles, write_profile
from dc_core.store.profile import Profile, ProfileError, decode, encode
from tests.reliability.fuzzing import (
    BYTEWISE,
    CASE,
    CONTROLS,
    LAYOUT,
    bounded,
    build_layout,
    corpus,
    decoded,
    fuzz,
    mutate,
)
from tests.reliability.test_readers import model_profile

# --- decode -------------------------------------------------------------------------


@fuzz("decode")
@given(**CASE)
def test_decode_reads_a_tree_or_names_the_file(base, mutations):
    data = mutate(corpus()[base], mutations)
    with bounded(f"decode {mutations!r:.300}"):
        result = decoded(data, "fuzzed.pb")
    if isinstance(result, Profile):  # what every reader may then rely on
        tree = result.tree
        assert tree.parent[0] == -1 and all(0 <= p < i for i, p in enumerate(tree.parent) if i)
        assert all(0 <= f < len(tree.frames) for f in tree.frame) and len(tree.frame) == len(tree)
        assert all(len(column) == len(tree) for column in tree.excl.values())
        assert all(isinstance(f["evidence"], dict) for f in result.findings)
        for m in result.memory:  # a peak node is one of the tree's, or unknown
            assert m.peak_node == -1 or 0 <= m.peak_node < len(tree)
            assert m.peak_step >= -1 and len(m.timeline_t_ns) == len(m.timeline_bytes)
        assert decode(encode(result)).tree.parent == tree.parent  # analyze can store it back


# --- the readers in-process ----------------------------------------------------------


@fuzz("readers")
@given(**CASE)
def test_report_exporters_and_analyzer_give_a_result(base, mutations):
    data = mutate(corpus()[base], mutations)
    profile = decoded(data, "fuzzed.pb")
    if isinstance(profile, ProfileError):
        return
    other = decode(corpus()[1], "other.pb")
    with bounded(f"readers {mutations!r:.300}"):
        tree = profile.tree
        metric = present.default_metric(tree)
        for view in ("top-down", "bottom-up", "flat"):
            doc = present.report_json([profile], [], view=view, min_fraction=0.0)
            assert dumps(doc).startswith('{"version": 1, "profiles": [{"run": ')
            shown = views.view(tree, view)
            rows = present.tree_rows(shown, metric, None, 0.0, 60)
            assert all(r.depth >= 0 and r.frame in shown.tree.frames for r in rows)
        for fmt in FORMATS:
            for chosen in (metric, "flops"):
                assert isinstance(exporter(fmt)(profile, chosen), bytes)
        rows = views.flat(tree)
        assert sum(r.nodes for r in rows) == len(tree) - 1
        views.bottom_up(tree, "incl", ["operator"])
        (
            prune_small(tree, metric),
            collapse_recursion(tree),
            filter_kinds(tree, ["native", "kernel"]),
        )
        merged = merge_ranks([tree, other.tree], [profile.rank, other.rank])
        assert merged.total(metric) == tree.total(metric) + other.tree.total(metric)
        present.rank_top_frames([profile, other], metric)
        for device in profile.memory:
            assert present.memory_line(profile, device).startswith("peak ")
            shown_memory = present.memory_json(profile, device)
            assert set(shown_memory["categories"]) == set(MEMORY_CATEGORIES)
        present.rank_step_stats([profile, other])
        findings = analyze(profile)
        assert all(f["rule"] and f["severity"] in ("critical", "warning", "info") for f in findings)
        analyze_ranks([profile, other])
        ensemble, _ = merge([profile, other])
        expected = tree.inclusive(metric)[0] + other.tree.inclusive(metric)[0]
        assert ensemble.stats(metric).sum[0] == pytest.approx(expected) or expected >= 2**63
        ensemble.tree()
        assert dumps(merged_json(ensemble, metric)).startswith('{"run": ')


# --- the cross-rank summary index ------------------------------------------------------


@pytest.fixture(scope="module")
def indexed_window(tmp_path_factory):
    """A window of `INDEX_FROM` ranks, its merged ensemble and its saved index."""
    root = tmp_path_factory.mktemp("index")
    for rank in range(INDEX_FROM):
        write_profile(model_profile(rank, scale=1 + rank % 3), root, "run")
    files = find_profiles(root)
    good, _ = cross_rank(files)
    place = index_dirs(files)[0]
    saved = {name: (place / name).read_bytes() for name in ("meta.json", "0.npy")}
    return files, good, place, saved


@fuzz("index")
@given(
    mutations=st.lists(
        st.tuples(
            st.sampled_from(["meta.json", "0.npy"]), st.sampled_from(sorted(BYTEWISE)), st.data()
        ),
        min_size=1,
        max_size=3,
    )
)
def test_a_damaged_index_is_rebuilt_and_never_trusted(indexed_window, mutations):
    files, good, place, saved = indexed_window
    damaged = dict(saved)
    for name, how, data in mutations:
        damaged[name] = BYTEWISE[how][0](damaged[name], *data.draw(BYTEWISE[how][1]))
    place.mkdir(parents=True, exist_ok=True)
    for name, content in damaged.items():
        (place / name).write_bytes(content)
    with bounded(f"index {mutations!r:.300}"):
        again, errors = cross_rank(files)
    assert not errors and again.parent == good.parent and again.columns == good.columns
    assert all(np.array_equal(np.asarray(again.incl[m]), good.incl[m]) for m in good.incl)


# --- the CLI -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def cli_logdir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cli")
    write_profile(model_profile(0), root, "run")
    write_profile(model_profile(1, scale=3), root, "run")
    return root


def _run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        status = main(argv)
    return status, out.getvalue()


@fuzz("cli")
@given(
    **CASE,
    view=st.sampled_from(["top-down", "bottom-up", "flat"]),
    fmt=st.sampled_from(FORMATS),
    dry_run=st.booleans(),
)
def test_cli_names_the_bad_file_and_goes_on(cli_logdir, base, mutations, view, fmt, dry_run):
    data = mutate(corpus()[base], mutations)
    bad = cli_logdir / "run" / "plugins" / "deepcontext" / "1-node-a" / "steps-20-20.pb"
    bad.write_bytes(data)
    rejected = isinstance(decoded(data, str(bad)), ProfileError)
    out_dir = cli_logdir.parent / "cli-out"
    commands = [
        ["report", str(cli_logdir), "--view", view, "--min-percent", "0"],
        ["report", str(cli_logdir), "--json", "--view", view],
        ["export", str(cli_logdir), "--format", fmt, "--out", str(out_dir)],
        ["analyze", str(cli_logdir), "--json"] + (["--dry-run"] if dry_run else []),
    ]
    try:
        for argv in commands:
            with bounded(f"{' '.join(argv[:1] + argv[2:])} {mutations!r:.300}"):
                status, text = _run(argv)
            assert status in (0, 1), (argv, text[-2000:])
            flat_text = text.replace("\n", "")
            if rejected:
                assert str(bad) in flat_text, (argv, text[-2000:])  # named...
            assert any(
                good in flat_text
                for good in ("steps-5-7", "steps5-7", '"steps": [5, 8]', "steps 5")
            ), argv
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


# --- the TensorBoard plugin ----------------------------------------------------------


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory):
    pytest.importorskip("tensorboard")
    from tensorboard.plugins.base_plugin import TBContext

    from dc_core.tensorboard.plugin import DeepContextPlugin
    from tests.tensorboard.conftest import Api

    root = tmp_path_factory.mktemp("plugin")
    write_profile(model_profile(0), root, "run")
    write_profile(model_profile(1, scale=3), root, "run")
    plugin = DeepContextPlugin(TBContext(logdir=str(root)))
    return root, plugin, Api(plugin)


@fuzz("plugin")
@given(**CASE, query=st.sampled_from(["a", "mm", "\u00b2", "forward"]))
def test_plugin_answers_4xx_never_500(plugin_env, base, mutations, query):
    from dc_core.tensorboard.store import ProfileStore

    root, plugin, api = plugin_env
    data = mutate(corpus()[base], mutations)
    bad = root / "run" / "plugins" / "deepcontext" / "1-node-a" / "steps-20-20.pb"
    bad.write_bytes(data)
    plugin.store = ProfileStore(root, listing_ttl_s=0)  # nothing cached from the previous case
    profile = decoded(data, "fuzzed.pb")
    size = len(profile.tree) if isinstance(profile, Profile) else 1
    ref = {"run": "run", "rank": 1, "window": "20-21"}
    nodes = sorted({0, min(1, size - 1), size // 2, size - 1})
    requests = [
        ("/runs", {}),
        ("/window", ref),
        ("/children", {**ref, "node": ",".join(map(str, nodes))}),
        ("/hotpath", ref),
        ("/flat", {**ref, "sort": "name"}),
        ("/flat", {**ref, "kinds": "operator"}),
        ("/bottomup", ref),
        ("/search", {**ref, "q": query}),
        ("/flame", {**ref, "min": 0}),
        ("/diff", {**ref, "b_run": "run", "b_rank": 0, "b_window": "5-8"}),
        (
            "/diff",
            {
                "run": "run",
                "rank": 0,
                "window": "5-8",
                "b_run": "run",
                "b_rank": 1,
                "b_window": "20-21",
            },
        ),
        ("/diff/children", {**ref, "b_run": "run", "b_rank": 0, "b_window": "5-8", "node": 0}),
        ("/ranks", {"run": "run", "window": "20-21", "metric": "count"}),
    ]
    requests += [(route, {**ref, "node": n}) for n in nodes for route in ("/node", "/source")]
    # the same bytes as rank 2 of the two-rank window 5-7: the merged routes read it too
    (root / "run" / "plugins" / "deepcontext" / "2-node-a").mkdir(exist_ok=True)
    (root / "run" / "plugins" / "deepcontext" / "2-node-a" / "steps-5-7.pb").write_bytes(data)
    merged = {"run": "run", "window": "5-8"}
    requests += [
        ("/allranks", merged),
        ("/allranks/children", {**merged, "node": 0}),
        ("/allranks/node", {**merged, "node": 1}),
        ("/allranks/locate", {**merged, "node": 1, "rank": 0}),
        ("/windows", {**merged, "rank": 0, "node": 1, "from": "all"}),
        ("/windows", {**ref, "node": min(1, size - 1)}),
    ]
    with bounded(f"plugin {mutations!r:.300}"):
        for route, query_args in requests:
            response = api.get(route, **query_args)
            body = response.get_json()
            assert response.status_code in (200, 400, 404, 422), (route, response.status_code, body)
            if response.status_code == 422:
                assert "run/plugins/deepcontext/1-node-a/steps-20-20.pb" in body["error"], (
                    route,
                    body,
                )
            # the bad rank named, the others merged
            if route == "/allranks" and not isinstance(profile, Profile):
                assert any("2-node-a/steps-5-7.pb" in name for name in body["errors"]), body[
                    "errors"
                ]
            if isinstance(profile, Profile) and route != "/source":
                assert response.status_code == 200, (route, body)
            if route == "/bottomup" and response.status_code == 200 and body["rows"]:
                deeper = api.get(route, **ref, path=body["rows"][0]["id"])
                assert deeper.status_code == 200, deeper.get_json()
        # the others still served
        assert api.json("/window", run="run", rank=0, window="5-8")["nodes"] > 1


# --- hostile logdir layouts ------------------------------------------------------------


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    """A fresh directory per case (hypothesis runs many cases in one test call)."""
    base, count = tmp_path_factory.mktemp("layouts"), itertools.count()

    def make() -> Path:
        place = base / str(next(count))
        place.mkdir()
        return place

    return make


def _inside(path: Path, root: Path) -> bool:
    return os.path.commonpath([os.path.realpath(path), os.path.realpath(root)]) == os.path.realpath(
        root
    )


@fuzz("layout")
@given(links=LAYOUT, named_by_link=st.booleans())
def test_a_hostile_layout_is_read_from_inside_the_logdir_only(layouts, links, named_by_link):
    _check_layout(layouts(), links, named_by_link)


def test_every_control_and_bidi_character_in_a_name_is_read_and_shown_escaped(tmp_path):
    kinds = itertools.cycle(
        itertools.product(["file", "rank", "plugin", "run"], ["in", "out", "passwd", "dangling"])
    )
    _check_layout(tmp_path, [(*next(kinds), f"x{char}y") for char in CONTROLS], named_by_link=True)


def _check_layout(place: Path, links: list[tuple[str, str, str]], named_by_link: bool) -> None:
    """`build_layout` under ``place``: only what lies inside the logdir is
    listed, reported and served; every link out is named; names are escaped."""
    pytest.importorskip("tensorboard")
    from tensorboard.plugins.base_plugin import TBContext

    from dc_core.tensorboard.plugin import DeepContextPlugin
    from dc_core.tensorboard.store import ProfileStore
    from tests.tensorboard.conftest import Api

    root, outside = place / "logs", place / "outside"
    out = build_layout(root, outside, links)
    given_dir = root
    if named_by_link:
        given_dir = place / "latest"
        os.symlink(root, given_dir)
    try:
        with bounded(f"layout {links!r:.300}"):
            outward = []
            files = find_profiles(given_dir, outward)
            assert all(_inside(f.path, root) for f in files)
            assert {link.path.relative_to(given_dir).as_posix() for link in outward} == out
            assert {("run", 0), ("stash", 3)} <= {(f.run, f.rank) for f in files}
            status, text = _run(["report", str(given_dir), "--json"])
            assert status == 0 and "Traceback" not in text, text[-2000:]
            doc = json.loads(text[text.index('{"version"') :])
            assert len(doc["profiles"]) + len(doc["errors"]) == len(files)
            assert not doc["errors"] and "root:" not in text
            status, text = _run(["report", str(given_dir)])
            assert status == 0 and "Traceback" not in text
            # escaped
            assert not any(char in text for char in CONTROLS if char != "\n"), repr(text[-2000:])
            api = Api(
                DeepContextPlugin(
                    TBContext(logdir=str(given_dir)), store=ProfileStore(given_dir, listing_ttl_s=0)
                )
            )
            runs = api.json("/runs")["runs"]
            served = {
                (r["run"], rank["rank"], w)
                for r in runs
                for rank in r["ranks"]
                for w in rank["windows"]
            }
            assert served == {(f.run, f.rank, f"{f.steps[0]}-{f.steps[1]}") for f in files}
            # every run listed opens, whatever its name holds
            for run, rank, window in sorted(served):
                response = api.get("/window", run=run, rank=rank, window=window)
                assert response.status_code == 200, (run, response.get_json())
    finally:
        shutil.rmtree(place, ignore_errors=True)
