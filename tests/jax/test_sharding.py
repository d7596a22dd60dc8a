"""A program sharded over two CPU devices: each op's time per device."""

from __future__ import annotations

import json
import os
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


@pytest.mark.slow
def test_a_sharded_program_keeps_each_devices_op_time(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True,
                          cwd=root, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    devices: dict[str, set[str]] = {}
    for op, device, time_ns in result["kernels"]:
        assert time_ns > 0
        devices.setdefault(op, set()).add(device)
    assert devices.get("dot_general") == {"cpu:0", "cpu:1"}  # each half of the batch on its device
    assert result["total"] == result["raw_total"]
