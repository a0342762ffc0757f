"""The Claude Agent SDK backend of GEPA code mutations (GENESIS_GEPA_CODER_BACKEND=claude_agent_sdk):
Claude Code runs in the coder container on a writable copy of the worktree, talks to a scripted
Anthropic Messages API (a real local HTTP server, tests/scripted_anthropic.py) through the egress
gateway, edits with its file tools, and the diff of its copy is committed on the program's branch."""

from __future__ import annotations

import asyncio
import stat
import subprocess
from pathlib import Path

import docker
import httpx
import pytest
from pydantic import SecretStr
from temporalio.exceptions import ApplicationError

from cli.processes import api_process, free_port, wait_for_api, worker_process
from doubles.gepa_repo import QA_SOURCE
from gepa_steps import envs as gepa_envs
from gepa_steps.claude_coding_agent import WORKING_COPY, git_diff
from gepa_steps.coder import CodingAgent
from gepa_steps.dto import StepRequest
from tests.gepa_requests import assert_every_answer_exclaims, exclaiming_code_step, git_show, step
from tests.scripted_anthropic import FINAL_TEXT, ScriptedAnthropic

ANTHROPIC_KEY = "sk-ant-test-key"
FORWARD = "        return self.answer(question=question)\n"
EXCLAIMING = (
    "        prediction = self.answer(question=question)\n"
    '        return dspy.Prediction(answer=prediction.answer + "!")\n'
)


@pytest.fixture(scope="module")
async def claude_stack(gepa_stack):
    """A worker and API of their own whose coding agent is the Claude Agent SDK backend."""
    anthropic = ScriptedAnthropic()
    settings = gepa_stack.settings.override(
        task_queue=f"genesis-test-gepa-claude-{free_port()}",
        api_port=free_port(),
        gepa_gateway_port=free_port(),
        gepa_coder_backend="claude_agent_sdk",
        gepa_anthropic_base_url=anthropic.base_url,
        gepa_anthropic_api_key=SecretStr(ANTHROPIC_KEY),
        gepa_claude_model="claude-scripted",
        gepa_claude_max_turns=8,
        gepa_claude_timeout_s=120.0,
    )
    # The coder environment (the SDK wheel bundles the Claude Code binary, ~400 MB installed) is
    # installed once per machine into gepa_envs_dir, like the program environments.
    await asyncio.to_thread(
        gepa_envs.ensure_environment, Path(settings.gepa.envs_dir), [], settings.gepa.claude_sdk_requirement
    )
    worker, api = worker_process(settings, "worker-gepa-claude"), api_process(settings, "api-gepa-claude")
    worker.start()
    api.start()
    try:
        url = await asyncio.to_thread(wait_for_api, api)
        yield url, settings, anthropic
    finally:
        api.stop()
        worker.stop()
        anthropic.close()


async def test_a_claude_agent_code_mutation_commits_its_edit_and_changes_the_outputs(gepa_stack, claude_stack):
    url, _settings, anthropic = claude_stack
    anthropic.script = [
        ("Glob", {"pattern": "**/*.py"}),
        ("Read", {"file_path": f"{WORKING_COPY}/qa.py"}),
        ("Edit", {"file_path": f"{WORKING_COPY}/qa.py", "old_string": FORWARD, "new_string": EXCLAIMING}),
        ("Write", {"file_path": f"{WORKING_COPY}/CHANGES.md", "content": "Answers end with an exclamation mark.\n"}),
    ]
    async with httpx.AsyncClient(base_url=url, timeout=300, headers=gepa_stack.agent.headers) as http:
        client_id = await gepa_stack.connect(http)
        response = await http.post("/execute_step", json=exclaiming_code_step(client_id, "claude1"))
    assert_every_answer_exclaims(response.json())
    show = git_show(gepa_stack.clone_of(client_id), "program_claude1")
    assert "GEPA code mutation claude1" in show
    assert '+        return dspy.Prediction(answer=prediction.answer + "!")' in show
    assert "+Answers end with an exclamation mark." in show and "new file mode" in show
    # Claude Code asked the scripted API turn by turn; the gateway swapped its placeholder key for
    # the real one; it was offered only the file tools (no shell, no web) and saw the request.
    turns = anthropic.agent_calls()
    assert len(turns) == len(anthropic.script) + 1
    assert {c["x-api-key"] for c in anthropic.calls} == {ANTHROPIC_KEY}
    offered = {tool["name"] for tool in turns[0]["body"]["tools"]}
    assert {"Read", "Edit", "Write", "Glob", "Grep"} <= offered and not offered & {
        "Bash",
        "WebFetch",
        "WebSearch",
        "Task",
    }
    assert turns[0]["body"]["model"] == "claude-scripted" and turns[0]["body"]["stream"] is True
    assert "exclamation mark" in str(turns[0]["body"]["messages"]) and "Where: qa.QA.forward" in str(
        turns[0]["body"]["messages"]
    )
    edit_result = turns[3]["body"]["messages"][-1]["content"][0]
    assert edit_result["type"] == "tool_result" and "updated successfully" in str(edit_result["content"])
    assert FINAL_TEXT not in show  # the agent's last words are not part of the patch


def readable_worktree(root: Path) -> Path:
    root.mkdir()
    (root / "qa.py").write_text(QA_SOURCE)
    for path in (root, root / "qa.py"):  # the agent runs as uid 10001
        path.chmod(path.stat().st_mode | stat.S_IROTH | stat.S_IXOTH)
    return root


def code_request() -> StepRequest:
    return StepRequest(
        **step(
            "client_00000000000000aa",
            "claude9",
            mutation_type="code",
            candidate={},
            change_request="Make every answer end with an exclamation mark",
        )
    )


async def test_the_claude_backend_without_a_key_or_without_the_sdk_fails_with_a_clear_error(gepa_stack, tmp_path):
    worktree = readable_worktree(tmp_path / "worktree")
    settings = gepa_stack.settings.override(gepa_coder_backend="claude_agent_sdk")
    client = docker.from_env()
    no_key = CodingAgent(client, settings, "http://unused", {}, claude_url="http://unused")
    with pytest.raises(ApplicationError, match="needs GENESIS_GEPA_ANTHROPIC_API_KEY"):
        await asyncio.to_thread(no_key.propose_patch, code_request(), worktree)
    # A coder environment without the SDK (another, small package): the container says so.
    without_sdk = settings.override(
        gepa_anthropic_api_key=SecretStr(ANTHROPIC_KEY), gepa_claude_sdk_requirement="sniffio==1.3.1"
    )
    agent = CodingAgent(client, without_sdk, "http://unused", {}, claude_url="http://unused")
    with pytest.raises(ApplicationError, match="the Claude Agent SDK is not installed in the coder environment"):
        await asyncio.to_thread(agent.propose_patch, code_request(), worktree)


def test_the_working_copy_diff_is_one_git_apply_accepts(tmp_path):
    """The container's diff of its copy: changed (also without a final newline), new and deleted files."""
    before, after = tmp_path / "before", tmp_path / "after"
    (after / "pkg").mkdir(parents=True)
    before.mkdir()
    (before / "qa.py").write_text("x\ny")
    (after / "qa.py").write_text("x\nz\n")
    (before / "old.txt").write_text("gone\n")
    (after / "pkg" / "new.py").write_text("value = 1")
    subprocess.run(["git", "init", "-q", str(before)], check=True)
    patch = git_diff(str(before), str(after))
    subprocess.run(["git", "apply", "-"], cwd=before, input=patch, text=True, check=True)
    assert sorted(p.name for p in before.rglob("*") if ".git" not in p.parts and p.is_file()) == ["new.py", "qa.py"]
    assert (before / "qa.py").read_text() == "x\nz\n" and (before / "pkg" / "new.py").read_text() == "value = 1"
