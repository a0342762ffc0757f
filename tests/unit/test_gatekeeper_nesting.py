"""Pathological nesting: code nested deeper than the gatekeeper follows is a clean SYNTAX_ERROR,
code just within the limit is analysed in full, and neither crashes the thread validating it
(the worker validates in threads of its event loop's executor). Pure: no services."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import gatekeeper

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
    )
    + "        pass\n",
    "nested_lists": in_execute("x = " + "[" * 250 + "]" * 250),
    "nested_calls": in_execute("x = " + "f(" * 250 + ")" * 250),
    "nested_ifs": STUB + "".join("    " * (depth + 2) + "if a:\n" for depth in range(98)) + "    " * 100 + "pass\n",
    "annotation_string": "from __future__ import annotations\n\n"
    + STUB.replace("-> None", "-> '" + "|".join(["int"] * 2_000) + "'")
    + "        pass\n",
}
# Just within the limit: accepted by the scan, so the flow check also walks them at full depth.
NEAR_LIMIT = {
    "sum_near_limit": in_execute("x = " + "+".join(["entity.energy"] * (LIMIT - 20))),
    "elif_near_limit": in_execute(
        "if entity.energy:\n            pass\n" + "        elif entity.energy:\n            pass\n" * (LIMIT - 20)
    ),
}


@pytest.mark.parametrize("name", sorted(DEEP))
def test_deep_nesting_is_a_clean_syntax_error(name: str) -> None:
    code = DEEP[name]
    assert len(code.encode()) <= 32 * 1024, len(code.encode())
    result = gatekeeper.validate("deep", code)
    assert not result.ok
    assert result.failure_code == "SYNTAX_ERROR", result.validation_log
    last = result.validation_log[-1]
    assert last.startswith("AST parse: FAILED — "), last
    assert any(reason in last for reason in ("nested too deeply", "too many", "indentation")), last


def test_nesting_near_the_limit_is_analysed() -> None:
    for name, code in NEAR_LIMIT.items():
        result = gatekeeper.validate("deep", code)
        assert result.ok, (name, result.validation_log)


CRASH_PROBE = textwrap.dedent("""
    import json, sys, threading
    import gatekeeper
    from tests.unit.test_gatekeeper_nesting import DEEP, NEAR_LIMIT
    threading.stack_size(int(sys.argv[1]) * 1024)
    outcomes = {}
    def run():
        for name, code in {**DEEP, **NEAR_LIMIT}.items():
            outcomes[name] = gatekeeper.validate("deep", code).failure_code
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    print(json.dumps(outcomes))
""")


@pytest.mark.parametrize("stack_kib", [8192, 1024])
def test_deep_nesting_never_crashes_a_thread(stack_kib: int) -> None:
    """In a child process (a crash would be its exit status, not this test run's), in a thread
    with a smaller stack than the worker's threads get."""
    done = subprocess.run(
        [sys.executable, "-c", CRASH_PROBE, str(stack_kib)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"exit status {done.returncode}: {done.stderr[-2000:]}"
    outcomes = json.loads(done.stdout.splitlines()[-1])
    assert outcomes == {**{name: "SYNTAX_ERROR" for name in DEEP}, **{name: None for name in NEAR_LIMIT}}
