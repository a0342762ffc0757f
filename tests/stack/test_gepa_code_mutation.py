"""GEPA code mutations: the coding agent runs in a sandbox container with the worktree mounted
read-only, asks the (scripted) coding model through the egress gateway, and the worker applies
the returned diff with ``git apply`` and commits it on the program's branch. A merge step of two
parents joins their code (git's three-way merge) and their predictors (component by component)."""

from __future__ import annotations

import difflib
import subprocess

from doubles.gepa_repo import QA_SOURCE
from tests.gepa_requests import QUESTION, assert_every_answer_exclaims, branches, exclaiming_code_step, git_show, step

EXCLAIMING_QA = QA_SOURCE.replace(
    "        return self.answer(question=question)\n",
    "        prediction = self.answer(question=question)\n"
    '        return dspy.Prediction(answer=prediction.answer + "!")\n',
)


def diff(path: str, before: str, after: str) -> str:
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{path}", f"b/{path}"
    )
    return f"Here is the change:\n```diff\n{''.join(lines)}```\n"


async def test_a_code_mutation_commits_the_coding_models_patch_on_its_branch(gepa_stack, gepa_http, gepa_client_id):
    client_id = gepa_client_id
    gepa_stack.lm.coder_reply = diff("qa.py", QA_SOURCE, EXCLAIMING_QA)
    response = await gepa_http.post("/execute_step", json=exclaiming_code_step(client_id, "code1"))
    assert_every_answer_exclaims(response.json())
    show = git_show(gepa_stack.clone_of(client_id), "program_code1")
    assert (
        "GEPA code mutation code1" in show and '+        return dspy.Prediction(answer=prediction.answer + "!")' in show
    )
    # The agent saw the worktree and the request; the model's key was added outside the container.
    coder_calls = [c for c in gepa_stack.lm.calls if "GENESIS-CODER" in str(c["body"])]
    assert coder_calls and coder_calls[-1]["authorization"] == "Bearer sk-test-coder-key"
    prompt = coder_calls[-1]["body"]["messages"][-1]["content"]
    assert "exclamation mark" in prompt and "--- file qa.py ---" in prompt and "Where: qa.QA.forward" in prompt


async def test_a_patch_that_does_not_apply_fails_the_step_and_leaves_no_branch(gepa_stack, gepa_http, gepa_client_id):
    client_id = gepa_client_id
    gepa_stack.lm.coder_reply = diff("qa.py", QA_SOURCE.replace("question", "query"), EXCLAIMING_QA)
    response = await gepa_http.post(
        "/execute_step", json=step(client_id, "code2", mutation_type="code", change_request="anything")
    )
    result = response.json()
    assert result["status"] == "failed" and "patch does not apply" in result["error"], result
    assert "program_code2" not in branches(gepa_stack.clone_of(client_id))
    # git apply itself refuses paths into .git or outside the worktree.
    gepa_stack.lm.coder_reply = (
        "```diff\n--- /dev/null\n+++ b/.git/hooks/post-commit\n@@ -0,0 +1 @@\n+touch /tmp/pwned\n```"
    )
    response = await gepa_http.post(
        "/execute_step", json=step(client_id, "code5", mutation_type="code", change_request="anything")
    )
    assert response.json()["status"] == "failed" and "invalid path '.git/hooks/post-commit'" in response.json()["error"]
    gepa_stack.lm.coder_reply = "I would rather not."
    response = await gepa_http.post(
        "/execute_step", json=step(client_id, "code3", mutation_type="code", change_request="anything")
    )
    assert response.json()["status"] == "failed" and "no unified diff" in response.json()["error"]
    missing = await gepa_http.post("/execute_step", json=step(client_id, "code4", mutation_type="code"))
    assert missing.status_code == 422 and "change_request" in missing.json()["detail"]


# --- Crossover: a merge step of two parents (gepa_steps/crossover.py) -----------------------------

LOWERING_QA = QA_SOURCE.replace(
    "        return self.answer(question=question)\n",
    "        prediction = self.answer(question=question)\n"
    "        return dspy.Prediction(answer=prediction.answer.lower())\n",
)


def merge_step(client_id: str, program_id: str, first: str, second: str) -> dict:
    return step(
        client_id,
        program_id,
        mutation_type="merge",
        parent_program_id=first,
        second_parent_program_id=second,
        candidate={},
    )


async def test_a_merge_joins_one_parents_code_and_the_others_instructions(gepa_stack, gepa_http, gepa_client_id):
    client_id = gepa_client_id
    gepa_stack.lm.coder_reply = diff("qa.py", QA_SOURCE, EXCLAIMING_QA)
    assert_every_answer_exclaims(
        (await gepa_http.post("/execute_step", json=exclaiming_code_step(client_id, "xcode"))).json()
    )
    upper = await gepa_http.post(
        "/execute_step", json=step(client_id, "xupper", candidate={"answer": "UPPERCASE please"})
    )
    assert upper.json()["status"] == "success", upper.text
    response = await gepa_http.post("/execute_step", json=merge_step(client_id, "xchild", "xcode", "xupper"))
    result = response.json()
    assert result["status"] == "success", result
    # The first parent's code, the second's instructions: upper-case answers that exclaim.
    assert [o["output"]["answer"] for o in result["pipeline_outputs"]] == [f"{QUESTION.upper()}!", "SECOND!"]
    assert result["program_json"]["answer"]["signature"]["instructions"] == "UPPERCASE please"
    assert result["merge"]["from_second"] == ["answer"] and result["merge"]["conflicts"] == []
    clone = gepa_stack.clone_of(client_id)
    parents = subprocess.run(
        ["git", "rev-list", "--parents", "-n", "1", "program_xchild"], cwd=clone, capture_output=True, text=True
    ).stdout.split()[1:]
    heads = [git_show(clone, f"program_{p}").split()[1] for p in ("xcode", "xupper")]
    assert parents == heads and result["merge"]["base_commit"] not in heads
    assert "GEPA merge mutation xchild (parents xcode and xupper)" in git_show(clone, "program_xchild")
    program = (await gepa_http.get("/program/xchild")).json()
    assert program["mutation_type"] == "merge" and program["parent_program_id"] == "xcode"
    assert program["second_parent_program_id"] == "xupper"

    # Both parents changed the same predictor: the first parent's instructions, reported.
    other = await gepa_http.post("/execute_step", json=step(client_id, "xtagged", candidate={"answer": "PREFIX=tag"}))
    assert other.json()["status"] == "success", other.text
    both = (await gepa_http.post("/execute_step", json=merge_step(client_id, "xboth", "xupper", "xtagged"))).json()
    assert both["status"] == "success", both
    assert both["program_json"]["answer"]["signature"]["instructions"] == "UPPERCASE please"
    assert both["merge"]["conflicts"] == ["answer"] and both["merge"]["from_second"] == []


async def test_a_merge_of_conflicting_code_fails_and_bad_merges_are_refused(gepa_stack, gepa_http, gepa_client_id):
    client_id = gepa_client_id
    for program_id, source in (("ycode", EXCLAIMING_QA), ("ylower", LOWERING_QA)):
        gepa_stack.lm.coder_reply = diff("qa.py", QA_SOURCE, source)
        done = await gepa_http.post(
            "/execute_step", json=step(client_id, program_id, mutation_type="code", candidate={}, change_request="x")
        )
        assert done.json()["status"] == "success", done.text
    failed = (await gepa_http.post("/execute_step", json=merge_step(client_id, "ybad", "ycode", "ylower"))).json()
    assert failed["status"] == "failed" and "both parents changed the same lines of qa.py" in failed["error"], failed
    assert "program_ybad" not in branches(gepa_stack.clone_of(client_id))
    unknown = (await gepa_http.post("/execute_step", json=merge_step(client_id, "ynone", "ycode", "nobody"))).json()
    assert unknown["status"] == "failed" and "unknown second_parent_program_id 'nobody'" in unknown["error"]
    for body, field in (
        (
            {**merge_step(client_id, "y1", "ycode", "ylower"), "second_parent_program_id": None},
            "second_parent_program_id",
        ),
        (merge_step(client_id, "y2", "ycode", "ycode"), "second_parent_program_id"),
        ({**merge_step(client_id, "y3", "ycode", "ylower"), "candidate": {"answer": "x"}}, "candidate"),
        (
            step(client_id, "y4", parent_program_id="ycode", second_parent_program_id="ylower"),
            "second_parent_program_id",
        ),
    ):
        refused = await gepa_http.post("/execute_step", json=body)
        assert refused.status_code == 422 and refused.json()["errors"][0]["field"] == field, refused.text
