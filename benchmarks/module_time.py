"""A module's time as DeepContext bills it, against torch.profiler's range around it.

On workloads this project did not write (HF ``GPT2LMHeadModel`` and
``LlamaForCausalLM`` from tiny configs, lightning's demo ``Transformer``),
in one process, steps alternate between a one-step DeepContext window and a
torch.profiler step with a ``record_function`` range around each top-level
module (forward hooks). Backward ranges come from torch.profiler's own
events: the span of the autograd functions whose forward operators ran inside
the module's range (linked by sequence number), a parameter's AccumulateGrad
counted with the function it follows. Printed per module: the 25th
percentile over the steps of each side and their ratio (the Python time
between operators billed to the module that ran it makes it ~1.0), and each
phase's own time as a share of the phase (what no line or module holds).

    python benchmarks/module_time.py [--steps 12] [--capture native|python] [--mode lightweight|comprehensive]

On the native path a lightweight window bills a module's own call overhead
(its ``__call__``, its code before its first operator and after its last) to
the line that called it; a comprehensive window times module calls with
global hooks and bills it to the module.

``tests/torch/test_module_time.py`` asserts on ``measure_together``: both
profilers on the same steps, which a loaded machine cannot tell apart.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from collections.abc import Callable
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

import dc_torch
from dc_core.record.config import StepRange
from dc_core.store.logdir import load_profiles

VOCAB = 4096


def gpt2() -> tuple[torch.nn.Module, Callable]:
    import transformers

    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=2, vocab_size=VOCAB, n_positions=64
    )
    return transformers.GPT2LMHeadModel(config), _causal_lm_loss


def llama() -> tuple[torch.nn.Module, Callable]:
    import transformers

    config = transformers.LlamaConfig(
        num_hidden_layers=2,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=2,
        num_key_value_heads=2,
        vocab_size=VOCAB,
        max_position_embeddings=64,
    )
    return transformers.LlamaForCausalLM(config), _causal_lm_loss


def demo_transformer() -> tuple[torch.nn.Module, Callable]:
    from lightning.pytorch.demos import Transformer

    model = Transformer(vocab_size=VOCAB, ninp=64, nhead=2, nhid=64, nlayers=2)
    return model, lambda m, batch: torch.nn.functional.nll_loss(m(batch, batch), batch.view(-1))


WORKLOADS = {"gpt2": gpt2, "llama": llama, "demo-transformer": demo_transformer}


def _causal_lm_loss(model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
    return model(input_ids=batch, labels=batch).loss


def step(
    model: torch.nn.Module, loss_of: Callable, batch: torch.Tensor, opt: torch.optim.Optimizer
) -> None:
    loss = loss_of(model, batch)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


class Ranges:
    """``record_function`` ranges around the given modules' forward calls, while ``on``."""

    def __init__(self, modules: dict[str, torch.nn.Module]) -> None:
        self.open: list = []
        self.on = False
        self.handles = [
            h
            for name, m in modules.items()
            for h in (
                m.register_forward_pre_hook(lambda mod, args, name=name: self._enter(name)),
                m.register_forward_hook(lambda mod, args, out: self._exit()),
            )
        ]

    def _enter(self, name: str) -> None:
        if self.on:
            rf = record_function(f"module::{name}")
            rf.__enter__()
            self.open.append(rf)

    def _exit(self) -> None:
        if self.on and self.open:
            self.open.pop().__exit__(None, None, None)

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def reference_step(
    run: Callable[[], None], ranges: Ranges, names: list[str]
) -> dict[str, tuple[float, float]]:
    """One step under torch.profiler: per module, (forward, backward) ns."""
    ranges.on = True
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run()
    ranges.on = False
    events = list(prof.events())
    out = {}
    for name in names:
        forward = backward = 0.0
        for rng in (e for e in events if e.name == f"module::{name}"):  # each call of the module
            start, end = rng.time_range.start, rng.time_range.end
            seqs = {
                e.sequence_nr
                for e in events
                if e.sequence_nr >= 0
                and e.thread == rng.thread
                and start <= e.time_range.start
                and e.time_range.end <= end
                and not e.is_async
            }
            forward += (end - start) * 1e3
            backward += _backward_span(events, seqs) * 1e3 if seqs else 0.0
        out[name] = (forward, backward)
    return out


def _backward_span(events: list, seqs: set[int]) -> float:
    """µs from the first to the last autograd function a module's forward ops
    made, a parameter's AccumulateGrad counted with the function it follows
    (the engine's ready queue runs it next: its gradient is that one's)."""
    functions = sorted(
        (e for e in events if e.name.startswith("autograd::engine::evaluate_function")),
        key=lambda e: e.time_range.start,
    )
    ours = [e for e in functions if e.sequence_nr in seqs]
    ours += [
        after
        for before, after in zip(functions, functions[1:])
        if before.sequence_nr in seqs and after.name.endswith("AccumulateGrad")
    ]
    if not ours:
        return 0.0
    return max(e.time_range.end for e in ours) - min(e.time_range.start for e in ours)


def module_times(profile: Any, names: list[str]) -> dict[str, tuple[int, int]]:
    """Per module, (forward, backward) inclusive ns in one DeepContext window."""
    tree = profile.tree
    incl = tree.inclusive("cpu_time_ns")
    out = {}
    for name in names:
        sides = []
        for phase in ("forward", "backward"):
            nodes = [
                n
                for n in range(len(tree))
                if tree.node_frame(n).kind == "module"
                and tree.node_frame(n).name == name
                and tree.path_frames(n)[0].name == phase
            ]
            # outermost only
            nodes = [n for n in nodes if not any(m in nodes for m in tree.path(n)[:-1])]
            sides.append(sum(incl[n] for n in nodes))
        out[name] = (sides[0], sides[1])
    return out


def phase_shares(profile: Any) -> dict[str, float]:
    """Each phase's own (exclusive) time as a share of the phase."""
    tree, incl = profile.tree, profile.tree.inclusive("cpu_time_ns")
    return {
        tree.node_frame(c).name: tree.value(c, "cpu_time_ns") / incl[c]
        for c in tree.children(0)
        if incl[c] > 0
    }


def measure(
    make: Callable, logdir: str, steps: int = 12, mode: str = "lightweight"
) -> tuple[list[dict], list[dict], list[dict]]:
    """(torch.profiler's per-step module times, ours per window, our phase shares per window).

    One intra-op thread: with two, a CPU op's time turns bimodal at random
    (the pool's threads spin or sleep), on either side."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _measure(make, logdir, steps, mode)
    finally:
        torch.set_num_threads(threads)


def _measure(
    make: Callable, logdir: str, steps: int, mode: str
) -> tuple[list[dict], list[dict], list[dict]]:
    torch.manual_seed(0)
    model, loss_of = make()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = torch.randint(0, VOCAB, (4, 32))
    top = dict(model.named_children())
    names = list(top)
    ranges = Ranges(top)
    for _ in range(3):  # warm up outside any profiler
        step(model, loss_of, batch, opt)
    reference: list[dict] = []
    windows = StepRange(start=0, count=1, every=2, repeat=steps)
    with dc_torch.profile(
        logdir=logdir, steps=windows, mode=mode, cpu_sampling_hz=0, system_interval_ms=0
    ) as prof:
        for i in range(2 * steps):
            if i % 2:
                reference.append(
                    reference_step(lambda: step(model, loss_of, batch, opt), ranges, names)
                )
            else:
                step(model, loss_of, batch, opt)
            prof.step()
    ranges.remove()
    profiles, errors = load_profiles(logdir)
    if errors or len(profiles) != steps:
        raise RuntimeError(f"expected {steps} profiles, read {len(profiles)} ({errors})")
    return (
        reference,
        [module_times(p, names) for p in profiles],
        [phase_shares(p) for p in profiles],
    )


def measure_together(
    make: Callable, logdir: str, steps: int = 8, mode: str = "lightweight"
) -> tuple[list[dict], list[dict], list[dict]]:
    """As `measure`, but both profilers on the same steps: each step is one
    DeepContext window and one torch.profiler session whose Python tracer
    (``with_stack``, ``with_modules``) times every module call, so a loaded
    machine's preemptions land in both measurements alike. Each profiler's
    cost is inside the other's times: a check, not a benchmark. The
    reference per module is (forward range, forward from its first operator's
    start to its last one's end, backward): a lightweight window bills the
    module's own code before its first operator and after its last to its
    caller, so its forward is the second; a comprehensive window's the first."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        model, loss_of = make()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        batch = torch.randint(0, VOCAB, (4, 32))
        top = dict(model.named_children())
        for _ in range(3):
            step(model, loss_of, batch, opt)
        reference: list[dict] = []
        windows = StepRange(start=1, count=1, every=1, repeat=steps)
        with dc_torch.profile(
            logdir=logdir, steps=windows, mode=mode, cpu_sampling_hz=0, system_interval_ms=0
        ) as prof:
            prof.step()  # step 0 unprofiled: the next begins the first window
            for _ in range(steps):
                with profile(
                    activities=[ProfilerActivity.CPU], with_stack=True, with_modules=True
                ) as traced:
                    step(model, loss_of, batch, opt)
                reference.append(_traced_modules(_tree_events(traced), model, top))
                prof.step()
        profiles, errors = load_profiles(logdir)
        if errors or len(profiles) != steps:
            raise RuntimeError(f"expected {steps} profiles, read {len(profiles)} ({errors})")
        profiles.sort(key=lambda p: p.steps)
        return (
            reference,
            [module_times(p, list(top)) for p in profiles],
            [phase_shares(p) for p in profiles],
        )
    finally:
        torch.set_num_threads(threads)


class _Range:
    """µs, as a ``FunctionEvent``'s ``time_range``."""

    __slots__ = ("start", "end")

    def __init__(self, start_ns: int, end_ns: int) -> None:
        self.start, self.end = start_ns / 1e3, end_ns / 1e3


class _Event:
    """One event of torch.profiler's event tree with the attributes of a
    ``FunctionEvent`` that `_traced_modules` reads."""

    __slots__ = ("name", "time_range", "cpu_parent", "sequence_nr", "is_async")

    def __init__(self, node: Any, parent: _Event | None) -> None:
        self.name = node.name
        self.time_range = _Range(node.start_time_ns, node.end_time_ns)
        self.cpu_parent = parent
        self.sequence_nr = getattr(node.extra_fields, "sequence_number", -1)
        self.is_async = False  # the tree nests only the events of one thread's calls


def _tree_events(traced: Any) -> list[_Event]:
    """The events of torch.profiler's tree of calls (its Python tracer's and
    the operators'), read as ``events()`` would give them. ``events()`` builds
    a ``FunctionEvent`` for each in Python: with a Python capture's own calls
    in every step, 2 s a step, most of this check's time."""
    out: list[_Event] = []
    stack = [(node, None) for node in traced.profiler.kineto_results.experimental_event_tree()]
    while stack:
        node, parent = stack.pop()
        event = _Event(node, parent)
        out.append(event)
        stack.extend((child, event) for child in node.children)
    return out


def _traced_modules(
    events: list, model: torch.nn.Module, top: dict[str, torch.nn.Module]
) -> dict[str, tuple[float, float, float]]:
    """Per top-level module, (forward range, forward operators' span, backward)
    ns from torch.profiler's Python tracer: its module calls right below the
    model's (``nn.Module: <Class>_<i>``), the ATen operators inside them."""

    def enclosing_module(e: Any) -> Any:
        parent = e.cpu_parent
        while parent is not None and not parent.name.startswith("nn.Module:"):
            parent = parent.cpu_parent
        return parent

    modules = [e for e in events if e.name.startswith("nn.Module:")]
    (root,) = [
        e
        for e in modules
        if enclosing_module(e) is None and e.name.startswith(f"nn.Module: {type(model).__name__}_")
    ]
    children = [e for e in modules if enclosing_module(e) is root]
    out = {}
    for name, module in top.items():
        calls = [
            e for e in children if e.name.rsplit("_", 1)[0] == f"nn.Module: {type(module).__name__}"
        ]
        forward = operators = backward = 0.0
        for rng in calls:
            start, end = rng.time_range.start, rng.time_range.end
            inside = [
                e
                for e in events
                if "::" in e.name
                and start <= e.time_range.start
                and e.time_range.end <= end
                and not e.is_async
            ]
            seqs = {e.sequence_nr for e in inside if e.sequence_nr >= 0}
            forward += (end - start) * 1e3
            if inside:
                operators += (
                    max(e.time_range.end for e in inside) - min(e.time_range.start for e in inside)
                ) * 1e3
            backward += _backward_span(events, seqs) * 1e3 if seqs else 0.0
        out[name] = (forward, operators, backward)
    return out


def p25(values: list[float]) -> float:
    return statistics.quantiles(values, n=4)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--capture", choices=("native", "python"), default="native")
    parser.add_argument("--mode", choices=("lightweight", "comprehensive"), default="lightweight")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), action="append")
    args = parser.parse_args()
    if args.capture == "python":
        os.environ["DEEPCONTEXT_CONFIG"] = json.dumps({"capture": "python"})
    print(
        f"{'workload':18s} {'module':12s} {'side':8s} {'DeepContext':>12s} {'torch.profiler':>15s} {'ratio':>6s}"
    )
    for name in args.workload or WORKLOADS:
        with tempfile.TemporaryDirectory() as logdir:
            reference, ours, shares = measure(WORKLOADS[name], logdir, args.steps, args.mode)
        for module in reference[0]:
            for side, i in (("forward", 0), ("backward", 1)):
                a, b = p25([o[module][i] for o in ours]), p25([r[module][i] for r in reference])
                ratio = f"{a / b:6.2f}" if b else "     -"
                print(
                    f"{name:18s} {module:12s} {side:8s} {a / 1e6:9.3f} ms {b / 1e6:12.3f} ms {ratio}"
                )
        own = {
            phase: statistics.median(s.get(phase, 0.0) for s in shares)
            for phase in ("forward", "backward")
        }
        print(
            f"{name:18s} phases' own time: forward {own['forward']:.1%}, backward {own['backward']:.1%}"
        )


if __name__ == "__main__":
    main()
