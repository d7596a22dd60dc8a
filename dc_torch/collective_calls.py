"""What a collective's call says of it, read where the call is intercepted
(`dc_torch.collectives`): the bytes it moves, what its call and a wait for
it exposed, and who issued it (a ``dist.*`` call that waits at once, C++
code of a backward pass such as DDP's reducer)."""

from __future__ import annotations

from typing import Any

import torch

#: The Python frame below the C++ that autograd's engine runs: a collective
#: called from this frame was issued by C++ during a pass (DDP's reducer).
_ENGINE = torch.autograd.graph._engine_run_backward.__code__
#: The module of ``dist.*``: a collective it calls with ``async_op=False`` is
#: waited for by it at once.
_C10D = torch.distributed.distributed_c10d.__file__ if torch.distributed.is_available() else ""
#: What DDP's reducer hands a communication hook: a hook's frame holds one.
_GradBucket = getattr(getattr(torch._C, "_distributed_c10d", None), "GradBucket", None)
#: The Python frames a communication hook may stand on above the engine's.
HOOK_DEPTH = 16


def exposed(done: int, call: tuple[int, int], wait: tuple[int, int]) -> tuple[int, int]:
    """What a collective that completed at ``done`` (0: not known) exposed of
    its ``call`` and of a ``wait`` for it (start, end ns each): the call up to
    its completion (after it, the call was launching, not communicating),
    the whole wait where it began before it (its wake-up included: overlap
    would have saved that too), none of a wait that began after."""
    if not done:
        return call[1] - call[0], wait[1] - wait[0]
    return max(min(call[1], done) - call[0], 0), wait[1] - wait[0] if wait[0] < done else 0


def moved_bytes(args: tuple, positions: tuple[int, ...]) -> int:
    """Bytes a collective moves: its largest tensor argument (a list counts
    whole), of those at ``positions`` (`tensor_positions`)."""
    return max((_tensor_bytes(args[i]) for i in positions if i < len(args)), default=0)


def tensor_positions(op: Any) -> tuple[int, ...]:
    """Where an op's schema takes tensors or lists of them: the arguments
    `moved_bytes` reads, not the process group or the reduce op."""
    return tuple(i for i, arg in enumerate(op._schema.arguments) if "Tensor" in str(arg.type))


def _tensor_bytes(arg: Any) -> int:
    """A tensor's bytes, a (nested) list's sum of them, else 0."""
    if isinstance(arg, torch.Tensor):
        return arg.numel() * arg.element_size()
    if isinstance(arg, (list, tuple)):
        return sum(map(_tensor_bytes, arg))
    return 0


def waited_at_once(caller: Any) -> bool:
    """Whether ``caller``, the frame that called a collective, is a ``dist.*``
    function called with ``async_op=False``: it waits for the work before it
    returns."""
    return (
        caller is not None
        and caller.f_code.co_filename == _C10D
        and caller.f_locals.get("async_op", True) is False
    )


def issued_by_the_pass(caller: Any) -> bool:
    """Whether C++ code of a backward pass issued the collective that
    ``caller`` calls: DDP's reducer itself (``caller`` is the engine's frame),
    or a Python communication hook it ran (``register_comm_hook``: the
    outermost frame above the engine's is the hook's, holding its bucket). A
    Python backward hook of the user's that calls a collective is neither."""
    if caller.f_code is _ENGINE:
        return True
    frame = caller
    for _ in range(HOOK_DEPTH):
        below = frame.f_back
        if below is None:
            return False
        if below.f_code is _ENGINE:
            return _GradBucket is not None and any(
                isinstance(value, _GradBucket) for value in frame.f_locals.values()
            )
        frame = below
    return False


def on_cpu(args: tuple) -> bool:
    """Whether a collective's first tensor argument (a list's first) is on the CPU."""
    for arg in args:
        while isinstance(arg, (list, tuple)) and arg:
            arg = arg[0]
        if isinstance(arg, torch.Tensor):
            return arg.device.type == "cpu"
    return False
