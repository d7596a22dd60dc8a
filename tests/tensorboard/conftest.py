"""A small logdir with two ranks, two windows, findings, system series and
hostile names, and the plugin served in-process by TensorBoard's own WSGI app."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("tensorboard")
pytest.importorskip("werkzeug")

from tensorboard.backend.application import TensorBoardWSGI
from tensorboard.plugins.base_plugin import TBContext
from werkzeug.test import Client

from dc_core.model.tree import tree_from_lists
from dc_core.store.logdir import write_profile
from dc_core.store.profile import DeviceMemory, Profile, Series
from dc_core.tensorboard.plugin import DeepContextPlugin
from dc_core.tensorboard.store import ProfileStore

EVIL = "<img src=x onerror=alert(1)>"
PREFIX = "/data/plugin/deepcontext"
MIB = 2**20


def model_tree(src: Path, scale: int = 1):
    """forward and backward of one encoder line, plus an optimizer step."""
    line = f"python:forward|{src}:3"
    return tree_from_lists(
        (
            "forward",
            (
                "module:encoder",
                (
                    line,
                    (
                        f"aten::mm @cpu_time_ns={300 * scale},count=3",
                        f"kernel:sgemm @device_time_ns={900 * scale}",
                    ),
                    "aten::relu @cpu_time_ns=50,count=1",
                ),
            ),
            (f"module:{EVIL}", "aten::add @cpu_time_ns=20,count=1"),
        ),
        (
            "backward",
            (
                "module:encoder",
                (
                    line,
                    (
                        "aten::mm [backward] @cpu_time_ns=600,count=3",
                        "kernel:sgemm @device_time_ns=1800",
                    ),
                ),
            ),
        ),
        ("optimizer", "python:step|/etc/passwd:1 @cpu_time_ns=100,count=1"),
    )


def make_profile(src: Path, rank: int, steps: tuple[int, int], scale: int = 1) -> Profile:
    tree = model_tree(src, scale)
    evil = tree.find("forward", EVIL)
    return Profile(
        tree=tree,
        steps=steps,
        step_times_ns=[10_000_000 * scale, 12_000_000, 30_000_000][: steps[1] - steps[0]],
        rank=rank,
        host="node-a",
        world_size=2,
        system=[
            Series("cpu_percent", -1, [0, 500_000_000, 1_000_000_000], [20.0, 80.0, 50.0]),
            *(
                Series(
                    "cpu_percent", core, [0, 500_000_000, 1_000_000_000], [30.0 + core, 90.0, 10.0]
                )
                for core in (0, 1)
            ),
            # a counter: 50 MiB in the first half second, 100 MiB in the next
            Series(
                "disk_read_bytes",
                -1,
                [0, 500_000_000, 1_000_000_000],
                [7 * MIB, 57 * MIB, 157 * MIB],
            ),
        ],
        findings=[
            {
                "rule": "slow_module",
                "severity": "warning",
                "message": f"{EVIL} is slow",
                "suggestion": "fuse it",
                "path": [],
                "evidence": {},
                "node": evil,
            }
        ],
    )


@pytest.fixture
def src(tmp_path: Path) -> Path:
    """A source file under the working directory (an allowed source root)."""
    work = tmp_path / "work"
    work.mkdir()
    file = work / "model.py"
    file.write_text("import torch\n\ndef forward(x):\n    return x @ x\n")
    return file


@pytest.fixture
def logdir(tmp_path: Path, src: Path) -> Path:
    root = tmp_path / "logs"
    for rank in (0, 1):
        write_profile(make_profile(src, rank, (5, 8), scale=1 + rank), root, "run-a")
        write_profile(make_profile(src, rank, (8, 10), scale=2), root, "run-a")
    write_profile(make_profile(src, 0, (5, 8), scale=3), root, "nested/run-b")
    return root


@pytest.fixture
def plugin(logdir: Path, src: Path, monkeypatch: pytest.MonkeyPatch) -> DeepContextPlugin:
    monkeypatch.chdir(src.parent)
    monkeypatch.delenv("DEEPCONTEXT_SOURCE_ROOTS", raising=False)
    # A zero listing TTL: files written during a test are seen at once.
    return DeepContextPlugin(
        TBContext(logdir=str(logdir)), store=ProfileStore(logdir, listing_ttl_s=0)
    )


class Api:
    """GETs against the plugin routes; ``json(route, **query)`` checks the status."""

    def __init__(self, plugin: DeepContextPlugin) -> None:
        self.client = Client(TensorBoardWSGI([plugin]))

    def get(self, route: str, **query):
        return self.client.get(PREFIX + route, query_string={k: str(v) for k, v in query.items()})

    def json(self, route: str, status: int = 200, **query):
        response = self.get(route, **query)
        assert response.status_code == status, response.get_data(as_text=True)
        assert response.mimetype == "application/json"
        return response.get_json()


@pytest.fixture
def api(plugin: DeepContextPlugin) -> Api:
    return Api(plugin)


A = {"run": "run-a", "rank": 0, "window": "5-8"}


def memory_profile(src: Path, steps: tuple[int, int] = (5, 7)) -> Profile:
    """A CUDA window whose memory peaks in the optimizer's ``aten::add_``: 8 MiB
    of encoder parameters and 8 MiB saved for backward (6 by ``aten::mm``, 2 by
    ``aten::relu``) in forward, 8 MiB of gradients in backward, 16 MiB of
    optimizer state and 1 MiB temporary, 41 MiB in all; a head that holds
    nothing; on the CPU, 1 MiB of input in the dataloader."""
    line = f"python:forward|{src}:3"
    mib = MIB
    tree = tree_from_lists(
        (
            "forward",
            (
                f"module:encoder @peak_live_bytes={8 * mib},peak_live_bytes.parameter={8 * mib}",
                (
                    line,
                    f"aten::mm @cpu_time_ns=300,peak_live_bytes={6 * mib},"
                    f"peak_live_bytes.saved_for_backward={6 * mib}",
                    f"aten::relu @cpu_time_ns=50,peak_live_bytes={2 * mib},"
                    f"peak_live_bytes.saved_for_backward={2 * mib}",
                ),
            ),
            ("module:head", "aten::add @cpu_time_ns=20"),
        ),
        (
            "backward",
            (
                "module:encoder",
                f"aten::mm [backward] @cpu_time_ns=600,peak_live_bytes={8 * mib},"
                f"peak_live_bytes.gradient={8 * mib}",
            ),
        ),
        (
            "optimizer",
            (
                f"python:step|/w/optim.py:1 @peak_live_bytes={16 * mib},"
                f"peak_live_bytes.optimizer_state={16 * mib}",
                f"aten::add_ @cpu_time_ns=100,peak_live_bytes={mib},peak_live_bytes.temporary={mib}",
            ),
        ),
        (
            "dataloader",
            f"python:__next__|/w/data.py:9 @peak_live_bytes@cpu={mib},peak_live_bytes.input@cpu={mib}",
        ),
    )
    cuda = DeviceMemory(
        "cuda:0",
        peak_bytes=41 * mib,
        peak_t_ns=15_000_000,
        peak_node=tree.find("optimizer", "step", "aten::add_"),
        peak_step=6,
        peak_phase="optimizer",
        held_at_peak_bytes=24 * mib,
        allocator_peak_bytes=41 * mib,
        max_reserved_bytes=64 * mib,
        timeline_t_ns=[0, 5_000_000, 10_000_000, 15_000_000, 20_000_000],
        timeline_bytes=[24 * mib, 32 * mib, 36 * mib, 41 * mib, 30 * mib],
    )
    cpu = DeviceMemory(
        "cpu",
        peak_bytes=mib,
        peak_t_ns=1_000_000,
        peak_node=tree.find("dataloader", "__next__"),
        peak_step=5,
        peak_phase="dataloader",
        timeline_t_ns=[0, 1_000_000],
        timeline_bytes=[0, mib],
    )
    return Profile(
        tree=tree,
        steps=steps,
        step_times_ns=[12_000_000, 13_000_000],
        framework="torch",
        host="node-a",
        duration_ns=25_000_000,
        memory=[cuda, cpu],
    )
