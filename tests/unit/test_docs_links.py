"""Every link between the README and the pages of docs/ leads somewhere: the file exists, and the
heading an anchor names is on that page (anchors as the Markdown renderer makes them: lower
case, punctuation dropped, spaces as hyphens)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]*)(#[^)\s]*)?\)")


def anchor(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found, in_code = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            found.add(anchor(line.lstrip("#")))
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_of_a_page_resolves(page):
    broken = []
    for number, line in enumerate(page.read_text().splitlines(), 1):
        for target, fragment in LINK.findall(line):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            linked = (page.parent / target).resolve() if target else page
            if not linked.exists():
                broken.append(f"line {number}: {target} does not exist")
            elif fragment and linked.suffix == ".md" and fragment[1:] not in anchors(linked):
                broken.append(f"line {number}: {target}{fragment} names no heading of {linked.name}")
    assert not broken, "\n".join(broken)
