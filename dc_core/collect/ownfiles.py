"""Which Python files are not the user's code, so captures leave them out.

Two kinds: the profiler's own files, and a framework's machinery (the op
library, the trainer and its loops), whose frames would stand between the
user's line and the operator it ran. Each capture point names its frameworks
(`skip_framework_files`); the packages behind each name are listed here once.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

# Interpreter machinery that runs user code but is not user code (runpy, importlib).
_ALWAYS_SKIPPED = ("<frozen ",)

#: A framework's own packages: their frames are machinery, not the user's code.
FRAMEWORK_PACKAGES: dict[str, tuple[str, ...]] = {
    # typing_extensions: the wrapper of torch.distributed's deprecated spellings
    "torch": ("torch", "typing_extensions"),
    # the runtime over torch: its engine and ZeRO hooks are machinery as torch's are
    "deepspeed": ("deepspeed",),
    "jax": ("jax", "jaxlib"),
    "lightning": ("lightning", "pytorch_lightning", "lightning_fabric", "lightning_utilities"),
    "transformers": ("transformers", "accelerate"),
}
#: Sub-packages of a framework package that ship model code, which is the
#: user's as far as a profile is concerned (``lightning.pytorch.demos.Transformer``).
MODEL_SUBPACKAGES = ("demos",)


def profiler_files() -> tuple[str, ...]:
    """Every module file of DeepContext's packages except demo workloads,
    which are user code as far as the profile is concerned."""
    # Our console script; Python records the main script's path made absolute.
    launcher = Path(os.path.abspath(sys.argv[0])) if sys.argv and sys.argv[0] else None
    if launcher is not None and launcher.name == "deepcontext":
        return (*_package_files(), str(launcher))
    return _package_files()


def cut_own_frames(exc: BaseException) -> None:
    """Take the profiler's own frames out of ``exc``'s traceback: a user's
    exception that passed through a wrapper of ours reaches the user with the
    traceback it would have had without the profiler. Call it where the
    exception is caught, then re-raise with a bare ``raise`` (which adds no
    entry of its own). Never raises."""
    try:
        own = _own_files()
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename in own:
            tb = tb.tb_next
        head = tb
        while tb is not None:
            after = tb.tb_next
            while after is not None and after.tb_frame.f_code.co_filename in own:
                after = after.tb_next
            tb.tb_next = after
            tb = after
        exc.__traceback__ = head
    except Exception:  # the traceback as it was: still the user's exception
        pass


@functools.cache
def _own_files() -> frozenset[str]:
    return frozenset(_package_files())


@functools.cache  # walking the packages costs milliseconds, at a window's first step
def _package_files() -> tuple[str, ...]:
    """The module files of dc_core and of every installed adapter package
    (found by entry point: ``dc_core.record.adapter.adapter_packages``)."""
    from ..record.adapter import adapter_packages

    core = Path(__file__).resolve().parents[1]
    directories = [core, *(d for p in adapter_packages() for d in _package_directories(p.package))]
    files = []
    for directory in dict.fromkeys(directories):
        for path in sorted(directory.rglob("*.py")):
            if "demo" not in path.relative_to(directory).parts[0]:
                files.append(str(path))
    return tuple(files)


def _package_directories(package: str) -> list[Path]:
    try:
        spec = importlib.util.find_spec(package)  # a top-level package: found, not imported
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(os.fspath(d)).resolve() for d in spec.submodule_search_locations]


def skip_profiler_files(collector: Any, extra: tuple[str, ...] = ()) -> None:
    """Register the profiler's own files (and ``extra`` prefixes) as skipped."""
    for prefix in (*profiler_files(), *_ALWAYS_SKIPPED, *extra):
        collector.skip_prefix(prefix)


def framework_prefixes(framework: str) -> list[str]:
    """Path prefixes of ``framework``'s own code (a key of `FRAMEWORK_PACKAGES`),
    for those of its packages installed here; none is imported.

    Raises:
        KeyError: an unknown framework name.
    """
    return [
        prefix for package in FRAMEWORK_PACKAGES[framework] for prefix in _package_prefixes(package)
    ]


def skip_framework_files(collector: Any, *frameworks: str) -> None:
    """Register the machinery of each of ``frameworks`` as skipped (idempotent)."""
    for framework in frameworks:
        for prefix in framework_prefixes(framework):
            collector.skip_prefix(prefix)


@functools.cache  # packages do not move while the process runs; windows open often
def _package_prefixes(package: str) -> tuple[str, ...]:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):  # a broken install, or a module without a spec
        return ()
    if spec is None:
        return ()
    if not spec.submodule_search_locations:  # a module of one file (typing_extensions.py)
        return (spec.origin,) if spec.origin and os.path.isfile(spec.origin) else ()
    # os.fspath: a lazy module's spec may list its directory as a Path
    return tuple(
        prefix
        for directory in spec.submodule_search_locations
        for prefix in _machinery(os.fspath(directory))
    )


def _machinery(directory: str) -> list[str]:
    """Prefixes covering a package directory but its model sub-packages: the
    whole directory where none lies in it or one level down, else its modules
    and sub-packages one by one (``lightning/pytorch/*`` but ``demos``)."""
    if not _holds_models(directory):
        return [directory + os.sep]
    prefixes = []
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if entry.is_dir() and entry.name not in (*MODEL_SUBPACKAGES, "__pycache__"):
            prefixes += _machinery(entry.path)
        elif entry.name.endswith(".py"):
            prefixes.append(entry.path)
    return prefixes


def _holds_models(directory: str) -> bool:
    try:
        subdirs = [e.path for e in os.scandir(directory) if e.is_dir()]
    except OSError:
        return False
    return any(
        os.path.basename(d) in MODEL_SUBPACKAGES
        or any(os.path.isdir(os.path.join(d, m)) for m in MODEL_SUBPACKAGES)
        for d in subdirs
    )
