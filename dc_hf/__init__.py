"""DeepContext for Hugging Face: ``Trainer(..., callbacks=[DeepContextCallback()])``.

transformers is imported only when the callback is.
"""

from __future__ import annotations

import importlib.util
from typing import Any

__all__ = ["DeepContextCallback", "is_available"]


def is_available() -> bool:
    """Whether transformers is importable here."""
    return importlib.util.find_spec("transformers") is not None


def __getattr__(name: str) -> Any:
    if name == "DeepContextCallback":
        from dc_hf.callback import DeepContextCallback

        return DeepContextCallback
    raise AttributeError(f"module 'dc_hf' has no attribute {name!r}")
