"""The plugin's routes in-process (werkzeug Client on TensorBoard's WSGI app)."""

from __future__ import annotations

import pytest

from dc_core.model import kinds
from tests.tensorboard.conftest import EVIL, MIB, A, Api, make_profile


def rows_by_label(rows):
    return {r["label"]: r for r in rows}


def test_listing_names_runs_ranks_and_windows(api: Api):
    body = api.json("/runs")
    assert body["data_version"] == 2
    assert body["max_nodes_per_request"] == 256
    runs = {r["run"]: r for r in body["runs"]}
    assert set(runs) == {"run-a", "nested/run-b"}
    assert [(r["rank"], r["host"], r["windows"]) for r in runs["run-a"]["ranks"]] == [
        (0, "node-a", ["5-8", "8-10"]),
        (1, "node-a", ["5-8", "8-10"]),
    ]


def test_listing_sends_the_vocabulary_from_kinds(api: Api):
    vocabulary = api.json("/runs")["vocabulary"]
    assert vocabulary == kinds.vocabulary()
    assert vocabulary["severities"] == ["critical", "warning", "info"]
    assert vocabulary["context_kinds"] == ["python", "module", "compiled"]
    metrics = {m["name"]: (m["unit"], m["label"]) for m in vocabulary["metrics"]}
    assert metrics["cpu_time_ns"] == ("ns", "CPU time") and metrics["alloc_bytes"] == (
        "bytes",
        "Alloc bytes",
    )
    assert [m["name"] for m in vocabulary["metrics"]] == list(kinds.METRICS)  # selector order


def test_plugin_is_active_only_with_profiles(plugin, tmp_path):
    from tensorboard.plugins.base_plugin import TBContext

    from dc_core.tensorboard.plugin import DeepContextPlugin

    assert plugin.is_active()
    assert not DeepContextPlugin(TBContext(logdir=str(tmp_path / "empty"))).is_active()
    assert plugin.frontend_metadata().es_module_path == "/static/index.js"


def test_children_are_lazy_and_sorted_by_metric(api: Api):
    body = api.json("/children", **A, node=0, metric="cpu_time_ns")
    top = body["children"]["0"]
    assert [r["label"] for r in top] == ["backward", "forward", "optimizer"]  # 600 > 370 > 100
    assert body["total"] == 1070
    forward = rows_by_label(top)["forward"]
    assert forward["incl"]["cpu_time_ns"] == 370 and forward["excl"]["cpu_time_ns"] == 0
    assert forward["kids"] == 2
    # Only the requested level comes back: no grandchildren.
    deeper = api.json("/children", **A, node=forward["id"], metric="cpu_time_ns", sort="name")
    assert [r["label"] for r in deeper["children"][str(forward["id"])]] == [EVIL, "encoder"]


def test_hot_path_follows_the_heaviest_child(api: Api):
    body = api.json("/hotpath", **A, node=0, metric="device_time_ns", threshold=0.1)
    labels = {r["id"]: r["label"] for rows in body["children"].values() for r in rows}
    path = [labels.get(n, "root") for n in body["chain"]]
    assert path == [
        "root",
        "backward",
        "encoder",
        "model.py:3 forward",
        "aten::mm [backward]",
        "sgemm",
    ]
    assert body["root"]["label"] == "steps 5\u20137"


def test_flat_and_bottom_up(api: Api):
    flat = api.json("/flat", **A, metric="device_time_ns", sort="excl", kinds="kernel")
    assert [(r["label"], r["excl"]["device_time_ns"], r["nodes"]) for r in flat["rows"]] == [
        ("sgemm", 2700, 2)
    ]
    top = api.json("/bottomup", **A, metric="device_time_ns", kinds="kernel")
    sgemm = top["rows"][0]
    callers = api.json("/bottomup", **A, metric="device_time_ns", path=sgemm["id"])["rows"]
    assert [(r["label"], r["incl"]["device_time_ns"]) for r in callers] == [
        ("aten::mm [backward]", 1800),
        ("aten::mm", 900),
    ]


def test_node_details_pair_forward_and_backward_by_context(api: Api):
    tree = api.json("/search", **A, q="aten::mm [backward]")
    node = tree["matches"][0]["id"]
    body = api.json("/node", **A, node=node, metric="cpu_time_ns")
    assert [p["label"] for p in body["path"]] == [
        "backward",
        "encoder",
        "model.py:3 forward",
        "aten::mm [backward]",
    ]
    split = {p["phase"]: p["incl"]["cpu_time_ns"] for p in body["split"]["phases"]}
    assert split == {"forward": 350, "backward": 600}
    assert body["split"]["context"] == "model.py:3 forward"


def test_search_returns_paths_to_reveal(api: Api):
    body = api.json("/search", **A, q="SGEMM", metric="device_time_ns")
    assert body["count"] == 2
    assert [m["incl"] for m in body["matches"]] == [1800, 900]
    assert all(len(m["path"]) == 5 and m["path"][-1] == m["id"] for m in body["matches"])


def test_flame_is_preorder_and_pruned(api: Api):
    body = api.json("/flame", **A, node=0, metric="cpu_time_ns", min=0.05)
    labels = [n["label"] for n in body["nodes"]]
    assert labels[0] == "steps 5\u20137" and labels[1] == "backward"  # heaviest first
    assert "aten::add" not in labels  # 20 of 1070 is under 5%
    ids = {n["id"] for n in body["nodes"]}
    assert body["nodes"][0]["parent"] == -1 and all(n["parent"] in ids for n in body["nodes"][1:])
    backward = body["nodes"][1]
    assert (backward["incl"], backward["excl"]) == (600, 0)
    mm = next(n for n in body["nodes"] if n["label"] == "aten::mm [backward]")
    assert (mm["incl"], mm["excl"], mm["kind"], mm["backward"]) == (600, 600, "operator", True)
    zoomed = api.json("/flame", **A, node=body["nodes"][1]["id"], metric="cpu_time_ns")
    assert [a["label"] for a in zoomed["ancestors"]] == []  # backward sits under the root only
    assert zoomed["nodes"][0]["label"] == "backward"


def test_diff_sorts_by_biggest_change(api: Api):
    body = api.json(
        "/diff", **A, b_run="run-a", b_rank=1, b_window="5-8", metric="cpu_time_ns", threshold=0
    )
    assert (body["total_a"], body["total_b"]) == (1070, 1370)  # rank 1 doubles forward mm
    top = body["children"]["0"]
    assert top[0]["label"] == "forward" and top[0]["b"] - top[0]["a"] == 300
    more = api.json(
        "/diff/children",
        **A,
        b_run="nested/run-b",
        b_rank=0,
        b_window="5-8",
        node=top[0]["id"],
        metric="cpu_time_ns",
    )
    assert more["children"][str(top[0]["id"])][0]["label"] == "encoder"


def test_ranks_and_window_overview(api: Api):
    ranks = api.json("/ranks", run="run-a", window="5-8", metric="cpu_time_ns")
    assert [(r["rank"], r["totals"]["cpu_time_ns"]) for r in ranks["ranks"]] == [
        (0, 1070),
        (1, 1370),
    ]
    assert ranks["phases"] == ["backward", "forward", "optimizer"]
    window = api.json("/window", **A)
    # present, in KINDS order
    assert window["kinds"] == [
        "python",
        "module",
        "operator",
        "kernel",
        "phase",
    ]
    assert window["metrics"] == ["cpu_time_ns", "device_time_ns", "count"]
    assert window["step_times_ns"] == [10_000_000, 12_000_000, 30_000_000]
    assert window["system"][0]["values"] == [20.0, 80.0, 50.0]
    assert window["findings"][0]["label"] == EVIL


def test_window_series_are_rates_and_named_by_core(api: Api):
    """A counter (bytes read since the process started) comes as bytes per
    second between samples, at the later sample; cores are "cpu N"."""
    system = api.json("/window", **A)["system"]
    assert [(s["name"], s["label"], s["unit"], s["rate"]) for s in system] == [
        ("cpu_percent", "all", "%", False),
        ("cpu_percent", "cpu 0", "%", False),
        ("cpu_percent", "cpu 1", "%", False),
        ("disk_read_bytes", "all", "bytes/s", True),
    ]
    disk = system[3]
    # 50 MiB in 0.5 s, then 100 MiB
    assert disk["t_s"] == [0.5, 1.0] and disk["values"] == [
        100 * MIB,
        200 * MIB,
    ]


def test_a_counter_that_restarts_reads_zero_not_negative():
    from dc_core.tensorboard.overview import rates

    assert rates([0, 10**9, 2 * 10**9, 2 * 10**9], [100, 50, 150, 900]) == (
        [10**9, 2 * 10**9],
        [0.0, 100.0],
    )


def test_source_only_from_allowed_roots(api: Api):
    found = api.json("/search", **A, q="model.py")["matches"][0]
    snippet = api.json("/source", **A, node=found["id"])
    assert (
        snippet["available"]
        and snippet["lines"][snippet["line"] - snippet["first"]] == "def forward(x):"
    )
    forged = api.json("/search", **A, q="step")["matches"][0]  # names /etc/passwd
    refused = api.json("/source", **A, node=forged["id"])
    assert not refused["available"] and "root:" not in str(refused)


def test_static_assets_are_served_one_by_one(api: Api):
    index = api.get("/static/index.js")
    assert index.status_code == 200 and index.mimetype == "text/javascript"
    assert b"export async function render" in index.data
    assert api.get("/static/style.css").mimetype == "text/css"
    assert api.get("/static/plugin.py").status_code == 404
    assert api.get("/static/../plugin.py").status_code == 404


@pytest.mark.parametrize(
    "query",
    [
        {"run": "run-a", "rank": "zero", "window": "5-8", "node": "0"},
        {"run": "run-a", "rank": "0", "window": "5_8", "node": "0"},
        {"run": "run-a", "rank": "0", "window": "8-5", "node": "0"},
        {"run": "run-a", "rank": "0", "window": "5-8", "node": "99999"},
        {"run": "run-a", "rank": "0", "window": "5-8", "node": "-1"},
        {"run": "run-a", "rank": "0", "window": "5-8", "node": "1,x"},
        {"run": "run-a", "rank": "0", "window": "5-8", "node": "0", "metric": "__class__"},
        {"run": "run-a", "rank": "0", "window": "5-8", "node": "0", "limit": "1e9"},
        {"run": "run-a", "rank": "0", "window": "5-8", "node": "0", "sort": "drop table"},
        {"rank": "0", "window": "5-8", "node": "0"},
        {"run": "run-a\x00", "rank": "0", "window": "5-8", "node": "0"},
    ],
)
def test_malformed_parameters_are_400(api: Api, query):
    body = api.json("/children", status=400, **query)
    assert body["error"] and "Traceback" not in body["error"]


@pytest.mark.parametrize(
    "run", ["..", "../logs/run-a", "/etc", "run-a/../../x", "run-a/./x", "C:\\x", "..\\..\\x"]
)
def test_paths_out_of_the_logdir_are_400(api: Api, run):
    assert "run" in api.json("/window", status=400, run=run, rank=0, window="5-8")["error"]
    assert api.json("/ranks", status=400, run=run, window="5-8", metric="count")["error"]


def test_bad_numbers_and_unknown_windows(api: Api):
    api.json("/flame", status=400, **A, min="nan")
    api.json("/hotpath", status=400, **A, threshold="2")
    api.json("/bottomup", status=400, **A, kinds="operator,<script>")
    assert (
        "no profile" in api.json("/window", status=404, run="run-a", rank=7, window="5-8")["error"]
    )


def test_kind_filters_accept_exactly_the_vocabulary_kinds(api: Api):
    for kind in kinds.KINDS:
        api.json("/flat", **A, kinds=kind)
    compiled = api.json("/flat", **A, kinds="compiled")
    assert (compiled["count"], compiled["rows"]) == (0, [])
    both = api.json("/flat", **A, metric="cpu_time_ns", kinds="module,python")
    assert {r["kind"] for r in both["rows"]} == {"module", "python"}
    assert "frame kinds" in api.json("/flat", status=400, **A, kinds="operator,graph")["error"]


def test_hostile_names_travel_as_json_strings(api: Api):
    response = api.get("/children", **A, node=1)
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert EVIL in [r["label"] for r in response.get_json()["children"]["1"]]


def test_corrupt_file_is_422_and_listed(api: Api, logdir):
    bad = logdir / "run-a" / "plugins" / "deepcontext" / "0-node-a" / "steps-20-21.pb"
    bad.write_bytes(b"\x08\x99garbage")
    body = api.json("/window", status=422, run="run-a", rank=0, window="20-22")
    assert "steps-20-21.pb" in body["error"] and str(logdir) not in body["error"]
    assert "run-a/plugins/deepcontext/0-node-a/steps-20-21.pb" in api.json("/runs")["errors"]


def test_every_static_file_is_routed_and_every_import_resolves():
    import re
    from importlib import resources

    from dc_core.tensorboard.plugin import STATIC_FILES

    static = resources.files("dc_core.tensorboard").joinpath("static")
    shipped = {p.name for p in static.iterdir() if p.is_file()}
    assert shipped == set(STATIC_FILES)
    for name in shipped:
        imports = re.findall(r'from "\./([\w.]+)"', static.joinpath(name).read_text())
        assert set(imports) <= shipped, name


def test_file_over_the_size_cap_is_422_and_named(api: Api, plugin, logdir):
    from dc_core.tensorboard.store import ProfileStore

    plugin.store = ProfileStore(logdir, listing_ttl_s=0, max_bytes=100)
    body = api.json("/window", status=422, **A)
    assert body["error"].startswith("run-a/plugins/deepcontext/0-node-a/steps-5-7.pb: ")
    assert "over the 100 bytes size limit" in body["error"] and str(logdir) not in body["error"]
    assert api.json("/ranks", run="run-a", window="5-8", metric="count")["errors"][
        "0-node-a"
    ].endswith("(raise it with DEEPCONTEXT_MAX_PROFILE_BYTES or --max-file-mb)")


def test_invalid_size_cap_is_logged_and_the_default_used(logdir, monkeypatch, caplog):
    from dc_core.store.logdir import DEFAULT_MAX_BYTES
    from dc_core.tensorboard.store import ProfileStore

    monkeypatch.setenv("DEEPCONTEXT_MAX_PROFILE_BYTES", "half a gig")
    store = ProfileStore(logdir)
    assert store.max_bytes == DEFAULT_MAX_BYTES
    assert "DEEPCONTEXT_MAX_PROFILE_BYTES='half a gig'" in caplog.text


def test_odd_rank_directories_leave_the_tab_on(api: Api, plugin, logdir):
    good = logdir / "run-a" / "plugins" / "deepcontext" / "0-node-a" / "steps-5-7.pb"
    for name in ("²-vm", "٣-vm"):
        (good.parent.parent / name).mkdir()
        (good.parent.parent / name / "steps-5-7.pb").write_bytes(good.read_bytes())
    assert plugin.is_active()
    runs = {r["run"]: r for r in api.json("/runs")["runs"]}
    assert [r["rank"] for r in runs["run-a"]["ranks"]] == [0, 1]


@pytest.mark.parametrize("depth", [5_000, 100_000])
def test_routes_walk_a_deep_chain_without_recursion(tmp_path, depth, monkeypatch):
    from tensorboard.plugins.base_plugin import TBContext

    from dc_core.store.logdir import write_profile
    from dc_core.tensorboard.plugin import DeepContextPlugin
    from dc_core.tensorboard.store import ProfileStore
    from tests.reliability.test_readers import chain_profile

    write_profile(chain_profile(depth), tmp_path, "deep")
    write_profile(chain_profile(depth // 2, rank=1), tmp_path, "deep")
    monkeypatch.chdir(tmp_path)
    api = Api(
        DeepContextPlugin(
            TBContext(logdir=str(tmp_path)), store=ProfileStore(tmp_path, listing_ttl_s=0)
        )
    )
    ref = {"run": "deep", "rank": 0, "window": "0-1"}
    # the root, forward, the chain and its operators: the deepest frame's id
    last = depth + depth // 2 + 1
    hot = api.json("/hotpath", **ref, metric="cpu_time_ns", threshold=0)
    assert len(hot["chain"]) == 256  # capped, as the tab expands it level by level
    node = api.json("/node", **ref, node=last, metric="cpu_time_ns")
    assert (
        len(node["path"]) == depth + 1
        and node["path"][-1]["label"] == f"deep.py:{depth} f{depth - 1}"
    )
    assert node["split"]["context"] == f"deep.py:{depth} f{depth - 1}"
    found = api.json("/search", **ref, q="aten::mm", limit=500)
    assert (
        found["count"] == depth // 2
        and sum(len(m["path"]) for m in found["matches"]) <= 100_000 + depth + 1
    )
    # forward, f*, aten::mm
    assert api.json("/flat", **ref, metric="cpu_time_ns")["count"] == depth + 2
    # frame 3: aten::mm, interned after f0
    callers = api.json("/bottomup", **ref, path=3, limit=2000)
    assert callers["count"] == depth // 2 and callers["rows"][0]["label"] == "deep.py:1 f0"
    assert len(api.json("/flame", **ref, min=0, max=20000)["nodes"]) == min(20000, last + 1)
    assert api.json("/diff", **ref, b_run="deep", b_rank=1, b_window="0-1")[
        "total_a"
    ] == 10 * depth + 5 * (depth // 2)
    assert [r["rank"] for r in api.json("/ranks", run="deep", window="0-1")["ranks"]] == [0, 1]
    assert api.json("/window", **ref)["nodes"] == last + 1


def test_window_and_ranks_say_the_directory_rank_not_the_one_stored_in_the_file(
    api: Api, logdir, src
):
    from dc_core.store.logdir import write_profile

    path = write_profile(make_profile(src, 2147483647, (20, 21)), logdir, "moved")
    path.parent.rename(path.parent.with_name("3-node-a"))  # the file now sits in rank 3's directory
    window = api.json("/window", run="moved", rank=3, window="20-21")
    assert (window["rank"], window["stored_rank"]) == (3, 2147483647)
    ranks = api.json("/ranks", run="moved", window="20-21", metric="count")["ranks"]
    assert [(r["rank"], r["stored_rank"]) for r in ranks] == [(3, 2147483647)]
    assert "stored_rank" not in api.json("/window", **A)  # said only where the two differ
    assert all(
        "stored_rank" not in r for r in api.json("/ranks", run="run-a", window="5-8")["ranks"]
    )
