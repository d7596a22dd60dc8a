"""Findings for the terminal: severity colour, rule, one-line message, the call
path shortened to the user's frames, and the suggestion."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.text import Text

from ..analyzer.base import saved_bytes, size
from ..model.kinds import PHASES
from .common import Hanging, hanging

SEVERITY_STYLE = {"critical": "bold white on red", "warning": "bold yellow", "info": "cyan"}
_NOT_USER = ("<frozen ", "runpy.py:", "<string>:", "threading.py:")
_KEEP = 3  # user frames kept before the node


def short_path(path: list[str], keep: int = _KEEP) -> str:
    """``forward › … › model.py:14 rmsnorm › aten::pow``: the phase, the last
    ``keep`` user frames above the node, the node; interpreter frames dropped."""
    if not path:
        return ""
    head = [path[0]] if path[0] in PHASES and len(path) > 1 else []
    middle = [
        p
        for p in path[len(head) : -1]
        if not p.startswith(_NOT_USER) and not p.endswith(" <module>")
    ]
    elided = len(middle) > keep
    parts = head + (["…"] if elided else []) + middle[-keep:] + [path[-1]]
    return " › ".join(parts)


def gain_text(finding: dict[str, Any]) -> str:
    """``≈ 4.1 ms per step``, what the fix saves; ``≈ 96.0 MiB at the peak`` for a
    memory finding; ``none estimated`` where there is no estimate."""
    gain = finding.get("gain_ns")
    if gain is None:
        saved = saved_bytes(finding)
        return "none estimated" if saved is None else f"\u2248 {size(saved)} at the peak"
    amount = f"{gain / 1e6:.1f} ms" if gain >= 1e6 else f"{gain / 1e3:.0f} µs"
    return f"\u2248 {amount} per step"


def finding_text(finding: dict[str, Any]) -> Hanging:
    """One finding: the severity, then the rule and message, the call path,
    the estimated saving with its basis and the suggestion, each wrapping
    under its own start (a hanging indent)."""
    severity = finding.get("severity", "info")
    head = Text()
    head.append(str(finding.get("rule", "?")), style="bold")
    head.append(f"  {finding.get('message', '')}")
    parts: list[RenderableType] = [head]
    where = short_path(list(finding.get("path", [])))
    if where:
        parts.append(hanging(Text(" at ", style="dim"), Text(where, style="green")))
    if "gain_basis" in finding:
        basis = finding.get("gain_basis") or ""
        parts.append(
            hanging(
                Text(" saves ", style="dim"),
                Text(gain_text(finding), style="bold")
                + Text(f": {basis}" if basis else "", style="dim"),
            )
        )
    if finding.get("suggestion"):
        parts.append(
            hanging(Text(" \u2192 ", style="dim"), Text(finding["suggestion"], style="italic"))
        )
    return hanging(
        Text(f" {severity.upper():8}", style=SEVERITY_STYLE.get(severity, "")) + " ", Group(*parts)
    )


def render_findings(
    findings: Iterable[dict[str, Any]], console: Console, title: str = "findings"
) -> None:
    """Print findings, most severe first, the biggest saving first within a
    severity (the order they are stored in)."""
    findings = list(findings)
    if not findings:
        return
    console.print(Text(f"{title} ({len(findings)})", style="bold underline"))
    for f in findings:
        console.print(finding_text(f))
