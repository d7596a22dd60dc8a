"""Programs over two CPU devices: each op's time per device, a shard_map's all-reduces under their modules."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("jax")

SCRIPT = textwrap.dedent("""
    import json, os, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import dc_jax
    from dc_core.record.config import StepRange
    from dc_core.store.logdir import read_profile
    from tests.jax.helpers import raw_op_times

    mesh = Mesh(np.array(jax.devices()), ("data",))
    x = jax.device_put(jnp.ones((64, 256)), NamedSharding(mesh, P("data")))
    w = jax.device_put(jnp.ones((256, 512)), NamedSharding(mesh, P()))

    @jax.jit
    def step(x, w):
        return jnp.tanh(x @ w).sum()

    step(x, w).block_until_ready()
    prof = dc_jax.profile(logdir=sys.argv[1], steps=StepRange(start=1, count=2), cpu_sampling_hz=0,
                          system_interval_ms=0)
    prof.adapter.keep_traces = os.path.join(sys.argv[1], "traces")
    with prof:
        for _ in range(4):
            step(x, w).block_until_ready()
            prof.step()
    tree = read_profile(prof.written[0]).tree
    time = tree.inclusive("device_time_ns")
    kernels = [[tree.node_frame(tree.parent[n]).name, tree.node_frame(n).detail, time[n]]
               for n in range(len(tree)) if tree.node_frame(n).kind == "kernel"]
    [raw] = [os.path.join(prof.adapter.keep_traces, f) for f in os.listdir(prof.adapter.keep_traces)]
    raw_total = sum(sum(ops.values()) for ops in raw_op_times(raw).values())
    print(json.dumps({"kernels": kernels, "total": time[0], "raw_total": raw_total}))
""")


def _run(script: str, tmp_path) -> dict:
    """``script`` run in a child process from the repository root; the JSON of its last line."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_sharded_program_keeps_each_devices_op_time(tmp_path):
    result = _run(SCRIPT, tmp_path)
    devices: dict[str, set[str]] = {}
    for op, device, time_ns in result["kernels"]:
        assert time_ns > 0
        devices.setdefault(op, set()).add(device)
    assert devices.get("dot_general") == {"cpu:0", "cpu:1"}  # each half of the batch on its device
    assert result["total"] == result["raw_total"]


SHARD_MAP = textwrap.dedent("""
    import json, logging, os, re, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    from functools import partial
    import jax, jax.numpy as jnp, numpy as np, optax
    from flax import nnx
    from jax.sharding import Mesh, PartitionSpec as P
    import dc_jax
    from dc_core.record.config import StepRange
    from dc_core.store.logdir import read_profile
    from tests.invariants import violations
    from tests.jax.helpers import live_hlo, raw_op_times

    warned = []
    handler = logging.Handler()
    handler.emit = lambda record: warned.append(record.getMessage())
    logging.getLogger("deepcontext").addHandler(handler)
    mesh = Mesh(np.array(jax.devices()), ("data",))
    # the window starts at step 2: step 1 compiles anew, for the sharded state step 0 returned
    prof = dc_jax.profile(logdir=sys.argv[1], steps=StepRange(start=2, count=2), cpu_sampling_hz=0,
                          system_interval_ms=0)
    prof.adapter.keep_traces = os.path.join(sys.argv[1], "traces")
    with prof:
        class MLP(nnx.Module):  # defined inside the profiler's life: named all the same
            def __init__(self, rngs):
                self.l1 = nnx.Linear(8, 32, rngs=rngs)
                self.l2 = nnx.Linear(32, 10, rngs=rngs)

            def __call__(self, x):
                return self.l2(nnx.relu(self.l1(x)))

        graphdef, params = nnx.split(MLP(nnx.Rngs(0)))
        tx = optax.sgd(0.1)

        def loss_fn(params, x, y):
            return optax.softmax_cross_entropy_with_integer_labels(nnx.merge(graphdef, params)(x), y).mean()

        @jax.jit
        @partial(jax.shard_map, mesh=mesh, in_specs=(P(), P(), P("data"), P("data")), out_specs=(P(), P(), P()))
        def train_step(params, opt, x, y):
            loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
            grads = jax.lax.psum(grads, "data")
            updates, opt = tx.update(grads, opt, params)
            return optax.apply_updates(params, updates), opt, jax.lax.pmean(loss, "data")

        state, x, y = (params, tx.init(params)), jnp.ones((16, 8)), jnp.arange(16) % 10
        for _ in range(5):
            *state, loss = train_step(*state, x, y)
            loss.block_until_ready()
            prof.step()
    profile = read_profile(prof.written[0])
    tree = profile.tree
    time = tree.inclusive("device_time_ns")
    ops = [[[f.label() for f in tree.path_frames(n)], tree.node_frame(n).name, tree.node_frame(n).detail, time[n]]
           for n in range(len(tree)) if tree.node_frame(n).kind == "operator"]
    reduces = {}
    for text in live_hlo("jit_train_step"):
        for name, op_name in re.findall(r'%([\\w.\\-]+) = .*? all-reduce\\(.*?op_name="([^"]*)"', text):
            reduces[name] = op_name
    [raw] = [os.path.join(prof.adapter.keep_traces, f) for f in os.listdir(prof.adapter.keep_traces)]
    traced = sorted({op for program in raw_op_times(raw).values() for op in program})
    print(json.dumps({"ops": ops, "reduces": reduces, "traced": traced, "warned": warned,
                      "violations": violations(profile)}))
""")


def _module_of(name_stack: str) -> list[str]:
    """``transpose(jvp(MLP))/l1/psum`` → ``["MLP", "l1"]``: the NNX scopes of a name, read here."""
    parts = name_stack.split("/")[:-1]
    at = next((i for i, part in enumerate(parts) if re.search(r"\bMLP\b", part)), None)
    return [] if at is None else ["MLP", *parts[at + 1 :]]


@pytest.mark.slow
def test_a_combined_all_reduce_of_a_shard_map_is_an_all_reduce_under_its_module(tmp_path):
    # Regression: XLA's combined all-reduce (named ``(a:b)`` after the reductions it
    # merged) kept the joined list as its operator name, under no module, and set
    # off the NNX warning that the step was compiled before the profiler started;
    # ``shard_map`` showed as a module and hid the modules under it.
    result = _run(SHARD_MAP, tmp_path)
    assert result["warned"] == [] and result["violations"] == []
    executed = {
        name: op_name for name, op_name in result["reduces"].items() if name in result["traced"]
    }
    combined = {name for name, op_name in executed.items() if re.search(r"/\(.*:.*\)$", op_name)}
    assert combined, result["reduces"]  # XLA combined some: what this test is about
    by_detail: dict[str, list] = {}
    for path, name, detail, _ in result["ops"]:
        by_detail.setdefault(detail, []).append((path, name))
        assert "(" not in name and ":" not in name, path
        assert not any(label.startswith("shard_map") for label in path), path  # never a module
    for reduce, op_name in executed.items():
        members = re.match(r".*/\((.*)\)$", op_name)
        scopes = [
            m for m in map(_module_of, members.group(1).split(":") if members else [op_name]) if m
        ]
        shared = [
            parts[0]
            for parts in itertools.takewhile(lambda parts: len(set(parts)) == 1, zip(*scopes))
        ]
        for path, name in by_detail[reduce]:
            assert name == "all-reduce", path
            modules = [label.split(" ")[0] for label in path if label.startswith("MLP")]
            # under the module whose gradients it moves (their common module when several)
            assert modules[-1:] == (["/".join(shared)] if shared else []), (op_name, path)
    # the model's matmuls are under their modules, named though MLP was defined in the profiler's life
    matmuls = [path for path, name, _, _ in result["ops"] if name == "dot_general"]
    assert matmuls and all(
        any(label in ("MLP/l1 (Linear)", "MLP/l2 (Linear)") for label in path) for path in matmuls
    )
