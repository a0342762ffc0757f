"""The import rules of the rooms ([tool.importlinter] in pyproject.toml) hold: the sandbox never
imports the engine, the engine knows no HTTP, the API and the workflows stay on their side, the
shared kernel imports no room, the gatekeeper only the kernel and the standard library, nothing
imports the tests, no route module imports another, the API's shared modules import none of its
resource packages, the world's rules stay pure beside their records, and no test module imports
another."""

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


def test_the_gatekeeper_imports_only_the_kernel_and_the_standard_library():
    """Import-linter forbids the other rooms; third-party packages, which it cannot tell from the
    standard library, are checked here."""
    import grimp  # import-linter's graph builder

    graph = grimp.build_graph("gatekeeper", "genesis", include_external_packages=True)
    imported = {
        (module, imported.split(".")[0])
        for module in graph.find_children("gatekeeper") | {"gatekeeper"}
        for imported in graph.find_modules_directly_imported_by(module)
    }
    foreign = sorted(
        (module, top)
        for module, top in imported
        if top not in ("gatekeeper", "genesis") and top not in sys.stdlib_module_names
    )
    assert not foreign, f"the gatekeeper imports third-party packages: {foreign}"
    assert ("gatekeeper.steps", "ast") in imported  # the graph holds the standard library


def _contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_the_route_independence_contract_names_every_route_module():
    """A route module added later is covered by the independence contract only if it is listed."""
    [routes] = [c for c in _contracts() if c["type"] == "independence" and "api.mutations.routes" in c["modules"]]
    assert sorted(routes["modules"]) == sorted(
        f"api.{path.parent.name}.{path.stem}" for path in (ROOT / "api").glob("*/routes*.py")
    )


def test_the_api_layer_contract_names_every_shared_module_and_every_resource_package():
    """A shared module or a resource package of api/ added later is covered only if it is listed."""
    [layer] = [c for c in _contracts() if c["type"] == "forbidden" and "api.deps" in c.get("source_modules", ())]
    api = ROOT / "api"
    shared = {f"api.{path.stem}" for path in api.glob("*.py")} - {"api.__init__", "api.__main__", "api.app"}
    resources = {f"api.{path.parent.name}" for path in api.glob("*/__init__.py")}
    assert sorted(layer["source_modules"]) == sorted(shared)
    assert sorted(layer["forbidden_modules"]) == sorted(resources)


def test_the_pure_rules_contract_names_every_module_of_governance_but_its_records():
    """A module of governance/ added later is held to the pure rules only if it is listed; the records
    (governance/records/) reach Postgres and sit under the shared records' contract instead."""
    [pure] = [c for c in _contracts() if "governance.patches" in c.get("source_modules", ())]
    modules = {f"governance.{path.stem}" for path in (ROOT / "governance").glob("*.py")} - {"governance.__init__"}
    packages = {path.parent.name for path in (ROOT / "governance").glob("*/__init__.py")}
    assert sorted(pure["source_modules"]) == sorted(modules)
    assert packages == {"records"}
    assert "governance.records" in pure["forbidden_modules"]


def test_no_test_module_imports_another():
    """Helpers and fixtures that tests share live in the support modules of tests/ (and the stack
    layer's conftest), never in a test module that others would import."""
    import ast

    crossings = []
    for path in sorted((ROOT / "tests").glob("*/test_*.py")):
        own = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module]
            crossings += [f"{own} imports {m}" for m in modules if m.split(".")[-1].startswith("test_") and m != own]
    assert crossings == []
