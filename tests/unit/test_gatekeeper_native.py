"""The compiled gatekeeper (genesis._gatekeeper_core_native): what genesis.gatekeeper serves, the
same verdicts and hashes as the pure-Python module, and no crash on pathological nesting.

Compiled code recurses on the C stack, where Python's RecursionError does not protect it, so the
deep inputs run against both builds, in a thread with a small stack, in a child process whose
exit status tells a clean rejection from a crash. Pure: no services."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from genesis import gatekeeper, gatekeeper_core, native
from tests import traits

ROOT = Path(__file__).resolve().parents[2]
STUB = "class BaseTrait:\n    pass\n\n\nclass DeepTrait(BaseTrait):\n    async def execute(self, entity) -> None:\n"
LIMIT = gatekeeper.MAX_NESTING


def in_execute(line: str) -> str:
    return STUB + "        " + line + "\n"


# Each stays within the 32 KB code limit and nests deeper than MAX_NESTING (brackets: deeper
# than the parser's limit of 200).
DEEP = {
    "sum_of_16000_terms": in_execute("x = " + "+".join(["a"] * 15_000)),
    "module_level_sum": "x = " + "+".join(["1"] * 16_000) + "\n" + STUB + "        pass\n",
    "attribute_chain": in_execute("x = entity" + ".b" * 5_000),
    "call_chain": in_execute("x = f" + "()" * 5_000),
    "subscript_chain": in_execute("x = a" + "[0]" * 5_000),
    "conditional_chain": in_execute("x = a" + " if a else a" * 2_500),
    "elif_chain": in_execute("if a:\n            pass\n" + "        elif a:\n            pass\n" * 900),
    "lambda_chain": in_execute("x = " + "lambda: " * 1_000 + "1"),
    "not_chain": in_execute("x = " + "not " * 5_000 + "a"),
    "negation_chain": in_execute("x = " + "-" * 5_000 + "a"),
    "nested_default": STUB.replace(
        "execute(self, entity)", "execute(self, entity, *, d=" + "(" * 250 + "1," + ")" * 250 + ")"
    ) + "        pass\n",
    "nested_lists": in_execute("x = " + "[" * 250 + "]" * 250),
    "nested_calls": in_execute("x = " + "f(" * 250 + ")" * 250),
    "nested_ifs": STUB + "".join("    " * (depth + 2) + "if a:\n" for depth in range(98)) + "    " * 100 + "pass\n",
    "annotation_string": "from __future__ import annotations\n\n" + STUB.replace(
        "-> None", "-> '" + "|".join(["int"] * 2_000) + "'"
    ) + "        pass\n",
}
# Just within the limit: accepted by the scan, so the flow check also walks them at full depth.
NEAR_LIMIT = {
    "sum_near_limit": in_execute("x = " + "+".join(["entity.energy"] * (LIMIT - 20))),
    "elif_near_limit": in_execute(
        "if entity.energy:\n            pass\n" + "        elif entity.energy:\n            pass\n" * (LIMIT - 20)
    ),
}


def implementations() -> list:
    builds = [pytest.param(gatekeeper_core, id="pure")]
    problem = native.compiled_problem("gatekeeper_core")
    builds.append(pytest.param(
        None if problem else importlib.import_module("genesis._gatekeeper_core_native"), id="compiled",
        marks=pytest.mark.skipif(problem is not None, reason=f"compiled gatekeeper {problem}"),
    ))
    return builds


def test_gatekeeper_serves_the_compiled_build_when_it_is_current() -> None:
    problem = native.compiled_problem("gatekeeper_core")
    assert gatekeeper.COMPILED is (problem is None)
    if problem is None:
        assert gatekeeper.validate.__module__ == "genesis._gatekeeper_core_native"
    else:
        assert gatekeeper.validate is gatekeeper_core.validate


@pytest.mark.parametrize("core", implementations())
@pytest.mark.parametrize("name", sorted(DEEP))
def test_deep_nesting_is_a_clean_syntax_error(core, name: str) -> None:
    code = DEEP[name]
    assert len(code.encode()) <= 32 * 1024, len(code.encode())
    result = core.validate("deep", code)
    assert not result.ok
    assert result.failure_code == "SYNTAX_ERROR", result.validation_log
    last = result.validation_log[-1]
    assert last.startswith("AST parse: FAILED — "), last
    assert any(reason in last for reason in ("nested too deeply", "too many", "indentation")), last


@pytest.mark.parametrize("core", implementations())
def test_nesting_near_the_limit_is_analysed(core) -> None:
    for name, code in NEAR_LIMIT.items():
        result = core.validate("deep", code)
        assert result.ok, (name, result.validation_log)


CRASH_PROBE = textwrap.dedent("""
    import json, sys, threading
    from genesis import gatekeeper
    from tests.unit.test_gatekeeper_native import DEEP, NEAR_LIMIT
    threading.stack_size(int(sys.argv[1]) * 1024)
    outcomes = {}
    def run():
        for name, code in {**DEEP, **NEAR_LIMIT}.items():
            outcomes[name] = gatekeeper.validate("deep", code).failure_code
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    print(json.dumps({"compiled": gatekeeper.COMPILED, "outcomes": outcomes}))
""")


@pytest.mark.parametrize("stack_kib", [8192, 1024])
def test_deep_nesting_never_crashes_a_thread(stack_kib: int) -> None:
    """In a child process (a crash would be its exit status, not this test run's), in a thread
    with a smaller stack than the worker's activity threads get."""
    done = subprocess.run(
        [sys.executable, "-c", CRASH_PROBE, str(stack_kib)], cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, f"exit status {done.returncode}: {done.stderr[-2000:]}"
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["compiled"] is (native.compiled_problem("gatekeeper_core") is None)
    assert report["outcomes"] == {**{name: "SYNTAX_ERROR" for name in DEEP}, **{name: None for name in NEAR_LIMIT}}


def corpus() -> dict[str, str]:
    """Traits that pass and traits that fail at each step, from the other gatekeeper tests."""
    from tests.unit import test_gatekeeper as cases

    sources = {name: value for name, value in vars(traits).items() if name.isupper() and isinstance(value, str)}
    sources["bypass"] = cases.make_trait("x = ().__class__.__bases__[0].__subclasses__()")
    sources["import"] = "import os\n" + traits.SEED_EXAMPLE
    sources["unbound"] = cases.make_trait("if entity.energy:\n    y = 1\nentity.state = y")
    sources["entity"] = cases.make_trait("entity.energy = 1")
    sources["await"] = cases.make_trait("await entity.eat()")
    sources["init"] = cases.make_trait("pass", members="def __init__(self, n):\n    self.n = n")
    sources["syntax"] = "class BaseTrait(:\n"
    # The escape analysis: the entity under other names, stores outside self, classes as values.
    for table in (cases.ENTITY_ALIASES, cases.STORES):
        for name, (body, members, postlude, _, _) in table.items():
            sources[name] = cases.make_trait(body, prelude=cases.PRELUDE, members=members, postlude=postlude)
    for name, (body, members, postlude) in cases.LEGAL_ALIASES.items():
        sources[name] = cases.make_trait(body, prelude=cases.PRELUDE, members=members, postlude=postlude)
    return sources


@pytest.mark.skipif(native.compiled_problem("gatekeeper_core") is not None, reason="compiled gatekeeper not built")
def test_compiled_and_pure_give_identical_results() -> None:
    compiled = importlib.import_module("genesis._gatekeeper_core_native")
    codes = set()
    for name, code in corpus().items():
        for trait_name in ("probe", "Not Snake"):
            pure_result = gatekeeper_core.validate(trait_name, code)
            assert vars(pure_result) == vars(compiled.validate(trait_name, code)), name
            codes.add(pure_result.failure_code)
    assert {None, "SCHEMA_INVALID", "SYNTAX_ERROR", "AST_IMPORT_FORBIDDEN", "AST_BANNED_ATTR",
            "AST_UNBOUND_VARIABLE", "AST_ENTITY_ATTR_FORBIDDEN", "AST_AWAIT_ON_SYNC", "AST_INIT_REQUIRED_ARGS"} <= codes


FALLBACK_PROBE = "from genesis import gatekeeper; print(gatekeeper.COMPILED, gatekeeper.validate.__module__)"


@pytest.mark.skipif(native.compiled_problem("gatekeeper_core") is not None, reason="compiled gatekeeper not built")
@pytest.mark.parametrize("change", ["none", "source_edited", "extension_missing"])
def test_a_stale_or_missing_build_falls_back_to_pure_python_and_says_so(tmp_path: Path, change: str) -> None:
    """A copy of the package, changed as named, imported by a fresh interpreter."""
    package = tmp_path / "genesis"
    shutil.copytree(ROOT / "genesis", package, ignore=shutil.ignore_patterns("__pycache__", "migrations"))
    if change == "source_edited":
        with open(package / "gatekeeper_core.py", "a") as source:
            source.write("\n# edited after the build\n")
    elif change == "extension_missing":
        for extension in package.glob("_gatekeeper_core_native.*.so"):
            extension.unlink()
    # -S: without the site hook the venv's editable-install finder (which maps ``genesis.*`` to the
    # checkout) is not installed, so the copy is what gets imported; the venv's packages stay reachable.
    site_packages = sysconfig.get_paths()["purelib"]
    done = subprocess.run([sys.executable, "-S", "-c", FALLBACK_PROBE], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{site_packages}"})
    assert done.returncode == 0, done.stderr
    if change == "none":
        assert done.stdout.split() == ["True", "genesis._gatekeeper_core_native"]
        assert "pure-Python" not in done.stderr
    else:
        assert done.stdout.split() == ["False", "genesis.gatekeeper_core"]
        reason = "stale" if change == "source_edited" else "not built"
        assert f"using the pure-Python module, the compiled build is {reason}" in done.stderr, done.stderr
