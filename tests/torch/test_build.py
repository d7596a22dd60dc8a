"""The capture extension's cache: one entry per environment, imported as built,
and never compiled inside a user's step."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from dc_torch import native

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def capture_path() -> str:
    """Once, not per capture path: these tests are about the build."""
    return "native"


def test_the_key_tells_environments_apart_and_is_stable_within_one(monkeypatch):
    here = native.build_key()
    assert native.build_key() == here
    # a second environment, same torch version
    monkeypatch.setattr(sys, "prefix", "/opt/another-venv")
    assert native.build_key() != here
    monkeypatch.undo()
    # another installation
    monkeypatch.setattr(torch, "__file__", "/opt/another-site/torch/__init__.py")
    assert native.build_key() != here
    monkeypatch.undo()
    native._compiler.cache_clear()  # read once per process
    monkeypatch.setenv("CXX", "clang++-no-such-compiler")
    try:
        assert native.build_key() != here
    finally:
        monkeypatch.undo()
        native._compiler.cache_clear()
    assert native.build_key() == here


def _python(
    script: str, cache: Path | None = None, timeout: float = 120, python: str = sys.executable
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "DEEPCONTEXT_CONFIG"}
    env["PYTHONPATH"] = str(ROOT)
    if cache is not None:
        env["DEEPCONTEXT_CACHE"] = str(cache)
    return subprocess.run(
        [python, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=ROOT,
    )


def test_a_built_entry_is_imported_as_it_is_without_ninja_or_setuptools():
    if native.load()[0] is None:
        pytest.fail("the suite's install builds the extension: " + native.load()[1])
    done = _python("""
        import json, sys
        from dc_torch import native
        module, why = native.load()
        print(json.dumps([module is not None, why, sorted(m for m in sys.modules
                          if m.split(".")[0] in ("setuptools", "distutils") or m == "torch.utils.cpp_extension")]))
    """)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [True, "", []]


@pytest.fixture(scope="module")
def second(tmp_path_factory) -> tuple[str, Path]:
    """A second environment and a cache of its own, empty until a test builds
    its entry there (the background build below, else the test that needs it):
    a build takes 20 s, so the module's two builds of it are one."""
    root = tmp_path_factory.mktemp("second")
    return _second_environment(root / "venv"), root / "cache"


@pytest.mark.slow
def test_a_missing_build_runs_in_the_background_and_the_next_window_is_native(tmp_path, second):
    """A fresh cache: the first window takes the Python path at once (its step
    pays nothing for the build), the build runs in a process of its own, and
    the first window after it has finished is native. (In the second
    environment, whose cache nothing has built into yet.)"""
    python, cache = second
    if cache.exists():
        pytest.fail(f"{cache} was meant to be fresh: the test that built there ran first")
    done = _python(
        f"""
        import time, torch
        import dc_torch
        from dc_torch import native
        from dc_core.record.config import StepRange

        model = torch.nn.Linear(8, 8)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(4, 8)

        def step():
            model(x).sum().backward()
            opt.step()
            prof.step()

        # a window of one step every 4 steps: one every 2 s while the build runs
        with dc_torch.profile(logdir={str(tmp_path)!r}, steps=StepRange(start=0, count=1, every=4, repeat=0),
                              cpu_sampling_hz=0, system_interval_ms=0) as prof:
            deadline = time.monotonic() + 600
            while native.load()[0] is None and time.monotonic() < deadline:
                step()
                time.sleep(0.5)
            for _ in range(8):  # a whole window opened after the build
                step()
        print(native.load()[0] is not None)
    """,
        cache=cache,
        timeout=900,
        python=python,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("True"), done.stdout + done.stderr
    assert (
        done.stderr.count(
            "building its native operator capture for this environment in the background"
        )
        == 1
    )
    from dc_core.store.logdir import load_profiles

    profiles, errors = load_profiles(tmp_path)
    assert not errors
    by_step = sorted(profiles, key=lambda p: p.steps)
    first, last = by_step[0], by_step[-1]
    assert first.steps == (0, 1) and first.env["capture"].startswith(
        "python (the native capture is being built"
    )
    assert last.env["capture"].startswith("native")
    [entry] = (cache / "torch-capture").iterdir()
    assert (entry / "built").is_file() and list(entry.glob("build-*.log"))


#: What a process that loads the extension reports: the entry it imported, and
#: whether anything of a build (cpp_extension, setuptools) was imported for it.
_LOAD = """
    import json, sys
    from dc_torch import native
    module, why = native.load()
    print(json.dumps([getattr(module, "__file__", None), why,
                      any(m == "torch.utils.cpp_extension" or m.split(".")[0] == "setuptools" for m in sys.modules)]))
"""


def _second_environment(path: Path) -> str:
    """A virtual environment of its own (its own prefix, as a torch-only venv
    would have) that sees this one's packages; returns its interpreter."""
    import site
    import sysconfig

    subprocess.run(
        [
            getattr(sys, "_base_executable", sys.executable),
            "-m",
            "venv",
            "--without-pip",
            str(path),
        ],
        check=True,
        timeout=120,
    )
    python = str(path / "bin" / "python")
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = sysconfig.get_paths()["purelib"]
    assert ours in site.getsitepackages()
    Path(purelib, "shared.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    return python


@pytest.mark.slow
def test_two_environments_in_turn_build_once_each_and_never_rebuild_each_other(second):
    """Regression: one cache entry per torch version was shared by every
    environment, and each rewrote its build.ninja: two environments in turn
    rebuilt it every time (13.7 s, 14.9 s, 13.7 s)."""
    if native.load()[0] is None:
        pytest.fail("the suite's install builds the extension: " + native.load()[1])
    other, cache = second
    if not cache.exists():  # run alone: the second environment's entry is built here
        built = _python(
            "from dc_torch import native; native.build()", cache=cache, timeout=900, python=other
        )
        assert built.returncode == 0, built.stderr
    _, ours = native._entry()
    # this environment's, as `make test` built it, beside the second's
    shutil.copytree(ours, cache / "torch-capture" / ours.name)
    entries = sorted((cache / "torch-capture").iterdir())
    assert len(entries) == 2 and ours.name in {e.name for e in entries}  # side by side
    first = {e.name: [(f.name, f.stat().st_mtime_ns) for f in sorted(e.iterdir())] for e in entries}
    seen = []
    for python in (sys.executable, other, sys.executable, other):
        done = _python(_LOAD, cache=cache, python=python)
        assert done.returncode == 0, done.stderr
        path, why, building = json.loads(done.stdout)
        assert path is not None and why == "" and not building, done.stdout
        seen.append(Path(path).parent.name)
    assert seen[0] == seen[2] == ours.name and seen[1] == seen[3] != ours.name
    # nothing of either entry was written again: no rebuild, no rewritten build.ninja
    assert {
        e.name: [(f.name, f.stat().st_mtime_ns) for f in sorted(e.iterdir())] for e in entries
    } == first
