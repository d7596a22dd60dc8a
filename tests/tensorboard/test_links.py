"""What the plugin serves stays inside what it was given: profiles under the
logdir (links out of it were listed by ``/runs`` and served whole, HTTP 200,
and a link to /etc/passwd was opened), and source under the allowed roots
(a sibling sharing a root's prefix is not under it)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from tests.store.test_links import EXPECTED, PLUGIN, linked_logdir
from tests.tensorboard.conftest import Api


@pytest.fixture
def linked(tmp_path: Path):
    from tensorboard.plugins.base_plugin import TBContext

    from dc_core.tensorboard.plugin import DeepContextPlugin
    from dc_core.tensorboard.store import ProfileStore

    root, outside = linked_logdir(tmp_path)
    named = tmp_path / "latest"  # TensorBoard started on a link to the logdir
    os.symlink(root, named)
    plugin = DeepContextPlugin(
        TBContext(logdir=str(named)), store=ProfileStore(named, listing_ttl_s=0)
    )
    return root, outside, Api(plugin)


def _listed(api: Api) -> set[tuple[str, int, str, tuple[int, int]]]:
    windows = set()
    for run in api.json("/runs")["runs"]:
        for rank in run["ranks"]:
            for window in rank["windows"]:
                first, end = map(int, window.split("-"))
                windows.add((run["run"], rank["rank"], rank["host"], (first, end)))
    return windows


def test_runs_lists_no_profile_behind_a_link_out_of_the_logdir(linked, caplog):
    _, _, api = linked
    with caplog.at_level(logging.WARNING, logger="deepcontext"):
        assert _listed(api) == EXPECTED
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "not following 4 links out of the logdir" in warned and "-> '/etc/passwd'" in warned


@pytest.mark.parametrize(
    "ref",
    [
        {"run": "run", "rank": 0, "window": "9-10"},  # a profile file linked to one outside
        {"run": "run", "rank": 0, "window": "11-12"},  # a profile file linked to /etc/passwd
        {"run": "run", "rank": 1, "window": "5-8"},  # a rank directory linked to one outside
        {"run": "away", "rank": 1, "window": "5-8"},  # plugins/deepcontext linked to one outside
    ],
    ids=["file", "passwd", "rank-dir", "plugin-dir"],
)
def test_a_window_behind_an_outward_link_is_not_served(linked, ref):
    _, _, api = linked
    body = api.json("/window", status=404, **ref)
    assert body["error"].startswith("no profile for run") and "root:" not in str(body)


@pytest.mark.parametrize(
    "ref",
    [
        {"run": "run", "rank": 0, "window": "8-10"},  # a file linked to another run's
        {"run": "run", "rank": 3, "window": "5-8"},  # a rank directory linked inside
        {"run": "moved", "rank": 3, "window": "5-8"},  # plugins/deepcontext linked inside
    ],
    ids=["file", "rank-dir", "plugin-dir"],
)
def test_a_window_behind_an_inward_link_is_served(linked, ref):
    _, _, api = linked
    body = api.json("/window", **ref)
    direct = api.json(
        "/window",
        run="kept8" if ref["window"] == "8-10" else "stash/kept",
        rank=ref["rank"],
        window=ref["window"],
    )
    assert body["nodes"] == direct["nodes"] > 1 and body["totals"] == direct["totals"]


def test_a_file_swapped_for_an_outward_link_after_listing_is_refused_by_name(tmp_path):
    from tensorboard.plugins.base_plugin import TBContext

    from dc_core.tensorboard.plugin import DeepContextPlugin
    from dc_core.tensorboard.store import ProfileStore

    root, _ = linked_logdir(tmp_path)
    api = Api(
        DeepContextPlugin(TBContext(logdir=str(root)), store=ProfileStore(root, listing_ttl_s=3600))
    )
    assert ("run", 0, "node-a", (5, 8)) in _listed(api)  # the listing the next request uses
    listed = root / "run" / PLUGIN / "0-node-a" / "steps-5-7.pb"
    listed.unlink()
    os.symlink("/etc/passwd", listed)
    body = api.json("/window", status=422, run="run", rank=0, window="5-8")
    assert (
        body["error"]
        == "run/plugins/deepcontext/0-node-a/steps-5-7.pb: resolves outside the logdir; not read"
    )


# --- source roots -------------------------------------------------------------------


def test_a_sibling_sharing_the_roots_prefix_is_not_under_it(tmp_path):
    from dc_core.tensorboard.source import allowed_roots, snippet

    app, secrets = tmp_path / "srv" / "app", tmp_path / "srv" / "app-secrets"
    app.mkdir(parents=True)
    secrets.mkdir()
    (app / "model.py").write_text("def forward(x):\n    return x\n")
    (secrets / "keys.py").write_text("TOKEN = 'hunter2'\n")
    os.symlink(secrets / "keys.py", app / "linked.py")
    roots = allowed_roots({}, cwd=str(app))
    assert snippet(str(app / "model.py"), 1, roots)["lines"] == ["def forward(x):", "    return x"]
    for name in (
        str(secrets / "keys.py"),
        "../app-secrets/keys.py",
        str(app / ".." / "app-secrets" / "keys.py"),
        "linked.py",
        str(app / "linked.py"),
    ):
        refused = snippet(name, 1, roots)
        assert refused == {
            "available": False,
            "reason": "not readable under the allowed source roots "
            "(the working directory, or DEEPCONTEXT_SOURCE_ROOTS)",
        }, name
    # a root given with a trailing separator, or as a link, means the same directory
    for root in (str(app) + os.sep, str(tmp_path / "app-link")):
        if root.endswith("app-link"):
            os.symlink(app, root)
        roots = allowed_roots(
            {"DEEPCONTEXT_SOURCE_ROOTS": root}, cwd=str(tmp_path / "srv" / "elsewhere")
        )
        assert not snippet(str(secrets / "keys.py"), 1, roots)["available"]
        assert snippet(str(app / "model.py"), 1, roots)["available"]


def test_a_run_whose_name_holds_control_characters_opens_as_it_is_listed(tmp_path):
    """Regression: `/runs` listed such a run and every route refused it (400,
    "parameter 'run' holds control characters")."""
    from tensorboard.plugins.base_plugin import TBContext

    from dc_core.store.logdir import write_profile
    from dc_core.tensorboard.plugin import DeepContextPlugin
    from dc_core.tensorboard.store import ProfileStore
    from tests.tensorboard.conftest import make_profile

    name = "exp\x1b[2J\u202e\x07"
    write_profile(make_profile(tmp_path, 0, (5, 8)), tmp_path, name)
    api = Api(
        DeepContextPlugin(
            TBContext(logdir=str(tmp_path)), store=ProfileStore(tmp_path, listing_ttl_s=0)
        )
    )
    assert [r["run"] for r in api.json("/runs")["runs"]] == [name]
    assert api.json("/window", run=name, rank=0, window="5-8")["rank"] == 0
    assert api.json("/windows", run=name, rank=0, window="5-8", node=0)
    api.json("/window", status=400, run="exp\x00", rank=0, window="5-8")  # NUL is in no file name
