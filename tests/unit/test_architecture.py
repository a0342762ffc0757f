"""The import rules of the rooms ([tool.importlinter] in pyproject.toml) hold: the sandbox never
imports the engine, the engine knows no HTTP, the API and the workflows stay on their side, the
shared kernel imports no room, nothing imports the tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_import_contract_is_kept():
    linter = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(linter), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "broken" in result.stdout and ", 0 broken" in result.stdout
