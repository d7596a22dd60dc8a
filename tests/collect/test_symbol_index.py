"""The sampler's symbol index (native/symindex.h) answers what dladdr answers,
address for address, in every object loaded, a library loaded after it first
looked among them."""

from __future__ import annotations

import ctypes
import random
import zlib

import pytest

from tests.collect.test_symbols import DlInfo, build

_native = pytest.importorskip("dc_core._native")


class Phdr(ctypes.Structure):
    _fields_ = [
        ("p_type", ctypes.c_uint32),
        ("p_flags", ctypes.c_uint32),
        ("p_offset", ctypes.c_uint64),
        ("p_vaddr", ctypes.c_uint64),
        ("p_paddr", ctypes.c_uint64),
        ("p_filesz", ctypes.c_uint64),
        ("p_memsz", ctypes.c_uint64),
        ("p_align", ctypes.c_uint64),
    ]


class PhdrInfo(ctypes.Structure):
    _fields_ = [
        ("addr", ctypes.c_uint64),
        ("name", ctypes.c_char_p),
        ("phdr", ctypes.POINTER(Phdr)),
        ("phnum", ctypes.c_uint16),
    ]


LIBC = ctypes.CDLL(None)
LIBC.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
PT_LOAD, PF_X = 1, 1


def dladdr(address: int):
    """dladdr's answer in symbol_at's shape."""
    info = DlInfo()
    if not LIBC.dladdr(address, ctypes.byref(info)):
        return None
    named = info.sname is not None
    return (info.fname.decode(), info.fbase or 0, info.sname, info.saddr if named else None)


def code_segments() -> list[tuple[str, int, int]]:
    """(object name, start, end) of every executable segment loaded: where
    return addresses lie."""
    out = []
    callback_type = ctypes.CFUNCTYPE(
        ctypes.c_int, ctypes.POINTER(PhdrInfo), ctypes.c_size_t, ctypes.c_void_p
    )

    def each(info, _size, _data):
        i = info.contents
        for p in i.phdr[: i.phnum]:
            if p.p_type == PT_LOAD and p.p_flags & PF_X and p.p_memsz:
                start = i.addr + p.p_vaddr
                out.append(((i.name or b"").decode(), start, start + p.p_memsz))
        return 0

    LIBC.dl_iterate_phdr(callback_type(each), None)
    return out


def test_every_loaded_objects_code_is_named_as_dladdr_names_it():
    import torch  # noqa: F401  (the largest symbol tables the sampler meets)

    zlib.compress(b"libz loaded")
    rng = random.Random(7)
    asked, found, checked = set(), 0, 0
    for name, start, end in code_segments():
        for _ in range(3000 if "libtorch_cpu" in name else 200):
            address = rng.randrange(start, end)
            ours = _native.symbol_at(address)
            if ours == "ask":
                asked.add(name)
                continue
            assert ours == dladdr(address), (name, hex(address))
            checked += 1
            found += ours is not None and ours[2] is not None
    # only objects that are no file (the vDSO) are left to dladdr
    assert all(not name.startswith("/") for name in asked), asked
    assert checked > 3000 and found > 300, (checked, found)


def test_a_library_loaded_after_the_first_lookup_is_indexed_too(tmp_path):
    assert _native.symbol_at(ctypes.cast(LIBC.dladdr, ctypes.c_void_p).value) != "ask"
    path, lib, _ = build(tmp_path, "dcindex")  # loaded now
    run = ctypes.cast(lib.run, ctypes.c_void_p).value
    spin = lib.spin_address()
    for address in (run, run + 3, spin + 4):
        assert _native.symbol_at(address) == dladdr(address)
    assert _native.symbol_at(run + 3)[::2] == (path, b"run")
    assert _native.symbol_at(spin + 4)[2] is None  # a static function: no exported name
