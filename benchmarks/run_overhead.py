"""What ``deepcontext run`` costs over plain ``python script.py``: startup, and the
step boundary it finds by itself, outside a window.

Startup: wall time of ``python script.py`` against ``deepcontext run
--no-report --time-fallback 0 script.py`` for a script that does nothing and
one that only imports torch. The difference is split into the ``deepcontext``
process (its imports, starting the command, the end of the run: measured as
``deepcontext run -- true``) and the injected child (the script started alone
with the environment ``deepcontext run`` gives it, `child_environment`); one
``-X importtime`` run of that child names the imports the injection adds.

Steps (the budget: ≤ ×1.01 outside a window): the GPT step of
``torch_overhead.py`` (`dc_torch.demo`, one thread) in a script that times
its own steps, run plainly, under ``--steps 100000:1`` (a window that never
opens: every step pays the optimizer hooks and one compare) and under
``--steps 20:5``, of which only the steps outside the window are compared
(before it, and after it closed). Each script is a process of its own; the
configurations alternate in rounds (order reversed every other round) so that
machine noise hits them alike, and every ratio is against the plain script in
the same run: median over the plain median, and the range of per-round ratios.
Each process runs at its own speed (±5% on a busy machine), more than the
budget: so the last table times ``Optimizer.step`` of a one-parameter SGD in
this process with and without the driver's hooks, their cost per step free of
that noise, and holds it against the budget too.

    python benchmarks/run_overhead.py [--rounds 5] [--startup-rounds 8] [--steps 60] [--warmup 10]

Prints PASS or OVER against the budget; never fails for noise.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dc_core.cli.run import child_environment, config_fields
from dc_core.launch.settings import CLAIMED_ENV, RUN_ENV, RunSettings
from dc_core.record.config import ENV_VAR

BUDGET = 1.01  # outside a window, over the plain step
NEVER = "100000:1"
WINDOW = (20, 5)
#: Imports ``deepcontext run`` adds to the child, shown from ``-X importtime``:
#: the boot, what of it is the profile writer's (numpy, protobuf), and the torch driver's loop.
IMPORTS = (
    "sitecustomize",
    "dc_core.launch.child",
    "dc_core.store.profile",
    "dc_torch.loop",
    "torch",
)

SCRIPTS = {
    "nothing": "",
    "import torch": "import torch\n",
    "gpt": """\
import json
import sys
import time

import torch

from dc_torch.demo import make_workload, train_step

steps, warmup = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(1)
model, optimizer, batch = make_workload()
batches = [batch() for _ in range(4)]
times = []
for i in range(warmup + steps):
    x, y = batches[i % len(batches)]
    start = time.perf_counter()
    train_step(model, optimizer, x, y)
    times.append(time.perf_counter() - start)
print(json.dumps({"step_s": times}))
""",
}


def _environment() -> dict[str, str]:
    """This environment without any run's variables (the benchmark may itself run under one)."""
    return {k: v for k, v in os.environ.items() if k not in (RUN_ENV, CLAIMED_ENV, ENV_VAR)}


def _execute(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    """Wall seconds of ``command`` and its standard output; a failure stops the benchmark."""
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(
            f"{' '.join(command)} exited with {done.returncode}:\n{done.stderr[-2000:]}"
        )
    return elapsed, done.stdout


def _deepcontext(logdir: Path, *options: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "dc_core",
        "run",
        "--no-report",
        "--time-fallback",
        "0",
        "--logdir",
        str(logdir),
        *options,
    ]


def _injected_env(logdir: Path, name: str) -> dict[str, str]:
    """The environment ``deepcontext run`` gives its command (`child_environment`)."""
    options = argparse.Namespace(config=None, logdir=str(logdir), steps=None, mode=None)
    fields = config_fields(options, name)
    settings = RunSettings(logdir=fields["logdir"], run=name, fallback_after_s=0.0)
    return child_environment(settings, fields, base=_environment())


def _ordered(items: list, round_index: int) -> list:
    return items if round_index % 2 == 0 else items[::-1]


def _row(
    name: str,
    times: list[float],
    rounds: list[float],
    base: list[float],
    base_rounds: list[float],
    extra: str = "",
) -> float:
    """Prints median ms, ratio to ``base`` and the range of per-round ratios; returns the ratio."""
    median, plain = statistics.median(times), statistics.median(base)
    per_round = [r / b for r, b in zip(rounds, base_rounds)]
    spread = f"{min(per_round):.3f}-{max(per_round):.3f}"
    print(f"{name:60s} {median * 1e3:10.2f} {median / plain:7.3f} {spread:>13s} {extra}")
    return median / plain


def startup(work: Path, rounds: int) -> None:
    """Wall time of starting each script plainly, under ``deepcontext run``, and the pieces."""
    env, logdir = _environment(), work / "startup"
    configs = {}
    for script in ("nothing", "import torch"):
        path = str(work / f"{script.replace(' ', '_')}.py")
        configs[(script, "python")] = ([sys.executable, path], env)
        configs[(script, "deepcontext run")] = (_deepcontext(logdir, path), env)
        configs[(script, "child alone")] = (
            [sys.executable, path],
            _injected_env(logdir, f"child-{len(configs)}"),
        )
    configs[("", "deepcontext run -- true")] = (_deepcontext(logdir, "--", "true"), env)
    times = {key: [] for key in configs}
    for (
        command,
        command_env,
    ) in configs.values():  # untimed: the first start of each reads files from disk
        _execute(command, work, command_env)
    for r in range(rounds):
        for key in _ordered(list(configs), r):
            times[key].append(_execute(configs[key][0], work, configs[key][1])[0])
    med = {key: statistics.median(values) for key, values in times.items()}
    print(f"startup: wall time of one command, {rounds} rounds, medians")
    print(
        f"{'script':14s} {'python ms':>10s} {'deepcontext run ms':>19s} {'ratio':>7s} {'per round':>13s} "
        f"{'+ms':>8s}"
    )
    for script in ("nothing", "import torch"):
        plain, run = med[(script, "python")], med[(script, "deepcontext run")]
        per_round = [
            d / p for d, p in zip(times[(script, "deepcontext run")], times[(script, "python")])
        ]
        print(
            f"{script:14s} {plain * 1e3:10.1f} {run * 1e3:19.1f} {run / plain:7.3f} "
            f"{min(per_round):.3f}-{max(per_round):.3f} {(run - plain) * 1e3:+8.1f}"
        )
    for script in ("nothing", "import torch"):
        plain, run, child = (
            med[(script, kind)] for kind in ("python", "deepcontext run", "child alone")
        )
        print(
            f"{script}: {(run - plain) * 1e3:+.1f} ms = the deepcontext process {(run - child) * 1e3:+.1f} ms "
            f"+ the injected child {(child - plain) * 1e3:+.1f} ms (the child alone: {child * 1e3:.1f} ms)"
        )
    print(
        f"deepcontext run -- true (the deepcontext process, no Python child): "
        f"{med[('', 'deepcontext run -- true')] * 1e3:.1f} ms"
    )
    command, command_env = configs[("import torch", "child alone")]
    done = subprocess.run(
        [command[0], "-X", "importtime", *command[1:]],
        cwd=work,
        env=command_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    cumulative = _import_ms(done.stderr)
    parts = ", ".join(f"{name} {cumulative[name]:.1f} ms" for name in IMPORTS if name in cumulative)
    print(f"imports of the injected child (-X importtime, one run): {parts}")


def _import_ms(report: str) -> dict[str, float]:
    """Cumulative ms of each module's import, from ``-X importtime`` output (first import of each)."""
    found: dict[str, float] = {}
    for line in report.splitlines():
        fields = line.split("|")
        if len(fields) == 3 and fields[1].strip().isdigit():
            found.setdefault(fields[2].strip(), int(fields[1]) / 1e3)
    return found


def steps(work: Path, rounds: int, count: int, warmup: int) -> float:
    """Step times of the GPT script plainly and under ``deepcontext run``; returns the plain median."""
    env, logdir, script = _environment(), work / "steps", str(work / "gpt.py")
    args = [script, str(count), str(warmup)]
    start, length = WINDOW
    configs = {
        "python gpt.py": [sys.executable, *args],
        f"--steps {NEVER} (never opens)": _deepcontext(logdir, "--steps", NEVER, *args),
        f"--steps {start}:{length}": _deepcontext(logdir, "--steps", f"{start}:{length}", *args),
    }
    samples: dict[str, list[list[float]]] = {name: [] for name in configs}
    for r in range(rounds):
        for name in _ordered(list(configs), r):
            out = _execute(configs[name], work, env)[1]
            line = next(text for text in out.splitlines() if text.startswith('{"step_s"'))
            samples[name].append(json.loads(line)["step_s"])
    # The window opens in the post-hook of update start-1 and closes in that of update start+length-1.
    parts = {
        "all": range(warmup, warmup + count),
        "before the window": range(warmup, start - 1),
        "after the window": range(start + length, warmup + count),
    }
    base_name, never, window = list(configs)
    print(
        f"\nGPT step (dc_torch.demo, 1 thread): {count} steps after {warmup} warm-up, {rounds} rounds, "
        f"each a process"
    )
    print(f"{'configuration':60s} {'median ms':>10s} {'ratio':>7s} {'per round':>13s}")

    def pick(name: str, part: str) -> tuple[list[float], list[float]]:
        per_round = [[times[i] for i in parts[part]] for times in samples[name]]
        return [t for run in per_round for t in run], [statistics.median(run) for run in per_round]

    base_all, base_rounds = pick(base_name, "all")
    _row(base_name, base_all, base_rounds, base_all, base_rounds)
    ratio = _row(f"deepcontext run {never}", *pick(never, "all"), base_all, base_rounds)
    print(f"{'':60s} budget ≤{BUDGET:.2f}: {'PASS' if ratio <= BUDGET else 'OVER'}")
    plain_runs = [statistics.median(run[warmup:]) for run in samples[base_name]]
    if len(plain_runs) > 1:  # what one process differs from the next: the ratio's resolution
        print(
            f"{'':60s} (plain processes alone: {min(plain_runs) * 1e3:.2f}-{max(plain_runs) * 1e3:.2f} ms, "
            f"±{statistics.stdev(plain_runs) / statistics.mean(plain_runs):.1%})"
        )
    for part in ("before the window", "after the window"):
        first, last = parts[part][0], parts[part][-1]
        _row(
            f"deepcontext run {window}, {part} ({first}-{last})",
            *pick(window, part),
            *pick(base_name, part),
            extra="vs the same steps of python gpt.py",
        )
    # Each process runs at its own speed (a few % apart): after over before in one
    # process, over the same in the plain one, leaves only what the window left behind.
    changes = [
        statistics.median(run[i] for i in parts["after the window"])
        / statistics.median(run[i] for i in parts["before the window"])
        for name in (window, base_name)
        for run in samples[name]
    ]
    per_round = [w / b for w, b in zip(changes[:rounds], changes[rounds:])]
    print(
        f"{'after / before the window, over python gpt.py':60s} {'':10s} {statistics.median(per_round):7.3f} "
        f"{min(per_round):.3f}-{max(per_round):.3f} (median of rounds)"
    )
    return statistics.median(base_all)


def hook_cost(work: Path, gpt_step_s: float, rounds: int, calls: int = 20000) -> None:
    """µs the driver's hooks add to one ``Optimizer.step`` outside a window, in this process."""
    import torch

    from dc_core.launch.child import Launch
    from dc_core.record.config import StepRange
    from dc_torch.launch import OptimizerSteps

    class NeverOpens(Launch):
        @property
        def overrides(self) -> dict:
            return {**super().overrides, "steps": StepRange(start=10**9, count=1)}

    # Closing a session that wrote nothing warns about it: expected here, so not shown.
    quiet = logging.getLogger("deepcontext")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    param = torch.zeros(1, requires_grad=True)
    param.grad = torch.zeros(1)
    optimizer = torch.optim.SGD([param], lr=0.0)

    def timed() -> float:
        begin = time.perf_counter()
        for _ in range(calls):
            optimizer.step()
        return (time.perf_counter() - begin) / calls

    settings = RunSettings(logdir=str(work / "hooks"), run="hooks", fallback_after_s=0)
    plain, hooked = [], []
    for r in range(rounds):
        for name in _ordered(["plain", "hooked"], r):
            if name == "plain":
                plain.append(timed())
                continue
            driver = OptimizerSteps(NeverOpens(settings))
            driver.install()
            try:
                optimizer.step()  # the first update adopts the optimizer: the later ones are measured
                hooked.append(timed())
            finally:
                driver.close()
    quiet.setLevel(level)
    added = statistics.median(hooked) - statistics.median(plain)
    print(
        f"\nOptimizer.step of a one-parameter SGD, {calls} calls × {rounds} rounds, in this process:"
    )
    print(
        f"plain {statistics.median(plain) * 1e6:.2f} µs, "
        f"with the driver's hooks {statistics.median(hooked) * 1e6:.2f} µs: {added * 1e6:+.2f} µs a step, "
        f"{added / gpt_step_s:.4%} of the GPT step ({gpt_step_s * 1e3:.2f} ms)"
    )
    print(
        f"budget ≤{BUDGET:.2f} by the hooks' cost: ×{1 + added / gpt_step_s:.5f} "
        f"{'PASS' if 1 + added / gpt_step_s <= BUDGET else 'OVER'}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rounds", type=int, default=5, help="interleaved rounds of the GPT scripts"
    )
    parser.add_argument(
        "--startup-rounds", type=int, default=8, help="interleaved rounds of the startup commands"
    )
    parser.add_argument("--steps", type=int, default=60, help="measured GPT steps per script")
    parser.add_argument("--warmup", type=int, default=10, help="GPT steps before those measured")
    args = parser.parse_args(argv)
    if not args.warmup < WINDOW[0] - 1 < sum(WINDOW) < args.warmup + args.steps:
        parser.error(
            f"the measured steps must start before the window {WINDOW[0]}:{WINDOW[1]} and end after it"
        )
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name, text in SCRIPTS.items():
            (work / f"{name.replace(' ', '_')}.py").write_text(text)
        startup(work, args.startup_rounds)
        gpt_step_s = steps(work, args.rounds, args.steps, args.warmup)
        hook_cost(work, gpt_step_s, args.rounds)


if __name__ == "__main__":
    main()
