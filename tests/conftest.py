"""Fixtures shared by every test: collectors of both implementations, and a
guard that fails a test which leaves a collector's sampler or monitor running."""

from __future__ import annotations

import json
import os
import tempfile
import threading

import pytest

from dc_core.collect import collector as collector_mod
from dc_core.collect import reference
from dc_core.collect.worker import WorkerThread

IMPLEMENTATIONS = ("native", "reference")
#: PyTorch's two operator capture paths; framework suites run on both.
CAPTURE_PATHS = ("native", "python")


def _collector_class(implementation: str) -> type:
    if implementation == "reference":
        return reference.Collector
    if os.environ.get("CI") == "true":
        # In CI the extension is built: failing to import it is a failure, not a skip.
        from dc_core import _native
    else:
        _native = pytest.importorskip("dc_core._native")
    return _native.Collector


def _leftovers(collectors: list, threads_before: set) -> list[str]:
    found = [f"{c!r}: sampler running" for c in collectors if c.sampler_running()]
    # The reference collector's sampler and monitor are Python threads, seen
    # however their collector was made. A native monitor cannot be seen: the
    # contract has no monitor_running(); the teardown below still stops it.
    found += [
        f"thread {t.name!r} still running"
        for t in threading.enumerate()
        if isinstance(t, WorkerThread) and t not in threads_before
    ]
    return found


@pytest.fixture(scope="session", autouse=True)
def temporary_files_in_basetemp(tmp_path_factory: pytest.TempPathFactory):
    """Temporary files, ours and those of the processes the tests start
    (torchrun's, gloo's file stores, JAX's traces), go under pytest's base
    directory, which pytest prunes, not into the machine's ``/tmp``."""
    place = str(tmp_path_factory.mktemp("tmp", numbered=False))
    before = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = place
    tempfile.tempdir = None  # read again from TMPDIR
    yield place
    if before is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = before
    tempfile.tempdir = None


@pytest.fixture(autouse=True)
def collectors_created(monkeypatch: pytest.MonkeyPatch):
    """Every collector made during the test (by ``create_collector`` or the
    ``make_collector`` fixture); after the test, none may still be sampling."""
    created: list = []
    real_create = collector_mod.create_collector

    def create_collector(*args, **kwargs):
        made = real_create(*args, **kwargs)
        created.append(made)
        return made

    monkeypatch.setattr(collector_mod, "create_collector", create_collector)
    threads_before = set(threading.enumerate())
    yield created
    leftovers = _leftovers(created, threads_before)
    for c in created:  # so that one leak does not spill into the next tests
        c.stop_sampler()
        c.stop_monitor()
    if leftovers:
        pytest.fail("test left a collector running: " + "; ".join(leftovers), pytrace=False)


@pytest.fixture(autouse=True)
def profiles_keep_their_accounts(request: pytest.FixtureRequest):
    """After every test: each profile a session wrote under its ``tmp_path``
    (in this process or a child) keeps every microsecond in its place
    (``tests/invariants.py``). Files a test made by hand are not sessions'."""
    yield
    tmp_path = request.node.funcargs.get("tmp_path")
    if tmp_path is None or "keeps_no_accounts" in request.keywords:
        return
    from dc_core.store.logdir import find_profiles, read_profile
    from dc_core.store.profile import ProfileError
    from tests.invariants import violations

    broken = []
    for file in find_profiles(tmp_path):
        try:
            profile = read_profile(file, max_bytes=1 << 30)  # not the test's own size cap
        except (ProfileError, OSError):
            continue  # a reader test's damaged file: the readers' tests judge those
        if not profile.analysis_pending:
            continue  # made by the test, not written by a session
        broken += [f"{file.path}: {v}" for v in violations(profile)]
    if broken:
        pytest.fail("profiles that lose track of time:\n  " + "\n  ".join(broken), pytrace=False)


@pytest.fixture(params=IMPLEMENTATIONS)
def make_collector(request: pytest.FixtureRequest, collectors_created: list):
    """A factory ``make_collector(**kwargs)`` for the parametrized implementation."""
    cls = _collector_class(request.param)

    def make(**kwargs):
        made = cls(**kwargs)
        collectors_created.append(made)
        return made

    return make


@pytest.fixture
def collector(make_collector):
    """A fresh collector, once per implementation (``native``, ``reference``)."""
    return make_collector()


@pytest.fixture(params=CAPTURE_PATHS)
def capture_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a PyTorch test once per operator capture path: ``native`` (the
    RecordFunction extension) and ``python`` (forced through the config knob a
    user would set). Names differ between the paths (``aten::linear`` vs
    ``torch.nn.functional.linear``): compare them with ``dc_core.model.opnames.op_name``."""
    if request.param == "python":
        monkeypatch.setenv("DEEPCONTEXT_CONFIG", json.dumps({"capture": "python"}))
    else:
        from dc_torch.native import load

        if load()[0] is None:
            reason = "native capture unavailable: " + load()[1]
            if os.environ.get("CI") == "true":
                pytest.fail(reason)  # CI builds it: failing to is a failure
            pytest.skip(reason)
    return request.param


def _cuda_present() -> bool:
    try:
        import torch
    except ImportError:
        return os.path.exists("/dev/nvidiactl")
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    """``requires_cuda`` tests run where a CUDA device is, and are skipped elsewhere."""
    marked = [item for item in items if "requires_cuda" in item.keywords]
    if marked and not _cuda_present():
        skip = pytest.mark.skip(reason="needs a CUDA device")
        for item in marked:
            item.add_marker(skip)


#: Skips CI accepts: the hardware it lacks, and a case a test's parameter makes meaningless.
ALLOWED_SKIPS = ("needs a CUDA device", "not applicable: ")


def _skip_reason(report) -> str:
    return report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)


def _ci_refuses(report) -> bool:
    """Under ``CI=true`` a skip is a failure (a missing extra, a failed build
    skips silently otherwise), unless its reason is one of `ALLOWED_SKIPS`."""
    if os.environ.get("CI") != "true" or not report.skipped:
        return False
    return not _skip_reason(report).removeprefix("Skipped: ").startswith(ALLOWED_SKIPS)


def _as_failure(report) -> None:
    report.outcome = "failed"
    report.longrepr = (
        f"skipped under CI=true, where everything is installed: {_skip_reason(report)}"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A module skipped at import (``importorskip``) fails under CI."""
    outcome = yield
    report = outcome.get_result()
    if _ci_refuses(report):
        _as_failure(report)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test skipped at run time fails under CI."""
    outcome = yield
    report = outcome.get_result()
    if _ci_refuses(report):
        _as_failure(report)


def module_calls(tree, node: int) -> int:
    """How many times the module at ``node`` ran in the window, on either capture
    path: the Python path times modules as scopes (their ``count``); the native
    path reads them from the callers' frames, so a module's calls are those of
    the operator it runs least often (once per call in the models tested)."""
    own = tree.value(node, "count")
    if own:
        return own
    counts = [
        tree.value(d, "count")
        for d in tree.preorder(node)
        if tree.node_frame(d).kind == "operator" and not tree.node_frame(d).backward
    ]
    return min((c for c in counts if c), default=0)


@pytest.fixture
def python_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    """Force PyTorch's Python capture path: for tests of that path's own hooks."""
    monkeypatch.setenv("DEEPCONTEXT_CONFIG", json.dumps({"capture": "python"}))
