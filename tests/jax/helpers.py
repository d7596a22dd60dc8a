"""Tree queries shared by the JAX tests."""

from __future__ import annotations


def nodes(tree, kind, name=None, backward=None):
    """Nodes of ``kind`` (and ``name``, and backward flag, where given), in node order."""
    return [
        n for n in range(len(tree))
        if tree.node_frame(n).kind == kind
        and (name is None or tree.node_frame(n).name == name)
        and (backward is None or tree.node_frame(n).backward == backward)
    ]
