"""Evaluation loops as their own windows: runs, step counters, flush."""

from __future__ import annotations

import functools

from dc_core.record.eval_windows import EvalWindows, batch_count
from dc_core.record.session import Session
from dc_core.store.logdir import load_profiles


def test_each_loop_counts_its_own_batches_and_flushes_at_close(tmp_path):
    make = functools.partial(
        Session, None, logdir=str(tmp_path), cpu_sampling_hz=0, system_interval_ms=0
    )
    train = make(run="fit", steps={"start": 0, "count": 2})
    evals = EvalWindows(make)
    for loop, batches in (("validation", 3), ("test", 1), ("validation", 1)):
        for _ in range(batches):
            evals.begin(train, loop)
            with evals.sessions[loop].phase("forward"):
                sum(range(1000))
            evals.end()
    evals.begin(train, "test")  # a batch still open at close is flushed too
    assert evals.steps == {"validation": 4, "test": 1} and evals.open == "test"
    written = evals.close()
    train.close()
    assert sorted(p.relative_to(tmp_path).parts[0:2] for p in written) == [
        ("fit", "test"),
        ("fit", "validation"),
    ]
    profiles, errors = load_profiles(tmp_path)
    assert errors == []
    # a window as long as the training one, counted from each loop's first batch
    assert {p.run: p.steps for p in profiles} == {"fit/validation": (0, 2), "fit/test": (0, 2)}
    assert evals.sessions == {} and evals.open is None


def test_begin_ends_the_batch_still_open():
    begun = []

    class Fake:
        config = None

        def step_begin(self, step):
            begun.append(("begin", step))

        def step_end(self, step):
            begun.append(("end", step))

    train = Session(None, enabled=False)
    evals = EvalWindows(lambda **kw: Fake())
    evals.begin(train, "eval")
    evals.begin(train, "eval")
    assert begun == [("begin", 0), ("end", 0), ("begin", 1)]


def test_batch_count_of_loaders_without_a_length():
    class Endless:
        def __len__(self):
            raise TypeError("an iterable dataset has no length")

    assert batch_count([1, 2, 3]) == 3
    assert (
        batch_count(Endless()) is None
        and batch_count(iter([])) is None
        and batch_count(None) is None
    )
