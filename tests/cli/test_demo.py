"""``deepcontext demo`` picks a workload by what is installed and reports only the run it made."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Runs the CLI with some top-level packages made unimportable, as in an
# environment where they were never installed.
_BLOCKED_RUN = textwrap.dedent("""
    import importlib.abc, sys
    blocked = set(sys.argv[1].split(","))

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in blocked:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Block())
    from dc_core.cli import main
    sys.exit(main(sys.argv[2:]))
""")


def demo(tmp_path, blocked: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": REPO}
    return subprocess.run(
        [sys.executable, "-c", _BLOCKED_RUN, blocked, "demo", "--logdir", str(tmp_path), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=REPO,
    )


def test_a_torch_only_environment_runs_the_torch_workload(tmp_path):
    done = demo(tmp_path, "lightning,pytorch_lightning,jax,flax")
    assert done.returncode == 0, done.stderr
    assert "profiling the torch workload" in done.stdout
    # the GPT's own lines
    assert "demo.py:70 TinyGPT.forward" in done.stdout and " (Block)" in done.stdout
    assert "Traceback" not in done.stderr


def test_a_jax_only_environment_runs_the_flax_workload(tmp_path):
    done = demo(tmp_path, "torch,lightning,pytorch_lightning,transformers")
    assert done.returncode == 0, done.stderr
    assert "profiling the jax workload" in done.stdout
    assert "CNN" in done.stdout and "Conv_0" in done.stdout  # the Flax modules of dc_jax/demo.py
    assert "Traceback" not in done.stderr


def test_a_workload_whose_framework_is_missing_is_named_with_its_extra(tmp_path):
    done = demo(tmp_path, "lightning,pytorch_lightning", "--workload", "lightning")
    assert done.returncode == 2
    # the hint installs the extra the way this package was installed: here, from its checkout
    assert "needs lightning or pytorch_lightning (pip install -e '.[lightning]')" in done.stdout


def test_a_second_demo_reports_only_its_own_run(tmp_path):
    first = demo(tmp_path, "", "--workload", "python")
    second = demo(tmp_path, "", "--workload", "python")
    assert first.returncode == second.returncode == 0, second.stderr
    runs = sorted(p.name for p in tmp_path.iterdir())
    # two runs, unless both fell in one second
    assert len(runs) == 2 or first.stdout.count("rank 0") == 1
    assert second.stdout.count("rank 0") == 1  # the header of one profile, not of every earlier run
