"""A module's hotspot holds its layers: its share is the one the tree shows for it."""

from __future__ import annotations

import pytest

from dc_core.analyzer import analyze
from tests.analyzer.helpers import MS, line, only, profile

ATTENTION = "Decoder/EncoderDecoder1DBlock_0/MultiHeadDotProductAttention_0"
BLOCK = line("EncoderDecoder1DBlock.__call__", "models.py:210")
MLP = line("EncoderDecoder1DBlock.__call__", "models.py:214")
LOSS = line("loss_fn", "train.py:80")
JAX = {"framework": "jax", "env": {"jax": "0.10.2", "backend": "cpu"}}
EVERY = {"hotspot.top": 100, "hotspot.min_share": 0}  # every place, whatever its share


def _places(summary: dict) -> dict[str, dict]:
    """The hotspot summary's places by label."""
    return {place["label"]: place for place in summary["evidence"]["lines"]}


def _attention(scale: int, backward: bool = False) -> tuple:
    """An attention module as Linen nests it: its own matmuls, then its layers
    (called from flax's own code, whose frames are left out)."""
    flag = " [backward]" if backward else ""
    op = f"operator:dot_general{flag}"
    layers = (
        (f"module:{ATTENTION}/{p}", f"{op} @device_time_ns={scale * MS}")
        for p in ("query", "key", "value", "out")
    )
    return (f"module:{ATTENTION}", f"{op} @device_time_ns={4 * scale * MS}", *layers)


def _lm1b():
    return profile(
        (
            "forward",
            (
                LOSS,
                (BLOCK, _attention(1)),
                (
                    MLP,
                    (
                        "module:Decoder/EncoderDecoder1DBlock_0/MlpBlock_0",
                        f"operator:dot_general @device_time_ns={30 * MS}",
                    ),
                ),
            ),
        ),
        ("backward", (LOSS, (BLOCK, _attention(2, backward=True)))),
        **JAX,
    )


def test_a_modules_hotspot_is_its_inclusive_time_as_the_tree_shows_it():
    # Regression (flax lm1b): attention's hotspot counted its own matmuls only, 9.6%
    # of the window, where its row in the tree (its layers in) read 14.3%.
    p = _lm1b()
    tree = p.tree
    time = tree.inclusive("device_time_ns")
    shown = sum(time[n] for n in range(len(tree)) if tree.node_frame(n).name == ATTENTION)
    assert shown == 8 * MS + 16 * MS  # forward (4 + 4x1) and backward (8 + 4x2)
    summary = only(analyze(p, EVERY), "hotspot")
    hot = _places(summary)
    attention = hot[ATTENTION]
    assert attention["time_ns"] == shown
    assert attention["share"] == round(shown / time[0], 4)
    assert attention["forward_ns"] == 8 * MS and attention["backward_ns"] == 16 * MS
    assert p.tree.path_frames(attention["node"])[0].name == "backward"  # shown where it spends most
    assert f"{ATTENTION} {100 * shown / time[0]:.1f}%" in summary["message"]
    # its layers are in it, not places of their own; a module of its own stays one
    assert not [label for label in hot if label.startswith(f"{ATTENTION}/")]
    assert hot["Decoder/EncoderDecoder1DBlock_0/MlpBlock_0"]["time_ns"] == 30 * MS


def test_a_module_calling_modules_that_call_modules_keeps_them_apart():
    # Only layers (modules with no module below them) fold into the module that
    # calls them: a whole model of library modules (HF's, all one package) still
    # reports its attention and MLP apart, not the model at 100%.
    model = "module:GPT2LMHeadModel"
    block = "module:transformer.h.0"
    p = profile(
        (
            "forward",
            (
                LOSS,
                (
                    model,
                    f"operator:aten::cross_entropy @cpu_time_ns={MS}",
                    (
                        block,
                        f"operator:aten::add @cpu_time_ns={MS}",
                        (
                            "module:transformer.h.0.attn",
                            f"operator:aten::bmm @cpu_time_ns={20 * MS}",
                            (
                                "module:transformer.h.0.attn.c_attn",
                                f"operator:aten::addmm @cpu_time_ns={10 * MS}",
                            ),
                        ),
                        (
                            "module:transformer.h.0.mlp",
                            (
                                "module:transformer.h.0.mlp.c_fc",
                                f"operator:aten::addmm @cpu_time_ns={30 * MS}",
                            ),
                        ),
                    ),
                ),
            ),
        ),
    )
    hot = {
        label: place["time_ns"]
        for label, place in _places(only(analyze(p, EVERY), "hotspot")).items()
    }
    assert hot == {
        "transformer.h.0.attn": 30 * MS,
        "transformer.h.0.mlp": 30 * MS,
        "transformer.h.0": MS,
        "GPT2LMHeadModel": MS,
    }


@pytest.mark.slow
def test_linen_attentions_hotspot_is_its_share_in_the_tree(tmp_path):
    pytest.importorskip("jax")
    pytest.importorskip("flax")
    pytest.importorskip("optax")
    from tests.jax import workloads
    from tests.jax.helpers import profile_with_trace

    train_step, state, (x, y) = workloads.block_training()
    box = [state]

    def step():
        box[0], loss = train_step(box[0], x, y)
        loss.block_until_ready()

    step()
    profile, _ = profile_with_trace(tmp_path, step)
    tree = profile.tree
    time = tree.inclusive("device_time_ns")
    attention = "Classifier/Block_0/MultiHeadDotProductAttention_0"
    shown = sum(time[n] for n in range(len(tree)) if tree.node_frame(n).name == attention)
    hot = _places(only(analyze(profile, EVERY), "hotspot"))
    assert hot[f"{attention} (MultiHeadDotProductAttention)"]["time_ns"] == shown > 0
    # query, key, value, out are in it
    assert not [label for label in hot if label.startswith(f"{attention}/")]
