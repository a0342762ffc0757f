"""The import rules of the rooms ([tool.importlinter] in pyproject.toml) hold: the sandbox never
imports the engine, the engine knows no HTTP, the API and the workflows stay on their side, the
shared kernel imports no room, nothing imports the tests, no route module imports another."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_import_contract_is_kept():
    linter = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(linter), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "broken" in result.stdout and ", 0 broken" in result.stdout


def test_the_route_independence_contract_names_every_route_module():
    """A route module added later is covered by the independence contract only if it is listed."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    [routes] = [c for c in contracts
                if c["type"] == "independence" and any(m.startswith("api.routes_") for m in c["modules"])]
    assert sorted(routes["modules"]) == sorted(f"api.{path.stem}" for path in (ROOT / "api").glob("routes_*.py"))
