"""A user's exception reaches the user with the traceback it has without the
profiler: the profiler's own frames (its wrappers of ``backward``, of
``DataLoader.__next__``, its operator mode and scopes) are cut from it, and
no error of the profiler's is chained to it as its context.

On the Python capture path torch itself adds frames for the profiler's hooks,
above them, which Python gives no way to unlink: ``overrides.py
handle_torch_function`` (and the function's frame that called it) for a
torch function a function mode intercepts, and ``module.py inner`` for a
module call while module hooks are set. Those, and only those, stay.
"""

from __future__ import annotations

import traceback

import pytest

torch = pytest.importorskip("torch")
from torch import nn

import dc_torch
from dc_core.record.config import StepRange

#: torch's frames that exist only while the Python path's hooks are on.
TORCH_DISPATCH = {("overrides.py", "handle_torch_function"), ("module.py", "inner")}


class Boom(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("in backward")


class Bad(nn.Module):
    def forward(self, x):
        raise ValueError("in forward")


class Samples(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int):
        raise KeyError("in a sample")


def _closure_fails():
    opt = torch.optim.SGD([nn.Parameter(torch.ones(2))], lr=0.1)

    def closure():
        raise ArithmeticError("in a closure")

    opt.step(closure)


CASES = {
    "forward": lambda: nn.Sequential(nn.Linear(2, 2), Bad())(torch.ones(1, 2)),
    "backward": lambda: Boom.apply(torch.ones(2, requires_grad=True)).sum().backward(),
    "autograd.grad": lambda: torch.autograd.grad(
        Boom.apply(torch.ones(2, requires_grad=True)).sum(), [torch.ones(2, requires_grad=True)]
    ),
    "dataloader": lambda: next(iter(torch.utils.data.DataLoader(Samples(), batch_size=2))),
    "operator": lambda: torch.mm(torch.ones(2, 3), torch.ones(2, 3)),
    "functional": lambda: nn.functional.layer_norm(torch.ones(2, 3), (4,)),
    "closure": _closure_fails,
}


def _raised(case) -> BaseException:
    try:
        case()
    except Exception as exc:
        return exc
    raise AssertionError("the case did not raise")


def _frames(exc: BaseException) -> list[tuple[str, str]]:
    return [
        (f.filename.rsplit("/", 1)[-1], f.name) for f in traceback.extract_tb(exc.__traceback__)
    ]


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_users_traceback_is_the_one_it_has_alone(case, capture_path, tmp_path):
    alone = _raised(CASES[case])
    with dc_torch.profile(
        logdir=str(tmp_path),
        steps=StepRange(start=0, count=5),
        cpu_sampling_hz=0,
        system_interval_ms=0,
    ) as prof:
        prof.step()
        profiled = _raised(CASES[case])
    assert not prof.session.disabled  # the user's error is not the profiler's
    assert type(profiled) is type(alone) and str(profiled) == str(alone)
    assert profiled.__context__ is None and profiled.__cause__ is None
    seen, plain = _frames(profiled), _frames(alone)
    if capture_path == "native":
        assert seen == plain
    else:  # torch's own frames for the hooks, and the function a mode ran again
        assert _without_reentries([f for f in seen if f not in TORCH_DISPATCH]) == plain, (
            seen,
            plain,
        )


def _without_reentries(frames: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``frames`` with a frame that follows a frame of the same function (a
    torch function the mode ran again) taken once."""
    return [f for i, f in enumerate(frames) if i == 0 or f != frames[i - 1]]


def test_a_profiler_error_is_not_the_context_of_the_users_error(
    tmp_path, monkeypatch, python_capture
):
    """Regression: the user's call, run again after the profiler's own failure
    inside the profiler's handler, chained that failure to the user's error."""
    from dc_torch import ops

    def broken(frames, func):
        raise RuntimeError("the profiler's own")

    monkeypatch.setattr(ops, "classify", broken)
    with dc_torch.profile(
        logdir=str(tmp_path),
        steps=StepRange(start=0, count=5),
        cpu_sampling_hz=0,
        system_interval_ms=0,
    ) as prof:
        prof.step()
        raised = _raised(CASES["operator"])
    assert prof.session.disabled  # the profiler failed and said so
    assert isinstance(raised, RuntimeError) and "the profiler's own" not in str(raised)
    assert raised.__context__ is None


def test_a_jitted_functions_error_has_no_frame_of_the_wrapper_around_it():
    """Under ``deepcontext run`` every ``jax.jit`` function is seen through a
    wrapper of the profiler's; a user's error inside it keeps the traceback
    JAX gives it alone."""
    jax = pytest.importorskip("jax")
    from dc_jax.launch import Jitted

    def step(x):
        return x @ x  # a vector of length 3 and one of length 2 do not multiply: JAX's TypeError

    alone = _raised(lambda: jax.jit(step)(jax.numpy.ones(3)[:, None]))
    wrapped = _raised(lambda: Jitted(jax.jit(step), "jax.jit")(jax.numpy.ones(3)[:, None]))
    assert type(wrapped) is type(alone) and str(wrapped) == str(alone)
    assert _frames(wrapped) == _frames(alone) and not [
        f for f in _frames(wrapped) if f[0] == "launch.py"
    ]
