"""An executed HLO instruction → its place in the context tree.

The path of an op reads: phase → the user's Python frames from the jitted
function inward, interleaved with Flax module frames (Linen ``MLP/Dense_0``,
NNX ``MLP/layers/0``: root class, then attribute path, see ``nnx_hooks``)
→ operator (the JAX primitive, the HLO instruction as detail; a collective
as XLA runs it, ``all-reduce``) → kernel. The scopes JAX's own
transformations put in the name stack (``while``, ``shard_map``...) are
never module frames; some mark the user's frame they ran (``loop body``).
Ops made by reverse-mode differentiation carry ``transpose(...)`` in their
name stack; they go under the ``backward`` phase with the same Python and
module path as the forward op they came from (JAX records the forward op's
stack for them), flagged backward. ``jvp(...)`` alone is not backward: under
``grad``/``value_and_grad`` the primal (forward) computation is named
``jvp(...)`` too.
"""

from __future__ import annotations

import os
import re
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from dc_jax.hlo import Instruction, Loc, placed
from dc_jax.names import split_combined, split_name_stack

__all__ = [
    "Context",
    "context_of",
    "in_optimizer",
    "parse_op_name",
    "split_name_stack",
    "transform_marker",
]

_WRAPPER = re.compile(r"^([\w\-]+)\((.*)\)$")
_INDEX_SUFFIX = re.compile(r"_\d+$")
#: Name-stack wrappers that name a nested jitted function rather than a scope.
_FUNCTION_WRAPPERS = {
    "jit",
    "pjit",
    "xla_call",
    "xla_pmap",
    "pmap",
    "core_call",
    "custom_jvp_call",
    "custom_vjp_call",
}
_LIBRARY_MARKERS = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)
_OPTIMIZER_MARKERS = (
    os.sep + "optax" + os.sep,
    os.sep + "flax" + os.sep + "training" + os.sep,
    os.path.join(os.sep + "flax", "nnx", "training", "optimizer.py"),
)
#: This package's own frames (the NNX call wrappers) are no more the user's than Flax's.
_OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_NOT_OPTIMIZER = os.sep + "optax" + os.sep + "losses" + os.sep


@dataclass(frozen=True)
class Context:
    """Where an instruction goes: phase, frames above the operator, operator."""

    phase: str
    backward: bool
    frames: tuple[tuple, ...]  # ("python", qualname, file, line, marker) or ("module", path, class)
    operator: str
    scoped: bool = (
        False  # its name stack names scopes beyond JAX's own (Flax modules, named scopes)
    )


def _unwrap(component: str) -> tuple[str, set[str]]:
    """``transpose(jvp(MLP))`` → ``("MLP", {"transpose", "jvp"})``."""
    wrappers: set[str] = set()
    match = _WRAPPER.match(component)
    while match is not None:
        wrappers.add(match.group(1))
        component = match.group(2)
        match = _WRAPPER.match(component)
    return component, wrappers


#: Scopes JAX's own transformations put in the name stack: not modules. A
#: marker names what the ops below run in; None: an implementation detail.
_REMAT = {"checkpoint", "remat", "rematted_computation", "remat2"}
_CALLS = {"closed_call", "core_call"}
_BRANCH = re.compile(r"^branch_(\d+)_fun$")
_COLLECTIVE = re.compile(
    r"^(all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|collective-broadcast)(-start|-done)?$"
)
#: Primitives whose body XLA names under the primitive's own name (a
#: ``shard_map``'s ops read ``jit(step)/shard_map/...``; ``pmap`` runs one).
_BODIES = {
    "shard_map",
    "smap",
    "xla_pmap",
    "pmap",
    "pjit",
    "custom_jvp_call",
    "custom_vjp_call",
    "custom_vjp_call_jaxpr",
    "custom_lin",
    "custom_transpose_call",
    "linear_call",
    "run_state",
    "scan",
    "for",
    "switch",
    "platform_index",
    "shard_alike",
    "checkify",
    "custom_partitioning",
    "pure_callback",
    "io_callback",
    "named_call",
}


def transform_marker(scopes: list[str], i: int) -> str | None:
    """The marker of ``scopes[i]`` if it is a JAX transformation scope, "" if it
    is one without a marker of its own, None if it is not one (a module)."""
    scope, before = scopes[i], scopes[i - 1] if i > 0 else ""
    if scope in _REMAT:
        return "remat"
    if before == "while" and scope in ("body", "body_fn", "body_fun", "body_pred"):
        return "loop body"
    if before == "while" and scope in ("cond", "cond_fn", "cond_fun"):
        return "loop condition"
    if scope in _CALLS or scope in _BODIES or scope in ("while", "cond"):
        return ""  # the loop or conditional itself (its body or branch carries the marker), a shard_map...
    branch = _BRANCH.match(scope)
    if before == "cond" and branch is not None:
        return f"cond branch {branch.group(1)}"
    return None


def _scopes(parts: list[str]) -> list[str]:
    """Scope names of name-stack components (the primitive left out)."""
    scopes = []
    for part in parts:
        inner, wrappers = _unwrap(part)
        if not inner or wrappers & _FUNCTION_WRAPPERS:
            continue  # ``jvp()`` (no scope) or a nested jitted function, whose frames are in the stack
        # ``jnp.einsum`` names its computation after its spec (``BTNH,BSNH->BNTS``): not a module
        scopes.extend(s for s in inner.split("/") if s and "->" not in s)
    return scopes


def parse_op_name(op_name: str) -> tuple[str, list[str], str, bool]:
    """Name stack → (jitted function, scope names, primitive, backward).

    XLA joins the names of instructions it merged with ``;`` (two transposes
    folded into one); the first name places the op. An instruction XLA made
    by combining several (``.../(reduce_sum:jvp()/reduce_sum)``, the
    all-reduce combiner's) has no primitive of its own ("") and sits in the
    scopes its members share (see `_shared`)."""
    function, scopes, members, primitive, backward = _parse(op_name)
    return function, scopes + _shared(members), primitive, backward


def _shared(members: list[list[str]]) -> list[str]:
    """The scopes the members in any scope all begin with: a combined all-reduce
    of a module's gradients and of values reduced outside any module goes
    with the module (communication goes where the parameters it moves are)."""
    members = [m for m in members if m]
    common = 0
    while members and all(len(m) > common and m[common] == members[0][common] for m in members):
        common += 1
    return members[0][:common] if members else []


def _parse(op_name: str) -> tuple[str, list[str], list[list[str]], str, bool]:
    """`parse_op_name`'s parts: the combined members' own scopes apart
    (``[]`` unless the instruction is a combined one)."""
    op_name = op_name.split(";", 1)[0]
    parts = split_name_stack(op_name)
    if not parts:
        return "", [], [], "", False
    backward = "transpose(" in op_name
    function = ""
    first, wrappers = _unwrap(parts[0])
    if wrappers & _FUNCTION_WRAPPERS:
        function, parts = first, parts[1:]
    primitive = parts[-1] if parts else ""
    combined = split_combined(primitive)
    if combined is None:
        return function, _scopes(parts[:-1]), [], primitive, backward
    return (
        function,
        _scopes(parts[:-1]),
        [_scopes(split_name_stack(m)[:-1]) for m in combined],
        "",
        backward,
    )


def _without_transforms(scopes: list[str], classes: Mapping[str, str] | None) -> list[str]:
    """``scopes`` less JAX's own (a recorded module path is a module whatever its name)."""
    return [
        scope
        for i, scope in enumerate(scopes)
        if (classes and "/".join(scopes[: i + 1]) in classes) or transform_marker(scopes, i) is None
    ]


def _collapse_retraces(stack: tuple[Loc, ...]) -> tuple[tuple[Loc, ...], int]:
    """A stack without the repeats of nested traces, and where the innermost
    trace entered it.

    Tracing a ``scan`` body, a ``cond`` branch or a ``checkpoint`` records the
    whole Python stack again from the outermost frame, so XLA's metadata reads
    ``step › loss › forward`` once per nested trace before the body's frames.
    The last repeat is the stack; the frames it shares with the one before it
    end at the call site of the transformation (the index returned)."""
    if not stack:
        return stack, 0
    starts = [i for i, loc in enumerate(stack) if loc == stack[0]]
    if len(starts) < 2:
        return stack, len(stack)
    last, previous = stack[starts[-1] :], stack[starts[-2] : starts[-1]]
    shared = 0
    while shared < min(len(last), len(previous)) and last[shared] == previous[shared]:
        shared += 1
    return last, shared


def in_optimizer(file: str) -> bool:
    """Whether ``file`` is an optimizer's code (optax, Flax's training optimizers)."""
    return _NOT_OPTIMIZER not in file and any(m in file for m in _OPTIMIZER_MARKERS)


@lru_cache(maxsize=4096)
def is_library(file: str) -> bool:
    """Installed packages and the standard library are not the user's code."""
    if not file or file.startswith("<"):
        return file != "<string>" and bool(file)  # "<frozen ...>", not an exec'd user snippet
    if any(marker in file for marker in _LIBRARY_MARKERS) or file.startswith(_OWN_DIR):
        return True
    stdlib = sysconfig.get_paths().get("stdlib", "")
    return bool(stdlib) and file.startswith(stdlib + os.sep)


def _class_of(qualname: str) -> str:
    """``MLP.__call__`` → ``MLP``; ``f.<locals>.Block.__call__`` → ``Block``; ``f`` → ""."""
    parts = qualname.split(".")
    return parts[-2] if len(parts) >= 2 and parts[-2] != "<locals>" else ""


#: Where ops go that nothing places (no metadata, none to inherit): not a phase
#: they may not have run in.
UNATTRIBUTED = "unattributed"


def _phase_of(
    stack: tuple[Loc, ...], backward: bool, marked: str | None, known: bool = True
) -> str:
    if not known:
        return marked if marked and marked != "other" else UNATTRIBUTED
    if backward:
        return "backward"
    if any(in_optimizer(loc.file) for loc in stack):
        return "optimizer"
    if marked and marked != "other":
        return marked
    return "forward"


def context_of(
    instruction: Instruction, marked: str | None = None, classes: Mapping[str, str] | None = None
) -> Context:
    """Place ``instruction`` in the tree.

    Args:
        instruction: The executed HLO instruction with its metadata.
        marked: The phase the user marked when the op's run was dispatched.
        classes: Flax module path → class name, as the Flax hooks recorded them.
    """
    function, prefix, members, primitive, backward = _parse(instruction.op_name)
    scopes = prefix + _shared(members)
    scoped = any(_without_transforms(prefix + m, classes) for m in members or [[]])
    stack = instruction.stack
    if function:  # frames above the jitted function belong to whoever first traced it
        short = function.rsplit(".", 1)[-1]
        for i, loc in enumerate(stack):
            if loc.function.rsplit(".", 1)[-1] == short:
                stack = stack[i:]
                break
    stack, entered = _collapse_retraces(stack)
    markers: list[str] = []
    kept: list[str] = []
    for i in range(len(scopes)):
        path = "/".join(scopes[: i + 1])
        marker = None if classes and path in classes else transform_marker(scopes, i)
        if marker is None:
            kept.append(scopes[i])
        elif marker and (not markers or markers[-1] != marker):
            markers.append(marker)
    scopes = kept
    phase = _phase_of(
        instruction.stack, backward, marked, placed(instruction.op_name, instruction.stack)
    )
    paths = ["/".join(scopes[: i + 1]) for i in range(len(scopes))]
    if classes:  # a path between recorded modules that was never called itself (NNX ``layers``
        # above ``layers/0``) is a container, not a module frame
        deepest = max((i for i, path in enumerate(paths) if path in classes), default=-1)
        keep = [i for i in range(len(paths)) if i >= deepest or paths[i] in classes]
        paths, scopes = [paths[i] for i in keep], [scopes[i] for i in keep]
    module_classes = [
        (classes or {}).get(path) or (scope if i == 0 else _INDEX_SUFFIX.sub("", scope))
        for i, (path, scope) in enumerate(zip(paths, scopes))
    ]
    # A module's frame goes right above the frame of its own method, found by
    # class; a module named by the user (``name="proj"``) and not seen by the
    # Flax hooks takes the next class method's frame and names its class from it.
    insert_at: list[int] = []
    cursor = 0
    for i, cls in enumerate(module_classes):
        # Linen's Conv runs its private base's method, _Conv.__call__
        at = next(
            (
                j
                for j in range(cursor, len(stack))
                if _class_of(stack[j].function) in (cls, "_" + cls)
            ),
            None,
        )
        if at is None and paths[i] not in (classes or {}):
            at = next((j for j in range(cursor, len(stack)) if _class_of(stack[j].function)), None)
            if at is not None:
                module_classes[i] = _class_of(stack[at].function)
        insert_at.append(len(stack) if at is None else at)
        if at is not None:
            cursor = at + 1
    # Each transformation marks the first user frame of the function it traced:
    # the frames past the call site where its stack was entered, in order.
    marks = [""] * len(stack)
    user = [j for j in range(entered, len(stack)) if not is_library(stack[j].file)]
    if markers and not user:
        user = [j for j in range(len(stack)) if not is_library(stack[j].file)][-1:]
    for k, marker in enumerate(markers):
        if user:
            j = user[min(k, len(user) - 1)]
            marks[j] = f"{marks[j]}, {marker}" if marks[j] else marker
    frames: list[tuple] = []
    module = 0
    for j, loc in enumerate(stack):
        while module < len(paths) and insert_at[module] <= j:
            frames.append(("module", paths[module], module_classes[module]))
            module += 1
        if not is_library(loc.file):
            frames.append(("python", loc.function, loc.file, loc.line, marks[j]))
    for k in range(module, len(paths)):
        frames.append(("module", paths[k], module_classes[k]))
    if instruction.inherited or _COLLECTIVE.match(instruction.opcode):
        # the placing instruction's primitive is not this one's; a collective is
        # named as XLA runs it (``psum`` and ``pmean`` are both an ``all-reduce``)
        primitive = ""
    operator = instruction.matmul or primitive or instruction.opcode or instruction.name
    return Context(phase, backward, tuple(frames), operator, scoped)
