"""GEPA step requests and what their answers hold, as the GEPA stack tests send and read them."""

from __future__ import annotations

import subprocess

QUESTION = "hello world"


def step(client_id: str, program_id: str, **changes) -> dict:
    body = {
        "client_id": client_id,
        "program_id": program_id,
        "mutation_type": "prompt",
        "program_json_path": "program.json",
        "entry_point": "qa.QA",
        "candidate": {"answer": "Answer the question."},
        "test_examples": [
            {"question": QUESTION, "answer": QUESTION.upper()},
            {"question": "second", "answer": "SECOND"},
        ],
    }
    body.update(changes)
    return body


def exclaiming_code_step(client_id: str, program_id: str) -> dict:
    """A code mutation asking that every answer end with "!" (the code-mutation tests' request)."""
    return step(
        client_id,
        program_id,
        mutation_type="code",
        candidate={},
        change_request="Make every answer end with an exclamation mark",
        change_location="qa.QA.forward",
    )


def assert_every_answer_exclaims(result: dict) -> None:
    assert result["status"] == "success", result
    assert [o["output"]["answer"] for o in result["pipeline_outputs"]] == [f"{QUESTION}!", "second!"]


def git_show(repo, ref: str) -> str:
    return subprocess.run(["git", "show", ref], cwd=repo, capture_output=True, text=True, check=True).stdout


def branches(repo) -> list[str]:
    out = subprocess.run(
        ["git", "branch", "--format=%(refname:short)"], cwd=repo, capture_output=True, text=True, check=True
    )
    return out.stdout.split()
