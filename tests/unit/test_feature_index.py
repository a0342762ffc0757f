"""docs/architecture.md's feature index stays true: every path it names exists, and every feature
names its API and its docs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"


def index_rows() -> list[list[str]]:
    section = DOC.read_text().split("### Feature index", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines[1:]]  # past the header


def test_every_path_of_the_feature_index_exists():
    rows = index_rows()
    assert len(rows) >= 8, rows
    named = [path for row in rows for path in re.findall(r"`([^`]+)`", "|".join(row))]
    missing = [path for path in named if not (ROOT / path).exists()]
    assert not missing, f"docs/architecture.md's feature index names paths that do not exist: {missing}"


def test_every_feature_names_its_api_and_its_docs():
    for row in index_rows():
        feature, api, *_, read = row
        assert api.startswith(("`api/", "`gepa_steps/api.py")), (feature, api)
        assert "](" in read, (feature, read)
