"""The packages' import graph, read from the source with `ast`: no cycles;
``model/``, the vocabulary every layer reads, imports only itself and the
standard library; ``record/``, the writer side, imports nothing that reads
profiles (the analyzer, the CLI, the tab).

An import counts wherever it is written, a function body included (a
function-level import is a cycle deferred, not removed); one under ``if
TYPE_CHECKING:`` does not (it never runs). Importing ``a.b.c`` runs ``a/b``'s
``__init__`` too, so that is an edge as well, except to the importer's own
ancestor packages: those are already being imported when it runs.
Imports by string (``importlib.import_module``, entry points) are not seen.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("dc_core", "dc_torch", "dc_jax", "dc_lightning", "dc_hf")


def modules_under(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Dotted module name → source file, for every ``.py`` file of ``packages``."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported_names(tree: ast.Module, module: str, is_package: bool) -> list[str]:
    """Every absolute module name ``module`` imports (an ``from a import b``
    gives ``a.b``: b may be a submodule), outside ``if TYPE_CHECKING:``."""
    package = module if is_package else module.rpartition(".")[0]
    names: list[str] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                base = ".".join(filter(None, (base, node.module)))
            else:
                base = node.module or ""
            names.append(base)
            names.extend(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
        stack.extend(ast.iter_child_nodes(node))
    return names


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def import_graph(modules: dict[str, Path]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """``(edges, outside)``: per module, the modules of ``modules`` it imports
    (what it names and the packages above that, less its own ancestors), and
    the top-level names of everything else it imports."""
    edges: dict[str, set[str]] = {m: set() for m in modules}
    outside: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        own = {module, *_ancestors(module)}
        for name in imported_names(tree, module, path.name == "__init__.py"):
            if name.split(".")[0] not in {m.split(".")[0] for m in modules}:
                outside[module].add(name.split(".")[0])
                continue
            for target in (*_ancestors(name), name):
                if target in modules and target not in own:
                    edges[module].add(target)
    return edges, outside


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (its modules in import order, the first repeated last) per
    strongly connected component of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, kids = work[-1]
            for kid in kids:
                if kid not in index:
                    index[kid] = low[kid] = len(index)
                    stack.append(kid)
                    on_stack.add(kid)
                    work.append((kid, iter(sorted(edges[kid]))))
                    break
                if kid in on_stack:
                    low[node] = min(low[node], index[kid])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return [_cycle_in(edges, set(c), c[0]) for c in components]


def _cycle_in(edges: dict[str, set[str]], members: set[str], start: str) -> list[str]:
    """A shortest path from ``start`` back to itself inside one component."""
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for kid in sorted(edges[node] & members):
                if kid == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if kid not in came_from:
                    came_from[kid] = node
                    following.append(kid)
        frontier = following
    raise AssertionError(f"{start} is in no cycle of its component")


def _shown(found: list[list[str]]) -> str:
    return "\n".join(" -> ".join(c) for c in found)


def _within(name: str, *packages: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def crossings(edges: dict[str, set[str]], layer: str, may_import) -> dict[str, list[str]]:
    """Per module of package ``layer``, what it imports that ``may_import`` refuses (none: left out)."""
    found = {
        m: sorted(t for t in edges[m] if not may_import(t)) for m in edges if _within(m, layer)
    }
    return {m: t for m, t in found.items() if t}


def _project_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    return import_graph(modules_under(ROOT, PACKAGES))


def test_no_import_cycles():
    edges, _ = _project_graph()
    assert len(edges) > 100  # the walk found the packages
    found = cycles(edges)
    assert not found, "import cycles (module -> module it imports):\n" + _shown(found)


def test_model_imports_only_model_and_the_standard_library():
    edges, outside = _project_graph()
    assert "dc_core.model.tree" in edges and "dc_core.model.rules" in edges
    wrong = crossings(edges, "dc_core.model", lambda t: _within(t, "dc_core.model"))
    assert not wrong, "model/ is the vocabulary every layer reads"
    model = [m for m in edges if _within(m, "dc_core.model")]
    foreign = {m: sorted(outside[m] - set(sys.stdlib_module_names) - {"__future__"}) for m in model}
    assert not {m: t for m, t in foreign.items() if t}


READERS = ("dc_core.analyzer", "dc_core.cli", "dc_core.tensorboard")


def test_record_does_not_import_the_readers():
    edges, _ = _project_graph()
    assert "dc_core.record.validate" in edges
    wrong = crossings(edges, "dc_core.record", lambda t: not _within(t, *READERS))
    assert not wrong, "the writer side must not import what reads profiles"


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_planted_cycle_is_found_and_named(tmp_path):
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from . import c\n\ndef late():\n    from .b import thing\n",
            "pkg/b.py": "import pkg.a\nthing = 1\n",
            # c reaches a only for typing: not a cycle.
            "pkg/c.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import late\n"
            ),
            # A package importing its submodule, which imports its package: not a cycle.
            "pkg/sub/__init__.py": "from .x import y\n",
            "pkg/sub/x.py": "from .. import sub\nfrom pkg.sub import __name__ as n\ny = 1\n",
        },
    )
    edges, outside = import_graph(modules_under(tmp_path, ("pkg",)))
    assert edges["pkg.a"] == {"pkg.b", "pkg.c"}
    assert edges["pkg.c"] == set()
    assert edges["pkg.sub.x"] == set()
    assert outside["pkg.c"] == {"typing"}
    assert cycles(edges) == [["pkg.a", "pkg.b", "pkg.a"]]


def test_a_cycle_through_a_package_init_is_found(tmp_path):
    # Importing pkg.one.leaf runs pkg/one/__init__.py, which imports pkg.two.
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/one/__init__.py": "from ..two import mid\n",
            "pkg/one/leaf.py": "",
            "pkg/two/__init__.py": "",
            "pkg/two/mid.py": "from ..one.leaf import *\n",
        },
    )
    edges, _ = import_graph(modules_under(tmp_path, ("pkg",)))
    assert cycles(edges) == [["pkg.one", "pkg.two.mid", "pkg.one"]]


def test_a_planted_crossing_is_found(tmp_path):
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/model/__init__.py": "",
            "pkg/model/tree.py": "from . import kinds\n\ndef load():\n    from ..store import profile\n",
            "pkg/model/kinds.py": "",
            "pkg/store/__init__.py": "",
            "pkg/store/profile.py": "from ..model.tree import load\n",
        },
    )
    edges, _ = import_graph(modules_under(tmp_path, ("pkg",)))
    assert crossings(edges, "pkg.model", lambda t: _within(t, "pkg.model")) == {
        "pkg.model.tree": ["pkg.store", "pkg.store.profile"]
    }
    assert crossings(edges, "pkg.store", lambda t: _within(t, "pkg.model")) == {}
