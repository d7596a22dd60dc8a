"""Both collectors implement ``dc_core/_native.pyi`` name for name: every
function and method it lists exists natively with its parameters and
defaults, and in the reference collector with its full signature, except
those under a "native collector only" heading (which the reference lacks)."""

from __future__ import annotations

import ast
import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import dc_core
from dc_core.collect import reference
from tests.conftest import _collector_class

STUB = Path(dc_core.__file__).with_name("_native.pyi")
NATIVE_ONLY_HEADING = "native collector only"
NO_DEFAULT = "<no default>"


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # inspect.Parameter kind name
    default: Any = NO_DEFAULT
    annotation: str | None = None


@dataclass(frozen=True)
class Function:
    name: str
    params: tuple[Param, ...]
    returns: str | None
    native_only: bool


def params_of(args: ast.arguments) -> tuple[Param, ...]:
    """The parameters of an ``ast`` signature, ``self`` left out."""

    def made(arg: ast.arg, kind: str, default: ast.expr | None) -> Param:
        value = NO_DEFAULT if default is None else ast.literal_eval(default)
        return Param(arg.arg, kind, value, ast.unparse(arg.annotation) if arg.annotation else None)

    positional = [(a, "POSITIONAL_ONLY") for a in args.posonlyargs]
    positional += [(a, "POSITIONAL_OR_KEYWORD") for a in args.args]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    out = [made(a, kind, d) for (a, kind), d in zip(positional, defaults)]
    if args.vararg:
        out.append(made(args.vararg, "VAR_POSITIONAL", None))
    out += [made(a, "KEYWORD_ONLY", d) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    if args.kwarg:
        out.append(made(args.kwarg, "VAR_KEYWORD", None))
    return tuple(p for p in out if p.name != "self")


def functions_in(scope: ast.Module | ast.ClassDef, lines: list[str]) -> dict[str, Function]:
    """The functions defined directly in ``scope``, each marked native-only when
    the last ``# --- ... ---`` heading above it (in the same scope) says so."""
    nested = [range(n.lineno, n.end_lineno + 1) for n in scope.body if isinstance(n, ast.ClassDef)]
    start = scope.lineno if isinstance(scope, ast.ClassDef) else 1
    found = {}
    for node in scope.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        headings = [
            line
            for number, line in enumerate(lines[start - 1 : node.lineno - 1], start=start)
            if line.strip().startswith("# ---") and not any(number in r for r in nested)
        ]
        found[node.name] = Function(
            node.name,
            params_of(node.args),
            ast.unparse(node.returns) if node.returns else None,
            bool(headings) and NATIVE_ONLY_HEADING in headings[-1],
        )
    return found


def stub() -> tuple[dict[str, Function], dict[str, Function], set[str]]:
    """(module functions, Collector methods, module constants) of the stub."""
    source = STUB.read_text()
    tree, lines = ast.parse(source), source.splitlines()
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Collector"]
    constants = {n.target.id for n in tree.body if isinstance(n, ast.AnnAssign)}
    return functions_in(tree, lines), functions_in(cls, lines), constants


def signature_of(fn: Any) -> tuple[tuple[Param, ...], str | None]:
    """A Python function's parameters (``self`` left out) and return annotation."""
    sig = inspect.signature(fn)
    params = tuple(
        Param(
            p.name,
            p.kind.name,
            NO_DEFAULT if p.default is p.empty else p.default,
            None if p.annotation is p.empty else p.annotation,
        )
        for p in sig.parameters.values()
        if p.name != "self"
    )
    return params, None if sig.return_annotation is sig.empty else sig.return_annotation


def native_params(fn: Any) -> tuple[tuple[str, Any], ...]:
    """Names and defaults of a native function, from the signature line that
    pybind11 (and fastcall.cc) put first in its docstring; ``self`` left out."""
    line = fn.__doc__.splitlines()[0]
    (parsed,) = ast.parse(f"def {line}: ...").body
    return tuple((p.name, p.default) for p in params_of(parsed.args))


def names_and_defaults(params: tuple[Param, ...]) -> tuple[tuple[str, Any], ...]:
    return tuple((p.name, p.default) for p in params)


def public(obj: Any) -> set[str]:
    return {n for n in vars(obj) if not n.startswith("_") and callable(getattr(obj, n))}


def test_the_stub_lists_the_contract():
    functions, methods, constants = stub()
    assert set(functions) == {"now_ns", "demangle"} and functions["demangle"].native_only
    assert {"enter", "exit", "snapshot", "__init__"} <= set(methods)
    assert {m for m, f in methods.items() if f.native_only} == {
        "capture_start",
        "capture_stop",
        "capturing",
        "capture_api",
        "capture_suspend",
        "capture_seq",
        "module_enter",
        "module_exit",
        *(
            f"memory_{name}"
            for name in ("start", "stop", "on", "report", "hold", "release", "mark", "snapshot")
        ),
    }
    assert {"KIND_ROOT", "METRIC_SAMPLES", "FLAG_BACKWARD"} <= constants


def test_reference_signatures_are_the_stubs():
    functions, methods, constants = stub()
    for where, listed in ((reference, functions), (reference.Collector, methods)):
        for name, fn in listed.items():
            if fn.native_only:
                assert not hasattr(where, name), f"{name} is documented as native only"
                continue
            assert hasattr(where, name), f"the reference collector has no {name}"
            assert signature_of(getattr(where, name)) == (fn.params, fn.returns), name
    assert public(reference.Collector) == {m for m, f in methods.items() if not f.native_only} - {
        "__init__"
    }
    assert all(hasattr(reference, c) for c in constants)


def test_native_module_has_everything_the_stub_lists_with_its_parameters():
    native = importlib.import_module(_collector_class("native").__module__)
    functions, methods, constants = stub()
    for where, listed in ((native, functions), (native.Collector, methods)):
        for name, fn in listed.items():
            assert hasattr(where, name), name
            assert native_params(getattr(where, name)) == names_and_defaults(fn.params), name
    assert public(native.Collector) == set(methods) - {"__init__"}
    assert {n for n in vars(native) if n.isupper()} == constants


@pytest.mark.parametrize(
    "line, expected",
    [
        (
            "f(self: X, a: int, b: str = '', c: bool = True) -> int",
            (("a", NO_DEFAULT), ("b", ""), ("c", True)),
        ),
        (
            "enter(frames, parent=-1, capture=False, user_depth=-1) -> int",
            (("frames", NO_DEFAULT), ("parent", -1), ("capture", False), ("user_depth", -1)),
        ),
    ],
)
def test_native_signature_lines_parse(line, expected):
    class Fake:
        __doc__ = line + "\n\nSomething."

    assert native_params(Fake) == expected
