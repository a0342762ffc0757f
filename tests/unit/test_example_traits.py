"""The example traits (examples/traits/) are what their headers say: each one passes the
gatekeeper or is rejected with the failure code and the log line its header quotes, its header's
command proposes the file itself, and docs/traits.md lists it. (tests/stack/test_example_traits.py
proposes them through the API and waits for the sandbox test.)"""

from __future__ import annotations

import pytest

import gatekeeper
from tests.example_traits import EXAMPLES_DIR, ROOT, examples

# Every example and its verdict: a new example is added here, so none goes untested.
VERDICTS = {
    "forager.py": None,
    "energy_saver.py": None,
    "flocking.py": None,
    "careful_forager.py": None,
    "reckless.py": None,
    "rejected_import_os.py": "AST_IMPORT_FORBIDDEN",
    "rejected_open_file.py": "AST_BANNED_CALL",
}
EXAMPLES = examples()


def test_every_example_is_listed_with_its_verdict():
    assert {example.path.name: example.failure_code for example in EXAMPLES} == VERDICTS


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda example: example.path.name)
def test_the_gatekeeper_gives_the_verdict_the_header_states(example):
    result = gatekeeper.validate(example.trait_name, example.code)
    assert result.failure_code == example.failure_code, (example.path.name, result.validation_log)
    assert (EXAMPLES_DIR / example.path.name).relative_to(ROOT).as_posix() == example.proposed_path
    if example.failure_code is None:
        assert result.ok and result.class_name, result.validation_log
        assert "What it shows:" in example.header
    else:
        failed = " ".join(result.validation_log[-1].split())
        assert "FAILED" in failed and failed in example.header, (failed, example.header)
        assert "Why:" in example.header and "To make it pass:" in example.header


def test_the_examples_are_distinct_traits():
    """Proposed side by side, none is another's DUPLICATE_CODE or TRAIT_EXISTS."""
    passing = [example for example in EXAMPLES if example.failure_code is None]
    hashes = {gatekeeper.validate(example.trait_name, example.code).code_hash for example in passing}
    assert len(hashes) == len(passing)
    assert len({example.trait_name for example in EXAMPLES}) == len(EXAMPLES)


def test_docs_list_every_example():
    traits_doc = (ROOT / "docs" / "traits.md").read_text(encoding="utf-8")
    for example in EXAMPLES:
        row = f"| `{example.path.name}` |"
        assert row in traits_doc, f"docs/traits.md: add {example.path.name} to the example traits"
        if example.failure_code:
            assert f"`{example.failure_code}` |" in traits_doc.split(row, 1)[1].split("\n", 1)[0]
