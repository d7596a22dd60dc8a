"""The native capture path: building, loading and driving the RecordFunction extension.

The extension (``dc_torch/csrc/capture.cc``) must be compiled against the torch
that imports it: same version, same C++ ABI. pip's build isolation would
compile against a torch of its own choosing, so it is not built at install
time but on first use, by torch's own ``cpp_extension`` machinery (ninja and a
C++17 compiler), into a cache keyed by the torch version, its C++ ABI, the
Python tag and the source. ``make demo`` and ``make test`` warm that cache
(``python -m dc_torch.native``); a job started by a user pays the build once
per machine (about 20 s), before its first window.

Where it cannot be built or loaded (no compiler, a torch without headers, the
pure-Python collector), ``load()`` says why once and the adapter falls back
to the Python capture path (``TorchFunctionMode`` and module hooks); the
profile's environment says which path ran (``capture``).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import platform
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

logger = logging.getLogger(__name__)

_SOURCE = Path(__file__).parent / "csrc" / "capture.cc"
_HEADERS = (Path(__file__).parent / "csrc" / "names.h",)  # beside it, included by it
_INCLUDE = Path(__file__).resolve().parent.parent / "dc_core" / "include"

#: A metric id that takes nothing: ``NativeCapture.start`` leaves that metric
#: out, and the collector's ``op_exit`` adds nothing (``capture_api.h``).
NO_METRIC = -1
#: What a module namer answers when it cannot name the module: its operators
#: sit under the caller, counted among the naming errors ``stop`` returns.
NO_FRAME = -1


def cache_dir() -> Path:
    """Where built extensions live: ``$DEEPCONTEXT_CACHE``, else the user's cache."""
    root = os.environ.get("DEEPCONTEXT_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "deepcontext"
    )
    return Path(root) / "torch-capture"


def build_key() -> str:
    """What the binary depends on: torch version and C++ ABI, Python, machine, sources."""
    digest = hashlib.sha256()
    for part in (torch.__version__, str(torch._C._GLIBCXX_USE_CXX11_ABI), sys.implementation.cache_tag,
                 platform.machine()):
        digest.update(part.encode() + b"\0")
    digest.update(b"-O2 -DNDEBUG")  # the flags below
    for path in (_SOURCE, *_HEADERS, _INCLUDE / "capture_api.h"):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def build(verbose: bool = False) -> ModuleType:
    """Compile (or reuse from the cache) and import the extension; raises on failure."""
    from torch.utils import cpp_extension

    name = f"dc_torch_capture_{build_key()}"
    directory = cache_dir() / name
    # The sources are copied in first: ninja keys its state on the source paths,
    # so two checkouts sharing this cache entry would otherwise rebuild it in turn.
    source = directory / "src" / _SOURCE.name
    include = directory / "src" / "include"
    include.mkdir(parents=True, exist_ok=True)
    copies = [(_SOURCE, source), *((h, source.parent / h.name) for h in _HEADERS),
              (_INCLUDE / "capture_api.h", include / "capture_api.h")]
    for src, dst in copies:
        if not dst.exists() or dst.read_bytes() != src.read_bytes():
            dst.write_bytes(src.read_bytes())
    # ninja may be installed into this environment's bin/ without it being on PATH.
    bin_dir = os.path.dirname(sys.executable)
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    return cpp_extension.load(
        name=name,
        sources=[str(source)],
        extra_include_paths=[str(include)],
        extra_cflags=["-O2", "-DNDEBUG", "-fno-omit-frame-pointer"],
        build_directory=str(directory),
        verbose=verbose,
        is_python_module=True,
    )


@functools.cache
def load() -> tuple[ModuleType | None, str]:
    """The extension, or ``None`` and why not (tried once per process)."""
    if os.environ.get("DEEPCONTEXT_NO_NATIVE_CAPTURE"):
        return None, "DEEPCONTEXT_NO_NATIVE_CAPTURE is set"
    try:
        return build(), ""
    except Exception as exc:  # any build failure means the fallback
        reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
        logger.warning("native operator capture unavailable (%s); using the Python capture path", reason)
        return None, reason


class BusyError(RuntimeError):
    """Another collector's window holds the process-wide capture."""


class NativeCapture:
    """One window's RecordFunction capture into one collector.

    ``start`` registers the global callback and ``stop`` removes it; outside
    a window nothing is registered. ``namer(module, outermost) -> frame id``
    (or ``NO_FRAME``) names module frames (the ``self`` of ``nn.Module`` call frames)."""

    def __init__(self, extension: ModuleType) -> None:
        self.extension = extension
        self.collector: Any = None
        self.gil_free = False
        self.failure: str | None = None  # the error that stopped the last window's callback, if any

    def start(self, collector: Any, backward_frame: int, nested: bool, namer: Any,
              flops: int = NO_METRIC, alloc: int = NO_METRIC, marks: bool = False,
              unscoped_frame: int = NO_FRAME) -> None:
        """Register the callback for one window.

        Args:
            collector: the native collector to record into (kept alive until ``stop``).
            backward_frame: the backward phase's frame: backward functions mirror their
                forward context under the root's child of that frame.
            nested: record every ATen op under its caller (comprehensive mode), else
                only the outermost op of each call from Python.
            namer: ``namer(module, outermost_module) -> frame id`` for module frames.
            flops: metric id for matmul FLOPs from input shapes (``NO_METRIC``: not taken).
            alloc: metric id for bytes of fresh outputs (``NO_METRIC``: not taken).
            marks: open a ``dc#<node>`` record per recorded op, for Kineto correlation.
            unscoped_frame: the phase frame operators of a thread in no scope hang
                under (a thread of the user's own, outside the steps).
        """
        context = torch.nn.Module._wrapped_call_impl.__code__
        gil_free = os.environ.get("DEEPCONTEXT_FRAME_WALK", "") != "gil"
        if self.extension.active() or collector.capturing():
            raise BusyError("operator capture is already on")
        try:
            self.gil_free = collector.capture_start(backward_frame, nested, context, namer, gil_free, unscoped_frame)
        except RuntimeError as exc:
            if "another collector is capturing" in str(exc):  # the collector's own words (capture.cc)
                raise BusyError(str(exc)) from exc
            raise
        self.collector = collector
        try:
            self.extension.start(collector.capture_api(), flops, alloc, marks)
        except BaseException:
            collector.capture_stop()
            self.collector = None
            raise

    def stop(self) -> tuple[int, int]:
        """Remove the callback; returns (ops without their path, naming errors)."""
        self.extension.stop()
        self.failure = self.extension.failure()
        collector, self.collector = self.collector, None
        return collector.capture_stop() if collector is not None else (0, 0)

    @property
    def frame_walk(self) -> str:
        """How Python frames are read: ``native`` (no GIL) or ``gil``."""
        return "native" if self.gil_free else "gil"


def after_fork_in_child() -> None:
    """A forked child (DataLoader worker) starts with the callback removed."""
    module, _ = load() if load.cache_info().currsize else (None, "")
    if module is not None:
        try:
            module.stop()
        except Exception:  # the C fork handler already made it inert
            pass


os.register_at_fork(after_in_child=after_fork_in_child)


if __name__ == "__main__":  # ``python -m dc_torch.native``: warm the cache (make demo / make test)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    module = build(verbose="-v" in sys.argv)
    print(f"native operator capture ready: {module.__file__}")
