"""``deepcontext run`` on JAX and Flax scripts with no DeepContext import, in real
processes: the step is each call of the jitted train step (found, or named by
``--step-function``), and the jitted functions behave as they do alone."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")
pytest.importorskip("optax")

from .conftest import SCRIPTS, deepcontext_run, plain, run_profiles, split_stderr

pytestmark = pytest.mark.slow


def line_of(script: Path, text: str) -> int:
    """The line of ``script`` holding ``text`` (first match)."""
    return next(n for n, line in enumerate(script.read_text().splitlines(), 1) if text in line)


def _paths(tree, kind: str = "operator") -> list[list[str]]:
    """The labelled path of every node of ``kind``."""
    return [
        [f.label() for f in tree.path_frames(n)]
        for n in range(1, len(tree))
        if tree.node_frame(n).kind == kind
    ]


def _count(tree, *labels: str) -> int:
    """Executions in the window of the operator at the end of path ``labels``."""
    node = tree.find(*labels)
    assert node is not None, labels
    return tree.excl["count"][node]


def _op_counts(tree, *prefix: str, op: str = "dot_general") -> list[int]:
    """Executions of each ``op`` node (any XLA instruction) whose path starts with ``prefix``."""
    counts = []
    for n in range(1, len(tree)):
        frames = tree.path_frames(n)
        if (
            frames[-1].kind == "operator"
            and frames[-1].name == op
            and [f.label() for f in frames[: len(prefix)]] == list(prefix)
        ):
            counts.append(tree.excl["count"][n])
    assert counts, (prefix, [p for p in _paths(tree) if p[-1].startswith(op)])
    return counts


def test_a_flax_script_is_profiled_from_its_jitted_train_step(tmp_path):
    script = SCRIPTS / "jax_linen.py"
    loop, step, loss, apply, dense, evaluate, helper = (
        line_of(script, text)
        for text in (
            "= train_step(state, (x, y))",
            "jax.value_and_grad(loss_fn)",
            "logits = model.apply",
            "nn.Dense(64)(x)",
            "return nn.Dense(10)(x)",
            "jnp.argmax(model.apply",
            "return (x - x.mean",
        )
    )
    done = deepcontext_run(tmp_path, "--steps", "2:3", str(script))
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    # train_step.lower() worked, and the donated state was deleted as JAX does alone
    assert printed[0] == "lowered train_step True" and "donated True" in printed
    assert [line.split()[0] for line in printed].count("step") == 3
    [profile] = run_profiles(tmp_path)
    assert (
        profile.steps == (2, 5) and len(profile.step_times_ns) == 3 and profile.framework == "jax"
    )
    source = profile.step_source
    assert (
        source
        == f"each call of jax.jit train_step, called repeatedly at jax_linen.py:{loop}; step 0 is call 3"
    )
    assert f"steps: {source}" in done.stderr  # the report says how the steps were found
    tree = profile.tree
    in_model = (f"jax_linen.py:{step} train_step", f"jax_linen.py:{loss} loss_fn", "MLP (MLP)")
    # the script's own lines and the Flax modules, forward and backward; each op once per step
    assert set(
        _op_counts(
            tree, "forward", *in_model, f"jax_linen.py:{apply} MLP.__call__", "MLP/Dense_0 (Dense)"
        )
    ) == {3}
    assert set(
        _op_counts(
            tree, "backward", *in_model, f"jax_linen.py:{dense} MLP.__call__", "MLP/Dense_1 (Dense)"
        )
    ) == {3}
    assert tree.find("optimizer") is not None
    # the jitted helper called three times from one line inside the step was traced, never run: not the step
    assert [p for p in _paths(tree) if f"jax_linen.py:{helper} standardize" in p]
    # the eval function, called from its own lines, ran in the window as itself (step 3 of the window's 2-4)
    evals = [p for p in _paths(tree) if p[1] == f"jax_linen.py:{evaluate} evaluate"]
    assert evals and all(_count(tree, *p) == 1 for p in evals)


def test_an_nnx_jit_step_is_found_with_its_modules_named(tmp_path):
    script = SCRIPTS / "jax_nnx.py"
    loop, step, loss, first, layers, last = (
        line_of(script, text)
        for text in (
            "loss = train_step(",
            "nnx.value_and_grad(loss_fn)",
            "model(x), y)",
            "self.linear1(x)",
            "layer(x)",
            "return self.linear2",
        )
    )
    done = deepcontext_run(tmp_path, "--steps", "2:3", str(script))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("nnx loss ")
    # named though traced before it was known to be the step
    assert "no module frames" not in done.stderr
    [profile] = run_profiles(tmp_path)
    assert profile.steps == (2, 5)
    # nnx.jit runs a jax.jit inside, called from Flax's files: only the script's call counts
    assert profile.step_source == (
        f"each call of nnx.jit train_step, called repeatedly at jax_nnx.py:{loop}; step 0 is call 3"
    )
    tree = profile.tree
    model = (f"jax_nnx.py:{step} train_step", f"jax_nnx.py:{loss} loss_fn", "MLP (MLP)")
    assert set(
        _op_counts(
            tree, "forward", *model, f"jax_nnx.py:{first} MLP.__call__", "MLP/linear1 (Linear)"
        )
    ) == {3}
    assert set(
        _op_counts(
            tree, "backward", *model, f"jax_nnx.py:{last} MLP.__call__", "MLP/linear2 (Linear)"
        )
    ) == {3}
    # the two layers called from one line are told apart by their attribute paths, classes recorded
    for index in (0, 1):
        path = (
            "forward",
            *model,
            f"jax_nnx.py:{layers} MLP.__call__",
            f"MLP/layers/{index} (Linear)",
        )
        assert set(_op_counts(tree, *path)) == {3}
    assert not [p for p in _paths(tree, "module") if p[-1].startswith("MLP/layers (")]


def test_a_named_nnx_step_is_one_step_per_call_from_its_first(tmp_path):
    script = SCRIPTS / "jax_nnx.py"
    loop = line_of(script, "loss = train_step(")
    # __main__ also names the script's module; flax's inner jax.jit carries the same name
    done = deepcontext_run(
        tmp_path, "--steps", "2:3", "--step-function", "__main__:train_step", str(script)
    )
    assert done.returncode == 0, done.stderr
    [profile] = run_profiles(tmp_path)
    assert profile.step_source == (
        f"each call of nnx.jit train_step, named by --step-function "
        f"__main__:train_step (first called at jax_nnx.py:{loop}); step 0 is call 1"
    )
    assert profile.steps == (2, 5) and len(profile.step_times_ns) == 3
    model = [
        p
        for p in _paths(profile.tree, "module")
        if p[-1] == "MLP/linear1 (Linear)" and p[0] == "forward"
    ]
    # once per call, not twice
    assert len(model) == 1 and set(_op_counts(profile.tree, *model[0])) == {3}


def test_step_function_names_the_step_the_search_would_miss(tmp_path):
    script = SCRIPTS / "jax_named.py"
    augment, batches, loop, update = (
        line_of(script, text)
        for text in (
            "return x + 0.01",
            "batches = [augment",
            "w, loss = train_step(",
            "loss, grad = jax.value_and_grad",
        )
    )
    (tmp_path / "found").mkdir()
    found = deepcontext_run(tmp_path / "found", "--steps", "0:2", str(script))
    assert found.returncode == 0, found.stderr
    # the augmentation over the data, called first from one line
    [guess] = run_profiles(tmp_path / "found")
    assert f"jax.jit augment, called repeatedly at jax_named.py:{batches}" in guess.step_source

    named = deepcontext_run(
        tmp_path, "--steps", "2:3", "--step-function", "jax_named:train_step", str(script)
    )
    assert named.returncode == 0, named.stderr
    assert named.stdout == found.stdout
    [profile] = run_profiles(tmp_path)
    # ``train_step = jax.jit(update)``: named by the script's attribute, reported with its function
    assert profile.step_source == (
        f"each call of jax.jit update, named by --step-function "
        f"jax_named:train_step (first called at jax_named.py:{loop}); "
        f"step 0 is call 1"
    )
    assert profile.steps == (2, 5) and len(profile.step_times_ns) == 3
    for phase in ("forward", "backward"):
        assert set(_op_counts(profile.tree, phase, f"jax_named.py:{update} update")) == {3}
    # the augmentation ran before step 0: nothing of it is in the window
    assert not [
        p for p in _paths(profile.tree, "python") if p[-1] == f"jax_named.py:{augment} augment"
    ]


def test_jitted_functions_behave_as_they_do_alone(tmp_path):
    script = str(SCRIPTS / "jax_semantics.py")
    alone = plain(tmp_path, script)
    done = deepcontext_run(tmp_path, "--steps", "0:2", script)
    assert alone.returncode == done.returncode == 0, done.stderr
    # each call ran once, names and signatures, lower/trace/eval_shape, jitted methods,
    # jax.jit(...) as a decorator factory, grad/vmap/jit of it, donation and JAX's errors
    assert done.stdout == alone.stdout
    expected = {"keywords 6.0", "runs 5 [0.0, 2.0, 4.0, 6.0]", "donated [2.0, 2.0, 2.0] True"}
    assert expected <= set(alone.stdout.splitlines())
    assert split_stderr(done.stderr)[0] == alone.stderr
    [profile] = run_profiles(tmp_path)
    assert "jax.jit scaled, called repeatedly" in profile.step_source and profile.steps == (0, 2)
