"""A module's time is what torch.profiler says the module took, forward and backward.

The Python code between operators (the interpreter running the model's own
lines) is billed to the line and module that ran it, so a module's inclusive
time is the module's. Checked against torch.profiler on the same steps
(``benchmarks/module_time.py``'s ``measure_together``: its Python tracer
times every module call, and a loaded machine's preemptions land in both
measurements alike), on HF models built from tiny configs, per top-level
module, in the median step:

* a lightweight native window bills a module's own call overhead (its
  ``__call__``, its code before its first operator and after its last) to
  the line that called it: its forward is the span from the module's first
  operator to its last, as torch.profiler times those operators;
* the Python capture path (module scopes) times the module call: its
  forward is the module's range;
* a comprehensive window (module hooks, which torch calls inside the module's
  ``__call__``) lies between the two: at least the operators' span, at most
  the range;
* backward, either way: the span of the autograd functions the module's
  forward operators made, with the AccumulateGrad that follows them.

And each phase's own time, which no line or module holds, stays under 10%.
"""

from __future__ import annotations

import statistics

import pytest

pytest.importorskip("transformers")

from benchmarks.module_time import gpt2, llama, measure_together

TOLERANCE = 0.15
STEPS = 8


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["lightweight", "comprehensive"])
@pytest.mark.parametrize("make", [gpt2, llama], ids=["gpt2", "llama"])
def test_module_time_matches_torch_profilers_module_times(tmp_path, make, mode, capture_path):
    reference, ours, shares = measure_together(make, str(tmp_path), STEPS, mode)

    def ratio(name: str, mine: int, theirs: int) -> float:
        return statistics.median(o[name][mine] / r[name][theirs] for o, r in zip(ours, reference))

    for name in reference[0]:  # the model's top-level modules: transformer / model, lm_head
        assert abs(ratio(name, 1, 2) - 1) <= TOLERANCE, (name, "backward", ratio(name, 1, 2))
        # forward against the operators' span, the range
        span, whole = (
            ratio(name, 0, 1),
            ratio(name, 0, 0),
        )
        if capture_path == "python":
            assert abs(whole - 1) <= TOLERANCE, (name, "forward", whole)
        elif mode == "lightweight":
            assert abs(span - 1) <= TOLERANCE, (name, "forward", span)
        else:
            assert span >= 1 - TOLERANCE and whole <= 1 + TOLERANCE, (name, "forward", span, whole)
    for phase in ("forward", "backward"):
        assert statistics.median(share[phase] for share in shares) < 0.10, shares
