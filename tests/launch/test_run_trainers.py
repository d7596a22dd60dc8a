"""``deepcontext run`` on Lightning and Hugging Face trainer scripts, in real processes.

The trainer drivers claim the steps when the script's first Trainer is built;
claims are exclusive, so a profile whose ``step_source`` names the trainer
shows the plain PyTorch driver stood down. A script's own callback is checked
with its own steps and no ``--steps``: a second profiler on top would write a
second window (the run's default steps 5-7) beside the callback's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from dc_core.store.logdir import find_profiles, read_profile

from .conftest import SCRIPTS, deepcontext_run

pytestmark = pytest.mark.slow


def line_of(script: Path, text: str) -> int:
    """The line of ``script`` holding ``text`` (first match)."""
    return next(n for n, line in enumerate(script.read_text().splitlines(), 1) if text in line)


def only_profile(tmp_path: Path):
    """The one profile written anywhere under ``tmp_path``, checked to be in the run's directory."""
    files = find_profiles(tmp_path)
    assert len(files) == 1, [str(f.path) for f in files]
    [run_dir] = (tmp_path / "out").iterdir()
    assert files[0].path.parents[3] == run_dir  # <run>/plugins/deepcontext/<rank>-<host>/steps-….pb
    return files[0].path.name, read_profile(files[0])


def run_log(tmp_path: Path) -> str:
    """What the profiled process logged (one file per process)."""
    return "".join(p.read_text() for p in (tmp_path / "out").glob("*/.logs/*.log"))


def forward_modules(tree) -> set[tuple[str, str]]:
    """``{(name, class)}`` of the module frames under the forward phase."""
    return {
        (tree.node_frame(n).name, tree.node_frame(n).detail)
        for n in tree.find_all(lambda f: f.kind == "module")
        if tree.path_frames(n)[0].name == "forward"
    }


def test_a_lightning_trainer_gets_the_callback_and_its_steps(tmp_path):
    pytest.importorskip("lightning")
    script = SCRIPTS / "lightning_fit.py"
    module, main, step, forward = (
        line_of(script, text)
        for text in (
            "    main()",
            "fitting.fit(model",
            "return F.cross_entropy(self.encoder(x), y)",
            "return self.layers(x)",
        )
    )
    done = deepcontext_run(
        tmp_path, "--steps", "2:3", str(script), "--bad-first", "--inspect", "--test"
    )
    assert done.returncode == 0, done.stderr
    # the failed Trainer's error is the script's; the wrapper keeps the signature and pickles as the plain callback
    assert "bad trainer: ValueError You selected an invalid accelerator name" in done.stdout
    assert "signature: ['self', 'accelerator', 'strategy']" in done.stdout
    assert "pickled callbacks: ['DeepContextCallback']" in done.stdout
    assert "fit done at step 12" in done.stdout and "test done" in done.stdout
    # one window, the fitting trainer's; the test Trainer after it adds nothing
    name, profile = only_profile(tmp_path)
    assert name == "steps-2-4.pb" and profile.steps == (2, 5) and len(profile.step_times_ns) == 3
    assert profile.step_source.startswith("Lightning Trainer optimizer steps (trainer.global_step)")
    assert "steps: Lightning Trainer optimizer steps" in done.stderr
    tree = profile.tree
    assert {"forward", "backward", "optimizer"} <= {
        tree.node_frame(n).name for n in tree.children(0)
    }
    linear = tree.find(
        "forward",
        f"lightning_fit.py:{module} <module>",
        f"lightning_fit.py:{main} main",
        f"lightning_fit.py:{step} LitMLP.training_step",
        "encoder (Encoder)",
        f"lightning_fit.py:{forward} Encoder.forward",
        "encoder.layers (Sequential)",
        "encoder.layers.0 (Linear)",
        "aten::linear",
    )
    assert linear is not None and tree.excl["count"][linear] == 3  # once per step of the window
    backward = [
        n
        for n in tree.find_all(lambda f: f.kind == "operator" and f.backward)
        if "encoder.layers.0" in [f.name for f in tree.path_frames(n)]
    ]
    assert backward and all(tree.path_frames(n)[0].name == "backward" for n in backward)
    # Lightning's own frames are skipped, as with the callback written in the script
    assert not any("/lightning/" in tree.node_frame(n).file for n in range(1, len(tree)))
    assert "WARNING" not in run_log(tmp_path)


def test_a_hugging_face_trainer_gets_the_callback_and_its_steps(tmp_path):
    pytest.importorskip("transformers")
    done = deepcontext_run(tmp_path, "--steps", "2:3", str(SCRIPTS / "hf_train.py"))
    assert done.returncode == 0, done.stderr
    assert "trained to step 12" in done.stdout
    name, profile = only_profile(tmp_path)
    assert name == "steps-2-4.pb" and profile.steps == (2, 5) and len(profile.step_times_ns) == 3
    assert profile.step_source.startswith(
        "Hugging Face Trainer optimizer steps (state.global_step)"
    )
    tree = profile.tree
    assert {"forward", "backward", "optimizer"} <= {
        tree.node_frame(n).name for n in tree.children(0)
    }
    assert {
        ("transformer.h.0.attn", "GPT2Attention"),
        ("transformer.h.1.mlp", "GPT2MLP"),
    } <= forward_modules(tree)
    attn = tree.find_all(lambda f: f.kind == "module" and f.name == "transformer.h.0.attn")
    assert {tree.path_frames(n)[0].name for n in attn} == {"forward", "backward"}
    # the path runs from the script's lines into the model; transformers' trainer frames are skipped
    [first] = [n for n in attn if tree.path_frames(n)[0].name == "forward"]
    python = [f for f in tree.path_frames(first) if f.kind == "python"]
    assert python[0].label().startswith("hf_train.py:") and not any(
        "/transformers/" in f.file for f in python
    )
    assert "WARNING" not in run_log(tmp_path)


@pytest.mark.parametrize(
    "framework, script, module",
    [
        # the Lightning script passes DeepContextCallback(...) to its Trainer
        ("lightning", "lightning_fit.py", ("encoder.layers.0", "Linear")),
        # the HF script adds it with trainer.add_callback after Trainer(...): the run's callback,
        # added meanwhile, stands down when training begins
        ("transformers", "hf_train.py", ("transformer.h.0.attn", "GPT2Attention")),
    ],
)
def test_a_scripts_own_callback_is_kept_alone(tmp_path, framework, script, module):
    pytest.importorskip(framework)
    done = deepcontext_run(tmp_path, str(SCRIPTS / script), "--own-callback")
    assert done.returncode == 0, done.stderr
    # the run's logdir and run (DEEPCONTEXT_CONFIG) win over the callback's logdir; its steps stay its own
    name, profile = only_profile(tmp_path)
    assert name == "steps-1-2.pb" and not (tmp_path / "own-profiles").exists()
    assert profile.step_source == ""  # the script's session, not one the run made
    assert module in forward_modules(profile.tree)
    assert "WARNING" not in run_log(tmp_path)
