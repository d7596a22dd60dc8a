"""JSON for documents that nest a tree to any depth (the report's ``--json``,
Hatchet's literal format).

`json.dumps` recurses once per level and raises RecursionError past about a
thousand, which a real model's recursion reaches. `dumps` then walks the
containers with an explicit stack instead and hands every bounded piece
(scalars, flat dicts and lists) to `json.dumps`, so its output is the same
text, at any depth.
"""

from __future__ import annotations

import json
from typing import Any

_CONTAINERS = (dict, list, tuple)


class _Raw(str):
    """Text queued between values (punctuation, keys), written as is."""


def _bounded(value: Any) -> bool:
    """A scalar, or a container of scalars: `json.dumps` nests at most one level."""
    if isinstance(value, dict):
        value = value.values()
    elif not isinstance(value, (list, tuple)):
        return True
    for item in value:  # a loop, not any(genexpr): this runs for every value
        if isinstance(item, _CONTAINERS):
            return False
    return True


def dumps(value: Any) -> str:
    """``json.dumps(value)`` (default separators, string keys) at any depth."""
    try:
        return json.dumps(value)  # the C encoder: fast, and enough for all but deep trees
    except RecursionError:
        return dumps_iteratively(value)


def dumps_iteratively(value: Any) -> str:
    """``json.dumps(value)`` with an explicit stack instead of recursion."""
    if _bounded(value):
        return json.dumps(value)
    out: list[str] = []
    stack: list[Any] = [value]  # text to write, or a container holding containers
    while stack:
        item = stack.pop()
        if type(item) is _Raw:
            out.append(item)
        else:
            stack.extend(reversed(_tokens(item)))
    return "".join(out)


def _tokens(item: dict | list | tuple) -> list[Any]:
    """One container as text and, in order, the entries that hold containers
    themselves; consecutive bounded entries are written by one `json.dumps` call."""
    is_dict = isinstance(item, dict)
    entries = list(item.items()) if is_dict else list(item)
    tokens: list[Any] = [_Raw("{" if is_dict else "[")]
    run: list[Any] = []

    def flush() -> None:
        if run:
            text = json.dumps(dict(run) if is_dict else run)[1:-1]
            tokens.append(_Raw(text if len(tokens) == 1 else ", " + text))
            run.clear()

    for entry in entries:
        value = entry[1] if is_dict else entry
        if _bounded(value):
            run.append(entry)
            continue
        flush()
        separator = "" if len(tokens) == 1 else ", "
        tokens.append(_Raw(separator + (json.dumps(str(entry[0])) + ": " if is_dict else "")))
        tokens.append(value)
    flush()
    tokens.append(_Raw("}" if is_dict else "]"))
    return tokens
