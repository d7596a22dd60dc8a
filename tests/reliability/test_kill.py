"""A profiling process killed at any moment (SIGKILL: no handler, no cleanup)
leaves only whole profiles: every file a reader lists decodes, the killed
writer's temporary is never read, and nothing collected before is lost."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

from dc_core.store.logdir import find_profiles, load_profiles

#: A job that writes a one-step window every step, as fast as it can.
JOB = textwrap.dedent("""
    import random, sys
    from dc_core.record.session import Session
    session = Session(logdir=sys.argv[1], steps={"start": 0, "count": 1, "every": 1, "repeat": 0},
                      cpu_sampling_hz=500, system_interval_ms=10)
    rng = random.Random(0)
    step = 0
    while True:
        session.step_begin(step)
        with session.phase("forward"), session.region("work"):
            sum(rng.random() for _ in range(2000))
        session.step_end(step)
        if step == 3:
            print("writing", flush=True)
        step += 1
""")


def test_sigkill_at_random_moments_leaves_only_whole_profiles(tmp_path):
    rng = random.Random(5)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]),
    }
    for round_ in range(4):
        logdir = tmp_path / str(round_)
        job = subprocess.Popen(
            [sys.executable, "-c", JOB, str(logdir)], stdout=subprocess.PIPE, text=True, env=env
        )
        assert job.stdout.readline().strip() == "writing"
        time.sleep(rng.uniform(0.0, 0.3))
        job.send_signal(signal.SIGKILL)
        assert job.wait() == -signal.SIGKILL
        listed = find_profiles(logdir)
        profiles, errors = load_profiles(logdir)
        # steps 0-3 at least, every one whole
        assert errors == [] and len(profiles) == len(listed) >= 4
        assert sorted(p.steps[0] for p in profiles) == list(range(len(profiles)))
        assert all(p.tree.find_all(lambda f: f.name == "work") for p in profiles)
        names = {p.name for p in logdir.rglob("*") if p.is_file()}
        assert all(n.startswith("steps-") or n.startswith(".tmp-") for n in names)
