"""Every module logs to the one ``"deepcontext"`` logger: a user silences or
raises the profiler's messages with one name, whichever stage wrote them."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("dc_core", "dc_torch", "dc_jax", "dc_lightning", "dc_hf")


def logger_names(source: str) -> list[str]:
    """The first argument of each ``logging.getLogger(...)`` in ``source``,
    as written (a name that is not a string literal as its source text)."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "getLogger"
            and node.args
        ):
            arg = node.args[0]
            names.append(arg.value if isinstance(arg, ast.Constant) else ast.unparse(arg))
    return names


def test_the_checker_sees_a_module_logger():
    assert logger_names("import logging\nlog = logging.getLogger(__name__)\n") == ["__name__"]


def test_every_module_logs_to_deepcontext():
    wrong = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            # The demo quietens other libraries' loggers by name.
            names = [n for n in logger_names(path.read_text()) if n != "name"]
            if any(n != "deepcontext" for n in names):
                wrong[str(path.relative_to(ROOT))] = names
    assert not wrong
