"""Native frames that ``dladdr`` cannot name, named from ELF data at snapshot time
(`dc_core.collect.symbols`), on a tiny C++ library built here and on a torch workload."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import time

import pytest

from dc_core.collect import collector as collector_mod
from dc_core.collect import symbols
from dc_core.model.tree import ROOT, Frame
from dc_core.record.snapshot import (
    frames_from_snapshot,
    merge_equal_siblings,
    profile_from_snapshot,
)

pytest.importorskip("elftools")

SOURCE = """
#include <cstdint>
namespace demo {
// static: only .symtab names it, dladdr (exported symbols only) cannot.
static __attribute__((noinline)) uint64_t spin(uint64_t n) {
  volatile uint64_t acc = 0;
  for (uint64_t i = 0; i < n; ++i) acc = acc * 31 + i;
  return acc;
}
}  // namespace demo
extern "C" uint64_t run(uint64_t n) { return demo::spin(n); }
extern "C" void* spin_address() { return reinterpret_cast<void*>(&demo::spin); }
"""
SPIN = "demo::spin(unsigned long)"
SPIN_MANGLED = "_ZN4demoL4spinEm"


class DlInfo(ctypes.Structure):
    _fields_ = [
        ("fname", ctypes.c_char_p),
        ("fbase", ctypes.c_void_p),
        ("sname", ctypes.c_char_p),
        ("saddr", ctypes.c_void_p),
    ]


def dladdr(address: int) -> DlInfo:
    info = DlInfo()
    libc = ctypes.CDLL(None)
    libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
    assert libc.dladdr(address, ctypes.byref(info))
    return info


def build(tmp_path, name: str, *flags: str, strip: bool = False):
    """Compile SOURCE into ``lib<name>.so``; returns (path, loaded library, offset
    of demo::spin from the library's mapping start)."""
    if shutil.which("g++") is None:
        pytest.skip("no C++ compiler")
    src = tmp_path / "demo.cc"
    src.write_text(SOURCE)
    path = str(tmp_path / f"lib{name}.so")
    subprocess.run(["g++", "-shared", "-fPIC", "-O0", *flags, "-o", path, str(src)], check=True)
    if strip:  # drops .symtab; .dynsym (run, spin_address) stays
        subprocess.run(["strip", "--strip-all", path], check=True)
    lib = ctypes.CDLL(path)
    lib.spin_address.restype = ctypes.c_void_p
    lib.run.argtypes, lib.run.restype = [ctypes.c_uint64], ctypes.c_uint64
    spin = lib.spin_address()
    info = dladdr(spin + 4)
    assert info.sname is None  # the premise: dladdr leaves it unnamed
    return path, lib, spin - info.fbase


def unresolved(path: str, offset: int) -> Frame:
    """The frame the collector records for an address dladdr cannot name."""
    return Frame("native", f"{os.path.basename(path)}+{offset:#x}", path, offset)


def spin_name() -> str:
    return SPIN if collector_mod.native_available() else SPIN_MANGLED


def test_static_function_named_from_symtab(tmp_path):
    path, _, spin = build(tmp_path, "dcsym")
    frame = unresolved(path, spin + 7)
    out = symbols.resolve([ROOT, frame, Frame("native", "run", path)])
    assert out[1] == Frame("native", spin_name(), path, 0)
    assert out[2] == Frame("native", "run", path)  # already named: untouched


def test_no_symbol_named_by_function_start_from_eh_frame(tmp_path):
    path, _, spin = build(tmp_path, "dcstripped", strip=True)
    assert symbols.read_symbols(path).names([spin + 7]) == {spin + 7: None}
    out = symbols.resolve([ROOT, unresolved(path, spin + 7), unresolved(path, spin + 11)])
    # One function, one identity: both addresses are named by spin's start.
    assert out[1] == out[2] == Frame("native", f"libdcstripped.so+{spin:#x}", path, 0)


def test_stripped_library_named_from_its_separate_debug_file(tmp_path, monkeypatch):
    from elftools.elf.elffile import ELFFile

    if shutil.which("objcopy") is None:
        pytest.skip("no objcopy")
    src = tmp_path / "demo.cc"
    src.write_text(SOURCE)
    full = str(tmp_path / "full.so")
    subprocess.run(["g++", "-shared", "-fPIC", "-O0", "-o", full, str(src)], check=True)
    with open(full, "rb") as fh:
        note = ELFFile(fh).get_section_by_name(".note.gnu.build-id")
        if note is None:
            pytest.skip("the linker adds no build id")
        build_id = next(note.iter_notes())["n_desc"]
    debug = tmp_path / "debug" / ".build-id" / build_id[:2] / f"{build_id[2:]}.debug"
    debug.parent.mkdir(parents=True)
    subprocess.run(["objcopy", "--only-keep-debug", full, str(debug)], check=True)
    path = str(tmp_path / "libdcdebug.so")
    subprocess.run(["objcopy", "--strip-all", full, path], check=True)  # as distributions ship it
    monkeypatch.setattr(
        symbols, "DEBUG_ROOTS", (str(tmp_path / "nowhere"), str(tmp_path / "debug"))
    )
    unstripped = symbols.read_symbols(full)  # same layout in all three files
    table = symbols.read_symbols(path)
    assert table.names_path == str(debug) and table.starts == unstripped.starts
    names = table.names(start - table.base for start in table.starts)
    offset = next(o for o, name in names.items() if name == SPIN_MANGLED)
    assert symbols.resolve([ROOT, unresolved(path, offset + 5)])[1] == Frame(
        "native", spin_name(), path
    )


def test_no_symbol_and_no_unwind_record_keeps_library_and_offset(tmp_path):
    no_unwind = ("-fno-exceptions", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables")
    path, _, spin = build(tmp_path, "dcbare", *no_unwind, strip=True)
    frame = unresolved(path, spin + 7)
    assert symbols.resolve([ROOT, frame])[1] == frame
    assert frame.name == f"libdcbare.so+{spin + 7:#x}" and frame.line == spin + 7


def test_symbol_table_read_once_per_library_version_and_only_when_needed(tmp_path, monkeypatch):
    path, _, spin = build(tmp_path, "dccache")
    first = symbols.table_for(path)
    assert first is symbols.table_for(path) and len(first) >= 3  # spin, run, spin_address at least
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert symbols.table_for(path) is not first  # a rebuilt library is read again

    def refuse(_path):
        raise AssertionError("no library needs reading here")

    monkeypatch.setattr(symbols, "table_for", refuse)
    frames = [ROOT, Frame("native", "run", path), unresolved(path, spin)]
    assert symbols.resolve(frames, used=[0, 1]) == frames  # frame 2 is in no node


def test_equal_frames_after_resolution_merge_and_unresolved_runs_fold():
    lib, other = "/x/libz.so", "/x/liby.so"
    a, b = Frame("native", "f", lib), Frame("native", "f", lib)  # two addresses of f, resolved
    u1, u2, u3 = (Frame("native", f"libz.so+{o:#x}", lib, o) for o in (0x10, 0x20, 0x30))
    v = Frame("native", "liby.so+0x40", other, 0x40)
    op = Frame("operator", "aten::mm")
    frames = [ROOT, op, a, b, u1, u2, u3, v]
    # root -> mm -> {a, b}; mm -> u1 -> u2 -> u3 -> v
    parent = [-1, 0, 1, 1, 1, 4, 5, 6]
    frame = [0, 1, 2, 3, 4, 5, 6, 7]
    samples = [0, 1, 2, 3, 4, 5, 6, 7]
    out_frames, out_parent, out_frame, metrics = merge_equal_siblings(
        frames, parent, frame, {"samples": samples}, symbols.folds_into
    )
    paths = {}
    for node in range(1, len(out_parent)):
        paths[node] = paths.get(out_parent[node], ()) + (out_frames[out_frame[node]].name,)
    by_path = {paths[n]: metrics["samples"][n] for n in paths}
    assert by_path == {
        ("aten::mm",): 1,
        ("aten::mm", "f"): 2 + 3,  # a and b: one node
        ("aten::mm", "libz.so+0x10"): 4 + 5 + 6,  # the run in libz folds into its outermost
        ("aten::mm", "libz.so+0x10", "liby.so+0x40"): 7,  # another library starts a node
    }


def _sampled(_native, hz: float, seconds: float, work) -> dict:
    """Snapshot of a comprehensive-mode sampler at ``hz`` over ``seconds`` of
    ``work`` repeated inside a scope (the sampler bills only threads in one)."""
    c = _native.Collector()
    c.enter([c.intern(collector_mod.KIND_PHASE, "forward")], 0, False, 0)
    c.start_sampler(hz, native=True)
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            work()
    finally:
        c.stop_sampler()
        c.exit()
    return c.snapshot()


def test_native_sampler_names_a_static_function_at_snapshot(tmp_path):
    _native = pytest.importorskip("dc_core._native")
    path, lib, spin = build(tmp_path, "dcsampled")
    # ctypes drops the GIL: the sampler interrupts spin
    snap = _sampled(_native, 500, 0.4, lambda: lib.run(200_000))
    raw = {f for f in frames_from_snapshot(snap) if f.file == path}
    # At capture: one frame per address inside spin, named by library + offset.
    in_spin = [f for f in raw if symbols.is_unresolved(f)]
    assert in_spin and all(
        f.name == f"libdcsampled.so+{f.line:#x}" and f.line >= spin for f in in_spin
    )
    tree = profile_from_snapshot(snap, {}, window_t0=0, steps=(0, 1)).tree
    named = [
        n for n in range(len(tree)) if tree.node_frame(n) == Frame("native", spin_name(), path)
    ]
    assert named and all(tree.node_frame(tree.parent[n]).name == "run" for n in named)
    assert sum(tree.excl["samples"][n] for n in named) >= 20  # ~200 ticks, most inside spin
    assert not any(symbols.is_unresolved(f) for f in tree.frames if f.file == path)


def test_issue_10_torch_native_frames_mostly_named(tmp_path):
    torch = pytest.importorskip("torch")
    _native = pytest.importorskip("dc_core._native")
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    x = torch.randn(8, 16, 64)
    model(x).sum().backward()
    snap = _sampled(_native, 400, 1.0, lambda: model(x).sum().backward())
    frames = frames_from_snapshot(snap)
    used = [frames[f] for f in set(snap["frame"]) if frames[f].kind == "native"]
    before = sum(symbols.is_unresolved(f) for f in used)  # what dladdr alone left as "??"
    tree = profile_from_snapshot(snap, {}, window_t0=0, steps=(0, 1)).tree
    after_frames = {
        tree.node_frame(n) for n in range(len(tree)) if tree.node_frame(n).kind == "native"
    }
    unnamed = [f for f in after_frames if f.line or "+0x" in f.name or f.name.endswith("@plt")]
    named_torch = [f for f in after_frames if "libtorch" in f.file and f not in unnamed]
    assert before >= 20, before
    assert len(unnamed) * 4 <= before, (before, sorted(f.name for f in unnamed))
    assert not any(f.name == "??" for f in after_frames)
    assert any(f.name.startswith(("at::", "c10::", "torch::")) for f in named_torch)
