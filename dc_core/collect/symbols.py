"""Names for the native frames the collector could not name, from ELF data.

On the sampler thread the collector names native frames as ``dladdr`` would
(from a sorted index of each library's exported symbols, ``native/symindex.h``),
which sees only exported (``.dynsym``) symbols. An address it cannot name is recorded
as an *unresolved* frame: kind ``native``, name ``"<library>+0x<offset>"``,
file = the library's path, line = the offset (> 0) from the library's mapping
start (see ``native/unwind.h``). When a window's snapshot is read, `resolve`
names each such frame once, in this order: from the library's ``.symtab``
(static and hidden functions; a separate debug file's for a stripped library),
as ``"<library>@plt"`` inside a PLT stub, as ``"<library>+0x<function start>"``
where ``.eh_frame`` bounds a function; else it keeps its per-address name.

ELF files are read with pyelftools, lazily (only for libraries that have
unresolved addresses) and once per process per (path, size, mtime). Reading
``libtorch_cpu.so``'s 530,000 symbols through pyelftools' per-symbol parser
takes about 15 s; so pyelftools locates the sections, string tables, notes and
load segments, and the fixed-layout ``Elf_Sym`` records are unpacked in bulk
with `struct` (0.3 s for the same table). Names are read from the file only
for the symbols hit.
"""

from __future__ import annotations

import bisect
import functools
import logging
import mmap
import os
import struct
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from ..model.tree import Frame

logger = logging.getLogger("deepcontext")

_FUNCTION_TYPES = (2, 10)  # STT_FUNC, STT_GNU_IFUNC
_SHN_UNDEF = 0
#: Symbol tables larger than this are not read (about 1.5 s of window close and
#: 24 bytes kept per function symbol); their unresolved frames keep library + offset.
#: libtorch_cpu.so's is 12 MiB.
MAX_SYMTAB_BYTES = 64 << 20
#: ``.eh_frame`` sections larger than this are not parsed for function
#: boundaries (pyelftools parses about 370 KB/s: libc's 150 KB in 0.44 s,
#: libstdc++'s 200 KB in 0.54 s), bounding that read to about 1.4 s.
MAX_EH_FRAME_BYTES = 512 << 10
#: Where separate debug files are looked up by build id (``<root>/.build-id/ab/cdef….debug``).
DEBUG_ROOTS = ("/usr/lib/debug",)
#: How far back from the nearest symbol start a lookup searches for one that
#: contains the address (aliases at one address, a function with a sized label inside).
_BACK = 8
#: Longest symbol name read (C++ template instances run to kilobytes).
_MAX_NAME = 1 << 16


def is_unresolved(frame: Frame) -> bool:
    """A native frame the collector recorded as library + offset."""
    return frame.kind == "native" and frame.line > 0 and bool(frame.file)


@dataclass
class SymbolTable:
    """What names the code of one ELF object: function symbols sorted by start
    address, the PLT's address ranges, and (read on first need) the function
    boundaries ``.eh_frame`` records for code no symbol covers.

    Attributes:
        path: The object's path.
        base: Virtual address of the object's mapping start (the first
            ``PT_LOAD`` segment, page-aligned): an offset from the mapping start
            plus ``base`` is the address symbol values use.
        starts: Symbol start addresses, ascending.
        ends: Symbol end addresses (start + size), per symbol.
        name_at: File offset of each symbol's NUL-terminated name (names are
            read only for the symbols that are hit, never all of them).
        names_path: The file ``name_at`` points into: ``path``, or the
            separate debug file the symbols were read from.
        plt: ``(start, end)`` addresses of the PLT sections.
        eh_frame_size: Size of ``.eh_frame`` (0 if none).
    """

    path: str
    base: int = 0
    starts: array = field(default_factory=lambda: array("Q"))
    ends: array = field(default_factory=lambda: array("Q"))
    name_at: array = field(default_factory=lambda: array("Q"))
    names_path: str = ""
    plt: list[tuple[int, int]] = field(default_factory=list)
    eh_frame_size: int = 0
    _names: dict[int, str | None] = field(default_factory=dict, repr=False)
    _functions: tuple[array, array] | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.starts)

    def names(self, offsets: Iterable[int]) -> dict[int, str | None]:
        """The (mangled) name of the function symbol containing each offset
        (from the mapping start), ``None`` where no symbol does. Memoized: each
        address is looked up once per process."""
        offsets = list(offsets)
        todo = [o for o in set(offsets) if o not in self._names]
        if todo:
            with open(self.names_path or self.path, "rb") as fh:
                for offset in todo:
                    j = _containing(self.starts, self.ends, offset + self.base)
                    self._names[offset] = (
                        None if j is None else _read_name(fh.fileno(), self.name_at[j])
                    )
        return {o: self._names[o] for o in offsets}

    def in_plt(self, offset: int) -> bool:
        """Whether ``offset`` is in a PLT stub (a jump to another library's function)."""
        address = offset + self.base
        return any(start <= address < end for start, end in self.plt)

    def function_start(self, offset: int) -> int | None:
        """Offset of the start of the function containing ``offset``, from the
        ``.eh_frame`` unwind records, or ``None`` (no record, or a ``.eh_frame``
        over `MAX_EH_FRAME_BYTES`)."""
        if self._functions is None:
            self._functions = _read_function_ranges(self)
        starts, ends = self._functions
        j = _containing(starts, ends, offset + self.base)
        return None if j is None else starts[j] - self.base


def _containing(starts: array, ends: array, address: int) -> int | None:
    """Index of a range containing ``address`` among ranges sorted by start."""
    i = bisect.bisect_right(starts, address) - 1
    for j in range(i, max(i - _BACK, -1), -1):
        if starts[j] <= address < ends[j]:
            return j
    return None


def _read_name(fd: int, at: int) -> str | None:
    """The NUL-terminated string at file offset ``at``."""
    chunks: list[bytes] = []
    while sum(map(len, chunks)) < _MAX_NAME:
        chunk = os.pread(fd, 4096, at)
        end = chunk.find(b"\0")
        chunks.append(chunk if end < 0 else chunk[:end])
        if end >= 0 or not chunk:
            break
        at += len(chunk)
    return b"".join(chunks).decode("utf-8", "replace") or None


def _sorted_arrays(*columns: array) -> tuple[array, ...]:
    """The columns reordered by the first one; sorting a permutation keeps
    the peak at a few arrays, not a tuple per row."""
    order = sorted(range(len(columns[0])), key=columns[0].__getitem__)
    return tuple(array("Q", (column[i] for i in order)) for column in columns)


def read_symbols(path: str) -> SymbolTable:
    """Function symbols and PLT ranges of the ELF object at ``path``.

    Symbols come from its ``.symtab``; when it has none (a stripped
    distribution library such as libc), from the ``.symtab`` of its separate
    debug file if one is installed under a `DEBUG_ROOTS` ``.build-id``
    directory (the layout gdb reads, e.g. Debian's ``libc6-dbg``), else from
    its ``.dynsym``.

    Raises:
        OSError: The file cannot be read.
        elftools.common.exceptions.ELFError: It is not a readable ELF object.
    """
    from elftools.elf.elffile import ELFFile

    table = SymbolTable(path, names_path=path)
    columns = (array("Q"), array("Q"), array("Q"))  # starts, ends, name_at
    with open(path, "rb") as fh:
        elf = ELFFile(fh)
        loads = [seg["p_vaddr"] for seg in elf.iter_segments() if seg["p_type"] == "PT_LOAD"]
        table.base = (min(loads) if loads else 0) & ~(mmap.PAGESIZE - 1)
        build_id = ""
        for section in elf.iter_sections():
            if section.name in (".plt", ".plt.sec", ".plt.got"):
                table.plt.append((section["sh_addr"], section["sh_addr"] + section["sh_size"]))
            elif section.name == ".eh_frame":
                table.eh_frame_size = section["sh_size"]
            elif section["sh_type"] == "SHT_NOTE":
                build_id = next(
                    (n["n_desc"] for n in section.iter_notes() if _is_build_id(n)), build_id
                )
        # The static linker writes every symbol of .dynsym to .symtab as well,
        # so .dynsym is read only when there is neither .symtab nor debug file.
        symtab = _symbol_section(elf, ".symtab")
        debug = _debug_file(build_id) if symtab is None else None
        if debug is None:
            _add_functions(
                elf, symtab if symtab is not None else _symbol_section(elf, ".dynsym"), columns
            )
    if debug is not None:
        with open(debug, "rb") as fh:
            elf = ELFFile(fh)
            _add_functions(elf, _symbol_section(elf, ".symtab"), columns)
        table.names_path = debug
    table.starts, table.ends, table.name_at = _sorted_arrays(*columns)
    return table


def _is_build_id(note) -> bool:
    # Other owners reuse the type number (systemtap's "stapsdt" notes are type 3 too).
    return (
        note["n_name"] == "GNU"
        and note["n_type"] == "NT_GNU_BUILD_ID"
        and isinstance(note["n_desc"], str)
    )


def _symbol_section(elf, name: str):
    """The symbol section ``name`` if it has contents within `MAX_SYMTAB_BYTES`."""
    section = elf.get_section_by_name(name)
    if section is None or section["sh_type"] == "SHT_NOBITS" or not section["sh_size"]:
        return None
    if section["sh_size"] > MAX_SYMTAB_BYTES:
        logger.info(
            "DeepContext: %s of %s is %d MiB, over the %d MiB read for names; "
            "its frames keep library + offset names",
            name,
            elf.stream.name,
            section["sh_size"] >> 20,
            MAX_SYMTAB_BYTES >> 20,
        )
        return None
    return section


def _debug_file(build_id: str) -> str | None:
    """The installed separate debug file with a ``.symtab`` for ``build_id``, if any."""
    if len(build_id) < 3:
        return None
    for root in DEBUG_ROOTS:
        candidate = os.path.join(root, ".build-id", build_id[:2], build_id[2:] + ".debug")
        if os.path.isfile(candidate):
            return candidate
    return None


def _add_functions(elf, section, columns: tuple[array, array, array]) -> None:
    if section is None:
        return
    starts, ends, name_at = columns
    strings_at = elf.get_section(section["sh_link"])["sh_offset"]
    for name, value, size in _functions(elf, section):
        starts.append(value)
        ends.append(value + size)
        name_at.append(strings_at + name)


def _read_function_ranges(table: SymbolTable) -> tuple[array, array]:
    """``(starts, ends)`` of the functions ``.eh_frame`` describes, sorted;
    empty past `MAX_EH_FRAME_BYTES` or when it cannot be read."""
    starts, ends = array("Q"), array("Q")
    if not 0 < table.eh_frame_size <= MAX_EH_FRAME_BYTES:
        return starts, ends
    from elftools.dwarf.callframe import FDE
    from elftools.elf.elffile import ELFFile

    try:
        with open(table.path, "rb") as fh:
            for entry in ELFFile(fh).get_dwarf_info(relocate_dwarf_sections=False).EH_CFI_entries():
                if isinstance(entry, FDE) and entry.header["address_range"]:
                    starts.append(entry.header["initial_location"])
                    ends.append(entry.header["initial_location"] + entry.header["address_range"])
    except Exception as exc:  # unparsable unwind data: offsets stay per address
        logger.debug("DeepContext: no function ranges read from %s: %r", table.path, exc)
        return array("Q"), array("Q")
    return _sorted_arrays(starts, ends)


def _functions(elf, section) -> Iterable[tuple[int, int, int]]:
    """``(st_name, st_value, st_size)`` of the defined, sized functions of a symbol section."""
    # pyelftools parses each symbol through `construct`, about 25 µs apiece
    # (15 s for libtorch_cpu.so); the record layout is fixed by the ELF
    # specification, so unpack the section's bytes in bulk when the entry size
    # agrees, and let pyelftools parse them one by one otherwise.
    order = "<" if elf.little_endian else ">"
    if elf.elfclass == 64:
        fmt, fields = order + "IBBHQQ", (0, 1, 3, 4, 5)  # name info other shndx value size
    else:
        fmt, fields = order + "IIIBBH", (0, 3, 5, 1, 2)  # name value size info other shndx
    if (
        section["sh_entsize"] == struct.calcsize(fmt)
        and section["sh_size"] % section["sh_entsize"] == 0
    ):
        n, info, shndx, value, size = fields
        for record in struct.iter_unpack(fmt, section.data()):
            if (
                record[shndx] != _SHN_UNDEF
                and record[size]
                and record[info] & 0xF in _FUNCTION_TYPES
            ):
                yield record[n], record[value], record[size]
        return
    for symbol in section.iter_symbols():
        if (
            symbol["st_shndx"] != "SHN_UNDEF"
            and symbol["st_size"]
            and symbol["st_info"]["type"] in ("STT_FUNC", "STT_GNU_IFUNC")
        ):
            yield symbol["st_name"], symbol["st_value"], symbol["st_size"]


@functools.lru_cache(maxsize=32)
def _cached_table(path: str, size: int, mtime_ns: int) -> SymbolTable | None:
    """One read per object version for the life of the process; ``None`` if unreadable."""
    try:
        return read_symbols(path)
    except Exception as exc:  # a library we cannot read keeps offset names
        logger.debug("DeepContext: no symbols read from %s: %r", path, exc)
        return None


def table_for(path: str) -> SymbolTable | None:
    """The cached symbol table of ``path`` (read on first use), or ``None``."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _cached_table(path, st.st_size, st.st_mtime_ns)


def _demangler() -> Callable[[str], str]:
    try:
        from .._native import demangle
    except ImportError:  # unresolved frames come only from the native collector
        return lambda name: name
    return demangle


def resolve(frames: Sequence[Frame], used: Iterable[int] | None = None) -> list[Frame]:
    """``frames`` with each unresolved native frame named from its library's ELF data.

    An address inside a function symbol becomes ``Frame("native", demangled
    name, library path)``, the identity a ``dladdr``-named frame of that
    function has, so two addresses in one function end up equal (see
    `dc_core.record.snapshot.merge_equal_siblings`). Without a symbol: a PLT stub is
    named ``"<library>@plt"``; code in a function ``.eh_frame`` bounds is named
    by the function's start, ``"<library>+0x<start>"`` (line 0); anything else
    keeps its per-address ``"<library>+0x<offset>"`` frame, still unresolved.

    Args:
        frames: Frames indexed by frame id.
        used: The frame ids to resolve (those the tree's nodes refer to); all if ``None``.
    """
    out = list(frames)
    by_path: dict[str, list[int]] = {}
    for i in range(len(out)) if used is None else set(used):
        if is_unresolved(out[i]):
            by_path.setdefault(out[i].file, []).append(i)
    if not by_path:
        return out
    demangle = _demangler()
    for path, ids in by_path.items():
        library = os.path.basename(path)
        try:
            table = table_for(path)
            if table is None:
                continue
            names = table.names(out[i].line for i in ids)
            for i in ids:
                offset = out[i].line
                if names[offset]:
                    out[i] = replace(out[i], name=demangle(names[offset]), line=0)
                elif table.in_plt(offset):
                    out[i] = replace(out[i], name=f"{library}@plt", line=0)
                elif (start := table.function_start(offset)) is not None:
                    out[i] = replace(out[i], name=f"{library}+{start:#x}", line=0)
        except Exception:  # naming must never cost the window its profile
            logger.debug(
                "DeepContext: frames in %s keep library + offset names", path, exc_info=True
            )
    return out


def folds_into(parent: Frame, child: Frame) -> bool:
    """Whether ``child`` merges into ``parent`` when one calls the other: both
    still unresolved in one library. Such frames are instruction addresses with
    no function bounds, so a run of them says no more than its outermost one
    (where the library was entered), and folding keeps every sampled
    instruction from growing its own path."""
    return is_unresolved(child) and is_unresolved(parent) and child.file == parent.file
