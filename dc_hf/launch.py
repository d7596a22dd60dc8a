"""Hugging Face steps for ``deepcontext run``: the script's first ``Trainer``
gets the callback (see `dc_core.launch.trainers`)."""

from __future__ import annotations

from typing import Any

from dc_core.launch.trainers import TrainerKind, patch


def _callback() -> type:
    from dc_hf.callback import DeepContextCallback

    return DeepContextCallback


HUGGING_FACE = TrainerKind(
    name="Hugging Face",
    steps="state.global_step",
    callback=_callback,
    callbacks=lambda trainer: trainer.callback_handler.callbacks,
    add=lambda trainer, callback: trainer.add_callback(callback),
    begin="on_train_begin",
)


def install(launch: Any, module: Any) -> None:
    """``transformers.trainer`` was imported in a process of ``deepcontext run``."""
    patch(launch, module.Trainer, HUGGING_FACE)
