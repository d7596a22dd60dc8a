"""Compiled HLO modules → what each instruction is and which Python code made it.

XLA keeps, per instruction, ``metadata={op_name=... stack_frame_id=...}`` (or
``source_file``/``source_line`` on older versions), and per module the tables
``FileNames``/``FunctionNames``/``FileLocations``/``StackFrames`` that turn a
stack frame id into the full Python stack JAX recorded while tracing. Both are
read here from the module's text form (``HloModule.to_string()``), the
documented HLO text format; the modules themselves come from the backend's live
executables, so no compile hook is needed and functions compiled before the
profiler started are covered too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from dc_jax.gradients import Graph, backward_name, weight_gradients

_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%([\w.\-]+)\s*=\s*(.*)$")
_OPCODE = re.compile(r"\s([a-z][a-z0-9_\-]*)\(")
_CALLS = re.compile(r"(?:calls|to_apply|body|condition)=%([\w.\-]+)")
_OP_NAME = re.compile(r'op_name="((?:[^"\\]|\\.)*)"')
_SOURCE_FILE = re.compile(r'source_file="((?:[^"\\]|\\.)*)"')
_SOURCE_LINE = re.compile(r"source_line=(\d+)")
_STACK_ID = re.compile(r"stack_frame_id=(\d+)")
_TABLE_ROW = re.compile(r"^(\d+)\s+(.*)$")
_FIELD = re.compile(r"(\w+)=(\d+)")
_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%([\w.\-]+)\s*\(")
_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
# Operands, result shapes and the attributes FLOPs are read from.
_OPERAND = re.compile(r"%([\w.\-]+)")
_SHAPE = re.compile(r"^[a-z][a-z0-9]*\[([\d,]*)\]")
_FUSED_CALL = re.compile(r"\bcalls=%([\w.\-]+)")
_LHS_CONTRACTING = re.compile(r"lhs_contracting_dims=\{([\d,]*)\}")
_WINDOW_SIZE = re.compile(r"window=\{size=([\dx]+)")
_DIM_LABELS = re.compile(r"dim_labels=[a-z0-9]+_([a-z0-9]+)->")

#: HLO opcodes that are matrix products; XLA folds the transposes around a
#: matmul into it and keeps the transpose's metadata, so these name the operator.
MATMUL_OPCODES = {"dot": "dot_general", "convolution": "conv_general_dilated"}


@dataclass(frozen=True)
class Loc:
    """One Python frame JAX recorded: function (qualified), file, line."""

    function: str
    file: str
    line: int


@dataclass(frozen=True)
class Instruction:
    """What an HLO instruction is and where it came from.

    Attributes:
        name: Instruction name, as thunks and kernels are tagged (``hlo_op``).
        opcode: HLO opcode (``dot``, ``fusion``, ``custom-call``...).
        op_name: JAX's name stack, e.g. ``jit(step)/transpose(jvp(MLP))/Dense_0/dot_general``.
        stack: Python frames, outermost first (empty when XLA kept none).
        matmul: The JAX primitive of a matrix product executed by this
            instruction (directly or inside its fusion), else "".
        flops: Floating-point operations of one execution: 2 per multiply-add
            of the matrix products and convolutions it runs (those of its fused
            computation included), as the torch side counts them.
        inherited: XLA kept no metadata for it; ``op_name`` and ``stack`` are
            those of the instruction it was placed by (an operand, a user, or
            the loop or fusion running its computation), or for a weight
            gradient the backward of the product reading its weight (see
            `dc_jax.gradients`).
    """

    name: str
    opcode: str
    op_name: str
    stack: tuple[Loc, ...]
    matmul: str = ""
    inherited: bool = False
    flops: int = 0


def _unquote(text: str) -> str:
    return (
        text.encode("latin-1", "backslashreplace").decode("unicode_escape")
        if "\\" in text
        else text
    )


def _tables(lines: list[str]) -> dict[str, dict[int, str]]:
    """The stack tables: per table, row id → the row's text."""
    tables: dict[str, dict[int, str]] = {}
    current: dict[int, str] | None = None
    for line in lines:
        stripped = line.strip()
        if stripped in _TABLES:
            current = tables.setdefault(stripped, {})
            continue
        if current is None:
            continue
        match = _TABLE_ROW.match(stripped)
        if match is None:
            current = None  # a blank line or the first computation ends the table
            continue
        current[int(match.group(1))] = match.group(2)
    return tables


def _stacks(tables: dict[str, dict[int, str]]) -> dict[int, tuple[Loc, ...]]:
    """Stack frame id → Python frames, outermost first."""
    files = {k: _unquote(v.strip('"')) for k, v in tables.get("FileNames", {}).items()}
    functions = {k: _unquote(v.strip('"')) for k, v in tables.get("FunctionNames", {}).items()}
    locations = {}
    for key, text in tables.get("FileLocations", {}).items():
        fields = dict((k, int(v)) for k, v in _FIELD.findall(text))
        locations[key] = Loc(
            functions.get(fields.get("function_name_id", 0), "?"),
            files.get(fields.get("file_name_id", 0), ""),
            fields.get("line", 0),
        )
    frames = {}
    for key, text in tables.get("StackFrames", {}).items():
        fields = dict((k, int(v)) for k, v in _FIELD.findall(text))
        frames[key] = (fields.get("file_location_id", 0), fields.get("parent_frame_id", 0))
    # Frames are listed parent first, so a true parent id is below the frame's
    # own. The text printer of some XLA versions shows every parent id one
    # higher (root frames then show their own id); detect that instead of
    # trusting one version's printer.
    shift = 1 if any(parent >= key for key, (_, parent) in frames.items()) else 0
    stacks: dict[int, tuple[Loc, ...]] = {}

    def stack_of(key: int) -> tuple[Loc, ...]:
        chain = []
        seen = set()
        while key > 0 and key in frames and key not in seen:
            seen.add(key)
            location, parent = frames[key]
            if location in locations:
                chain.append(locations[location])
            key = parent - shift
        return tuple(reversed(chain))

    for key in frames:
        stacks[key] = stack_of(key)
    return stacks


def _product(values: Iterable[int]) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def _flops(opcode: str, rest: str, out: tuple[int, ...] | None, operands: list) -> int:
    """2 × multiply-adds of a ``dot`` or ``convolution`` from the shapes in the text; 0 otherwise."""
    if out is None or len(operands) < 2 or operands[0] is None or operands[1] is None:
        return 0
    if opcode == "dot":
        contracting = _LHS_CONTRACTING.search(rest)
        dims = [int(d) for d in contracting.group(1).split(",") if d] if contracting else []
        if any(d >= len(operands[0]) for d in dims):
            return 0
        return 2 * _product(out) * _product(operands[0][d] for d in dims)
    if opcode == "convolution":
        window, labels = _WINDOW_SIZE.search(rest), _DIM_LABELS.search(rest)
        if labels is None or "i" not in labels.group(1) or len(labels.group(1)) != len(operands[1]):
            return 0
        # input features a kernel reads (per group)
        per_output = operands[1][labels.group(1).index("i")]
        if window is not None:
            per_output *= _product(int(w) for w in window.group(1).split("x"))
        return 2 * _product(out) * per_output
    return 0


def _operands(rest: str, opcode: str) -> list[str]:
    """Names of the operands in ``opcode(%a, %b), attributes...``."""
    at = rest.find(opcode + "(")
    if at < 0:
        return []
    depth, start = 0, at + len(opcode)
    for i in range(start, len(rest)):
        if rest[i] == "(":
            depth += 1
        elif rest[i] == ")":
            depth -= 1
            if depth == 0:
                return _OPERAND.findall(rest[start:i])
    return []


def parse_module(text: str) -> dict[str, Instruction]:
    """Every instruction of an HLO module's text, by name."""
    lines = text.splitlines()
    stacks = _stacks(_tables(lines))
    raw: dict[str, tuple[str, str, tuple[Loc, ...], list[str]]] = {}
    opcodes_of: dict[str, set[str]] = {}  # computation → opcodes directly in it
    calls_of: dict[str, list[str]] = {}
    computation_of: dict[str, str] = {}  # instruction → its computation
    users_of: dict[str, list[str]] = {}  # instruction → instructions using it
    inherits: set[str] = set()
    caller_of: dict[str, str] = {}  # computation → the instruction that calls it
    shapes: dict[str, tuple[int, ...]] = {}  # array results' dimensions
    own_flops: dict[str, int] = {}
    fused: dict[
        str, list[str]
    ] = {}  # instruction → computations it runs inside itself (a fusion's)
    members: dict[str, list[str]] = {}  # computation → its instructions
    operands_of: dict[str, list[str]] = {}
    own_names: dict[str, str] = {}  # instruction → its own name stack ("" without metadata)
    computation = ""
    for line in lines:
        head = _COMPUTATION.match(line)
        if head is not None:
            computation = head.group(1)
            opcodes_of.setdefault(computation, set())
            continue
        match = _INSTRUCTION.match(line)
        if match is None:
            continue
        name, rest = match.groups()
        opcode_match = _OPCODE.search(" " + rest)
        opcode = opcode_match.group(1) if opcode_match else ""
        meta_at = rest.find("metadata={")
        meta = rest[meta_at:] if meta_at >= 0 else ""
        op_name = _OP_NAME.search(meta)
        stack: tuple[Loc, ...] = ()
        frame_id = _STACK_ID.search(meta)
        if frame_id is not None:
            stack = stacks.get(int(frame_id.group(1)), ())
        if not stack:
            source = _SOURCE_FILE.search(meta)
            if source is not None:
                source_line = _SOURCE_LINE.search(meta)
                stack = (
                    Loc(
                        "",
                        _unquote(source.group(1)),
                        int(source_line.group(1)) if source_line else 0,
                    ),
                )
        called = _CALLS.findall(rest)
        op_text = _unquote(op_name.group(1)) if op_name else ""
        operands = _operands(rest, opcode)
        operands_of[name], own_names[name] = operands, op_text
        for o in operands:
            users_of.setdefault(o, []).append(name)
        if not op_text and not stack:
            # No metadata (a layout copy, a gradient XLA rewrote): it belongs where
            # its inputs come from; a gradient input makes it backward.
            donors = [raw[o] for o in operands if o in raw and placed(raw[o][1], raw[o][2])]
            donor = next((d for d in donors if "transpose(" in d[1]), donors[0] if donors else None)
            if donor is not None:
                op_text, stack = donor[1], donor[2]
            inherits.add(name)
        raw[name] = (opcode, op_text, stack, called)
        shape = _SHAPE.match(rest)
        if shape is not None:
            shapes[name] = tuple(int(d) for d in shape.group(1).split(",") if d)
        own_flops[name] = _flops(opcode, rest, shapes.get(name), [shapes.get(o) for o in operands])
        fused[name] = _FUSED_CALL.findall(rest)
        members.setdefault(computation, []).append(name)
        computation_of[name] = computation
        for inner in called:
            caller_of.setdefault(inner, name)
        opcodes_of.setdefault(computation, set()).add(opcode)
        calls_of.setdefault(computation, []).extend(called)

    def matmul_in(computation: str, depth: int = 0) -> str:
        for opcode, primitive in MATMUL_OPCODES.items():
            if opcode in opcodes_of.get(computation, ()):
                return primitive
        if depth < 4:
            for inner in calls_of.get(computation, ()):
                found = matmul_in(inner, depth + 1)
                if found:
                    return found
        return ""

    def inherited(name: str) -> tuple[str, tuple[Loc, ...]]:
        # Still nothing: the first user that is placed (a weight's layout copy
        # belongs to the op that reads it), else the instruction that runs its
        # computation (a loop's carried copies belong to the ``while``).
        seen = set()
        while name in raw and not placed(raw[name][1], raw[name][2]) and name not in seen:
            seen.add(name)
            user = next((u for u in users_of.get(name, ()) if placed(raw[u][1], raw[u][2])), None)
            name = user or caller_of.get(computation_of.get(name, ""), "")
        return (raw[name][1], raw[name][2]) if name in raw else ("", ())

    def flops_of(name: str, depth: int = 0) -> int:
        total = own_flops.get(name, 0)
        if depth < 8:
            for computation in fused.get(name, ()):
                total += sum(flops_of(inner, depth + 1) for inner in members.get(computation, ()))
        return total

    products = {}
    for name, (opcode, _, _, called) in raw.items():
        matmul = MATMUL_OPCODES.get(opcode, "")
        if not matmul and opcode == "fusion":
            matmul = next((m for c in called if (m := matmul_in(c))), "")
        if matmul:
            products[name] = matmul
    nested = {
        n for computations in fused.values() for c in computations for n in members.get(c, ())
    }
    graph = Graph(
        {n: r[0] for n, r in raw.items()},
        own_names,
        operands_of,
        users_of,
        shapes,
        products,
        inherits,
        nested,
    )
    # a weight gradient goes with its weight, not its neighbour
    gradient_of = weight_gradients(graph)

    out = {}
    for name, (opcode, op_name, stack, _called) in raw.items():
        if name in gradient_of:
            forward = raw[gradient_of[name]]
            op_name, stack = backward_name(forward[1]), forward[2]
        elif name in inherits and not placed(op_name, stack):
            op_name, stack = inherited(name)
        out[name] = Instruction(
            name, opcode, op_name, stack, products.get(name, ""), name in inherits, flops_of(name)
        )
    return out


def placed(op_name: str, stack: tuple[Loc, ...]) -> bool:
    """Whether metadata places an instruction in the tree: a name stack or Python
    frames (a parameter's ``op_name`` is only its argument's name)."""
    return bool(stack) or "/" in op_name
