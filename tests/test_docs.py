"""README.md and docs/*.md: every relative link resolves, every anchor exists,
and the README stays short enough for a new user to read through."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[(?:[^\]]|\][^(])*?\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {slug(m[1]) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def links(page: Path) -> list[str]:
    return [m[1] for m in LINK.finditer(FENCE.sub("", page.read_text()))]


def test_slug_matches_github():
    assert slug("Diff: `deepcontext diff A B`") == "diff-deepcontext-diff-a-b"
    assert slug("The analyzer's estimates, checked") == "the-analyzers-estimates-checked"
    assert slug("`deepcontext report --json`") == "deepcontext-report---json"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page: Path):
    broken = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(
                f"{target}: no file {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file}"
            )
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(ROOT / "README.md")}
    assert [p.name for p in PAGES[1:] if p.resolve() not in linked] == []


def test_docs_pages_link_back_to_the_readme():
    assert [p.name for p in PAGES[1:] if "../README.md" not in links(p)] == []


def test_readme_stays_short_and_leads_with_what_a_new_user_needs():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 320
    top = "\n".join(lines[:150])
    for needed in (
        "make demo",
        "make test",
        'pip install ".[torch',
        "deepcontext run",
        "dc_lightning",
        "dc_hf",
        "dc_torch.profile",
        "dc_jax.profile",
        "docs/tensorboard-tab.png",
        "docs/troubleshooting.md",
        "docs/benchmarks.md",
    ):
        assert needed in top, needed
