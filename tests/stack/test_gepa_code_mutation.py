"""GEPA code mutations: the coding agent runs in a sandbox container with the worktree mounted
read-only, asks the (scripted) coding model through the egress gateway, and the worker applies
the returned diff with ``git apply`` and commits it on the program's branch."""

from __future__ import annotations

import difflib

from doubles.gepa_repo import QA_SOURCE
from tests.stack.test_gepa_steps import assert_every_answer_exclaims, branches, exclaiming_code_step, git_show, step

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
