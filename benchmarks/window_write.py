"""What a window's close costs the training thread to make its file visible.

A closed window's file is written and renamed to its final name on the
training thread (`store.writer`: an ``os._exit`` right after loses nothing);
only its fsync waits on the writer's thread. Printed: the GPT demo window's
profile and a 1 MB one, ms per write (median, p90 of 200), and the same as
a share of the unprofiled GPT step measured in this run.

    python benchmarks/window_write.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dc_torch  # noqa: E402  (after the path is set)
from dc_core.record.config import StepRange  # noqa: E402
from dc_core.store.logdir import find_profiles, write_visible  # noqa: E402
from dc_torch.demo import make_workload, train_step  # noqa: E402


def _times(action, n: int) -> list[int]:
    out = []
    for i in range(n):
        t = time.perf_counter_ns()
        action(i)
        out.append(time.perf_counter_ns() - t)
    return sorted(out)


def main() -> None:
    model, optimizer, batch = make_workload()
    step = _times(lambda i: train_step(model, optimizer, *batch()), 30)
    with tempfile.TemporaryDirectory() as logdir, tempfile.TemporaryDirectory() as out:
        with dc_torch.profile(logdir=logdir, steps=StepRange(start=1, count=3)) as prof:
            for _ in range(5):
                train_step(model, optimizer, *batch())
                prof.step()
        (file,) = find_profiles(logdir)
        window = Path(file.path).read_bytes()
        step_ms = statistics.median(step) / 1e6
        print(f"unprofiled GPT step: {step_ms:.2f} ms (median of {len(step)})")
        for name, data in (
            ("GPT window", window),
            ("1 MB", window * max(1, (1 << 20) // len(window))),
        ):
            times = _times(lambda i: write_visible(data, Path(out) / f"steps-{i}-{i}.pb"), 200)
            median, p90 = statistics.median(times) / 1e6, times[len(times) * 9 // 10] / 1e6
            print(
                f"{name:>10} ({len(data) / 1024:7.0f} KiB): {median:.3f} ms median, {p90:.3f} ms p90 "
                f"= {median / step_ms:.1%} of a step, once per window"
            )


if __name__ == "__main__":
    main()
