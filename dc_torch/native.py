"""The native capture path: building, loading and driving the RecordFunction extension.

The extension (``dc_torch/csrc/capture.cc``) must be compiled against the torch
that imports it: same version, same C++ ABI. pip's build isolation would
compile against a torch of its own choosing, so it is not built at install
time but by torch's own ``cpp_extension`` machinery (ninja and a C++17
compiler), into a cache with one entry per environment: keyed by the torch
installation (its path, version, build and C++ ABI), the compiler, the
interpreter and the source, so that two environments never rebuild each
other's. ``make demo`` and ``make test`` build it (``python -m dc_torch.native``).

A built entry is imported directly (no ninja, no setuptools). Where none is
built yet, ``load()`` never builds in the caller's step: it starts the build
in a process of its own, says so once, and answers ``None`` until the build is
done; those windows take the Python path, and the first window after it the
native one. Where it cannot be built or loaded (no compiler, a torch without
headers, the pure-Python collector), ``load()`` says why once and the adapter
falls back to the Python capture path (``TorchFunctionMode`` and module
hooks); the profile's environment says which path ran (``capture``).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import platform
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

logger = logging.getLogger("deepcontext")

_SOURCE = Path(__file__).parent / "csrc" / "capture.cc"
#: Beside it, included by it.
_HEADERS = tuple(
    Path(__file__).parent / "csrc" / name
    for name in ("names.h", "completion.h", "failopen.h", "memory_report.h")
)
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
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "deepcontext",
    )
    return Path(root) / "torch-capture"


def build_key() -> str:
    """What the binary depends on: this torch installation (path, version,
    build, C++ ABI), the compiler, the interpreter, the machine and the sources."""
    digest = hashlib.sha256()
    parts = (
        os.path.dirname(os.path.realpath(torch.__file__)),
        torch.__version__,
        str(getattr(torch.version, "git_version", "")),
        str(torch._C._GLIBCXX_USE_CXX11_ABI),
        _compiler(),
        os.path.realpath(sys.prefix),
        sys.implementation.cache_tag,
        platform.machine(),
    )
    for part in parts:
        digest.update(part.encode() + b"\0")
    digest.update(b"-O2 -DNDEBUG")  # the flags below
    for path in (_SOURCE, *_HEADERS, _INCLUDE / "capture_api.h"):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@functools.cache
def _compiler() -> str:
    """The C++ compiler ``cpp_extension`` would run, as its first line of ``--version`` says."""
    import shutil
    import subprocess

    command = os.environ.get("CXX", "c++")
    if shutil.which(command) is None:
        return command
    try:
        done = subprocess.run([command, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return command
    return f"{command} {done.stdout.partition(chr(10))[0]}"


@functools.cache
def _entry() -> tuple[str, Path]:
    """This environment's cache entry, the module name and its directory
    (once per process: it hashes the sources)."""
    name = f"dc_torch_capture_{build_key()}"
    return name, cache_dir() / name


#: Written beside a finished build: an entry without it is still being built (or failed).
_BUILT = "built"


def build(verbose: bool = False) -> ModuleType:
    """Compile (or reuse from the cache) and import the extension; raises on failure."""
    from torch.utils import cpp_extension

    name, directory = _entry()
    # The sources are copied in first: ninja keys its state on the source paths,
    # so two checkouts sharing this cache entry would otherwise rebuild it in turn.
    source = directory / "src" / _SOURCE.name
    include = directory / "src" / "include"
    include.mkdir(parents=True, exist_ok=True)
    copies = [
        (_SOURCE, source),
        *((h, source.parent / h.name) for h in _HEADERS),
        (_INCLUDE / "capture_api.h", include / "capture_api.h"),
    ]
    for src, dst in copies:
        if not dst.exists() or dst.read_bytes() != src.read_bytes():
            dst.write_bytes(src.read_bytes())
    # ninja may be installed into this environment's bin/ without it being on PATH.
    bin_dir = os.path.dirname(sys.executable)
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    module = cpp_extension.load(
        name=name,
        sources=[str(source)],
        extra_include_paths=[str(include)],
        extra_cflags=["-O2", "-DNDEBUG", "-fno-omit-frame-pointer"],
        build_directory=str(directory),
        verbose=verbose,
        is_python_module=True,
    )
    (directory / _BUILT).write_text(module.__file__ or "")
    return module


def _import_built() -> ModuleType | None:
    """This environment's finished build, imported as it is; None when there is none."""
    import importlib.machinery
    import importlib.util

    name, directory = _entry()
    if not (directory / _BUILT).is_file():
        return None
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = directory / f"{name}{suffix}"
        if path.is_file():
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:
                return None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules[name] = module
            return module
    return None


class _Background:
    """The one build this process started in a process of its own, if any."""

    def __init__(self) -> None:
        self.process: Any = None
        self.log: Path | None = None

    def start(self) -> str:
        """Start the build unless it runs; returns why there is no extension meanwhile."""
        import subprocess

        if self.process is None:
            _, directory = _entry()
            directory.mkdir(parents=True, exist_ok=True)
            self.log = directory / f"build-{os.getpid()}.log"
            # importable however this process found it
            package_root = str(Path(__file__).resolve().parent.parent)
            env = {
                **os.environ,
                "PYTHONPATH": os.pathsep.join(
                    filter(None, [package_root, os.environ.get("PYTHONPATH")])
                ),
            }
            with open(self.log, "wb") as log:
                self.process = subprocess.Popen(
                    [sys.executable, "-m", __name__],
                    stdout=log,
                    stderr=log,
                    stdin=subprocess.DEVNULL,
                    env=env,
                    start_new_session=True,
                )
            logger.warning(
                "DeepContext is building its native operator capture for this environment in the "
                "background (once, about 20 s; `python -m dc_torch.native` builds it ahead): until "
                "it is ready, windows use the Python capture path"
            )
        return "the native capture is being built (first use in this environment)"

    def running(self) -> bool:
        """Whether no build was started yet, or the one started still runs."""
        return self.process is None or self.process.poll() is None

    def failure(self) -> str:
        """Why the build ended without a module to import."""
        tail = self.log.read_text(errors="replace").strip().splitlines()[-1:] if self.log else []
        return f"the native capture's build failed ({tail[0] if tail else f'status {self.process.returncode}'})"


_background = _Background()
_loaded: tuple[ModuleType | None, str] | None = None  # a final answer: the extension, or why not
_loading = threading.Lock()  # windows of two threads' sessions ask at once


def load() -> tuple[ModuleType | None, str]:
    """The extension, or ``None`` and why not. A finished build is imported
    (once per process); a missing one is built in the background, and
    ``None`` is the answer until it is done. Never compiles in the caller."""
    with _loading:
        return _load()


def _load() -> tuple[ModuleType | None, str]:
    global _loaded
    if _loaded is not None:
        return _loaded
    if os.environ.get("DEEPCONTEXT_NO_NATIVE_CAPTURE"):
        _loaded = None, "DEEPCONTEXT_NO_NATIVE_CAPTURE is set"
        return _loaded
    try:
        module = _import_built()
        if module is None and _background.running():
            return None, _background.start()
        if module is None:
            module = _import_built()  # the build may have ended since the first look
        failure = None if module is not None else _background.failure()
    except Exception as exc:  # a build that does not import, or cannot be started: the Python path
        module, failure = None, _reason(exc)
    if module is None:
        logger.warning(
            "native operator capture unavailable (%s); using the Python capture path", failure
        )
    _loaded = module, failure or ""
    return _loaded


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[-1] if text else ''}"


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

    def start(
        self,
        collector: Any,
        backward_frame: int,
        nested: bool,
        namer: Any,
        flops: int = NO_METRIC,
        alloc: int = NO_METRIC,
        marks: bool = False,
        unscoped_frame: int = NO_FRAME,
    ) -> None:
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
            self.gil_free = collector.capture_start(
                backward_frame, nested, context, namer, gil_free, unscoped_frame
            )
        except RuntimeError as exc:
            # the collector's own words (capture.cc)
            if "another collector is capturing" in str(exc):
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
    module = _loaded[0] if _loaded is not None else None
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
