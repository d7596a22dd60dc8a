"""DeepContext for Lightning: ``Trainer(callbacks=[DeepContextCallback()])``.

Works with ``import lightning as L`` and with ``pytorch_lightning``; Lightning
is imported only when the callback is.
"""

from __future__ import annotations

import importlib.util
from typing import Any

__all__ = ["DeepContextCallback", "is_available"]


def is_available() -> bool:
    """Whether Lightning (``lightning`` or ``pytorch_lightning``) is importable here."""
    return any(
        importlib.util.find_spec(name) is not None for name in ("lightning", "pytorch_lightning")
    )


def __getattr__(name: str) -> Any:
    if name == "DeepContextCallback":
        from dc_lightning.callback import DeepContextCallback

        return DeepContextCallback
    raise AttributeError(f"module 'dc_lightning' has no attribute {name!r}")
