"""The compiled programs alive in JAX's backends, and their texts kept per window.

A trace's op events name their program by module name and program id (the
``id`` of its ``HloModuleProto``); the program's text (`dc_jax.hlo`) says
which Python code made each instruction. The id is only in the serialized
proto, and serializing a large program takes milliseconds (11 ms for one of
490 KB), so each live program's id is read once (`ProgramIds`), not at
every compile of the window: an eager ``lax.scan`` compiles anew each step
and JAX keeps every one, and reading them all after each compile added 2.8 ms
a step per profiled window before it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dc_jax.hlo import Instruction, parse_module


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def program_id(serialized: bytes) -> int:
    """The ``id`` (field 5) of a serialized ``HloModuleProto``: the program id every
    op event of that module carries in a trace (``program_id``); 0 if absent.

    Only the top-level fields are walked (length-delimited ones are skipped
    whole), so this costs a few steps per computation, not a parse."""
    i, n = 0, len(serialized)
    try:
        while i < n:
            key, i = _varint(serialized, i)
            field, wire = key >> 3, key & 7
            if wire == 0:
                value, i = _varint(serialized, i)
                if field == 5:
                    return value
            elif wire == 2:
                length, i = _varint(serialized, i)
                i += length
            elif wire == 1:
                i += 8
            elif wire == 5:
                i += 4
            else:
                return 0
    except IndexError:  # truncated: no id
        return 0
    return 0


def _module_id(module: Any) -> int:
    try:
        return program_id(module.as_serialized_hlo_module_proto())
    except Exception:  # matched by name only
        return 0


class ProgramIds:
    """Program ids of the live executables' modules, each read once.

    An executable is known by its Python object's id and its fingerprint (a
    hash of the compiled program): an id a freed program's successor reuses
    with the same fingerprint is the same program, whose instructions are
    the same whatever its program id. Entries of executables no longer alive are
    dropped at each scan, so the cache is never larger than the backend's.
    Two threads scanning at once may each read an id the other cached: the
    cost of a lock-free scan, never a wrong id."""

    def __init__(self) -> None:
        self._ids: dict[tuple[Any, ...], int] = {}

    def __len__(self) -> int:
        """How many modules' ids are kept."""
        return len(self._ids)

    def live_modules(
        self, names: Iterable[str], new_only: bool = False
    ) -> dict[tuple[str, int], Any]:
        """The compiled ``HloModule`` objects named ``names`` alive in any backend, by
        (name, program id). Several programs share a name: ``jax.jit(f.apply)`` and
        ``jax.jit(g.apply)`` are both ``jit_apply``, one function compiled for two
        shapes is two programs. ``new_only``: those no scan saw before (right
        after a compile, the program compiled)."""
        import jax

        wanted = set(names)
        found: dict[tuple[str, int], Any] = {}
        alive: set[tuple[Any, ...]] = set()
        clients = {id(d.client): d.client for d in jax.devices()}
        for client in clients.values():
            for executable in client.live_executables():
                try:
                    modules = executable.hlo_modules()
                except Exception:  # an executable without HLO (deserialized, foreign)
                    continue
                identity = _identity(executable)
                if identity is not None:
                    alive.add(identity)
                for index, module in enumerate(modules):
                    if module.name not in wanted:
                        continue
                    key = None if identity is None else (*identity, index)
                    program = self._ids.get(key) if key else None
                    if program is None:
                        program = _module_id(module)
                        if key:  # else nothing to know it by next time
                            self._ids[key] = program
                    elif new_only:
                        continue
                    found.setdefault((module.name, program), module)
        self._ids = {key: v for key, v in self._ids.items() if key[:-1] in alive}
        return found


def _identity(executable: Any) -> tuple[int, bytes] | None:
    """(id, fingerprint) of a loaded executable; None without a fingerprint.
    The backend lists the same Python object for an executable as long as
    it lives (the caches that keep it alive hold that object)."""
    try:
        fingerprint = executable.fingerprint
    except Exception:
        return None
    return (id(executable), bytes(fingerprint)) if fingerprint else None


#: One per process: the ids outlive a window, as the programs do.
PROGRAMS = ProgramIds()


class ModuleIndex:
    """Instructions of the compiled programs a trace mentions, parsed once per text.

    A program compiled and dropped inside a window (a ``jax.jit`` created anew
    each step) is gone from the backend when the window closes: `capture`, run
    right after each compile, keeps its text while it is alive."""

    def __init__(self) -> None:
        self._parsed: dict[int, dict[str, Instruction]] = {}  # hash(text) → instructions
        self._captured: dict[tuple[str, int], str] = {}  # (name, program id) → text, this window's
        self._programs = PROGRAMS

    def capture(self, name: str) -> None:
        """Keep the text of the programs called ``name`` just compiled (alive
        and new to `PROGRAMS`). One compiled before is read at the window's
        end: JAX keeps what it compiled while its function lives; where it
        was dropped inside the window, a program of its name stands in."""
        for key, module in self._programs.live_modules([name], new_only=True).items():
            if key[1] and key not in self._captured:
                self._captured[key] = module.to_string()

    def clear(self) -> None:
        """Forget the captured texts (the window closed)."""
        self._captured.clear()

    def _instructions(self, text: str) -> dict[str, Instruction]:
        key = hash(text)
        parsed = self._parsed.get(key)
        if parsed is None:
            parsed = self._parsed[key] = parse_module(text)
        return parsed

    def resolve(
        self, wanted: dict[tuple[str, int], set[str]]
    ) -> dict[tuple[str, int], dict[str, Instruction]]:
        """For each (module name, program id) of the trace, its instructions: from
        the program of that id, alive or captured; where the trace gives no id
        (0) or the program is gone, from the program of that name whose
        instructions best cover the ones seen (``wanted[key]``)."""
        live = self._programs.live_modules({name for name, _ in wanted})
        texts: dict[tuple[str, int], str] = dict(self._captured)

        def instructions(key: tuple[str, int]) -> dict[str, Instruction]:
            if key not in texts:
                texts[key] = live[key].to_string()
            return self._instructions(texts[key])

        known = {*self._captured, *live}
        out: dict[tuple[str, int], dict[str, Instruction]] = {}
        for key, ops in wanted.items():
            if key[1] and key in known:
                out[key] = instructions(key)
                continue
            best, best_hits = {}, -1
            for candidate in known:
                if candidate[0] != key[0]:
                    continue
                parsed = instructions(candidate)
                hits = len(ops.intersection(parsed))
                if hits > best_hits:
                    best, best_hits = parsed, hits
            out[key] = best
        return out
