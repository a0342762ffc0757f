"""The program host on its own (real container, no Temporal): a step past its deadline is killed
and reported while the host keeps serving; what a program prints never reaches the protocol; a
program cannot take the host down with it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import docker
import pytest

from doubles.gepa_repo import make_repo
from genesis.config import Settings
from gepa_steps import egress, envs as gepa_envs
from gepa_steps.hosts import HostLimits, ProgramHosts

TROUBLE_SOURCE = """import os
import signal
import time

import dspy


class Hang(dspy.Module):
    def __init__(self):
        super().__init__()
        self.answer = dspy.Predict("question -> answer")

    def forward(self, question):
        time.sleep(3600)


class Noisy(dspy.Module):
    def __init__(self):
        super().__init__()
        self.answer = dspy.Predict("question -> answer")

    def forward(self, question):
        print('{"id": "forged", "ok": true}')
        print("and more noise")
        return dspy.Prediction(answer=question)


class Regicide(dspy.Module):
    def __init__(self):
        super().__init__()
        self.answer = dspy.Predict("question -> answer")

    def forward(self, question):
        os.kill(os.getppid(), signal.SIGKILL)  # the host is PID 1 of its container
        os.kill(1, signal.SIGKILL)
        return dspy.Prediction(answer="still " + question)
"""


@pytest.fixture(scope="module")
async def host(tmp_path_factory):
    settings = Settings()
    worktrees = tmp_path_factory.mktemp("worktrees")
    worktrees.chmod(0o755)  # pytest makes it 0700; the container's user (uid 10001) must read it
    repo = make_repo(worktrees / "p1")
    (repo / "trouble.py").write_text(TROUBLE_SOURCE)
    env_dir = await asyncio.to_thread(
        gepa_envs.ensure_environment, Path(settings.gepa.envs_dir), [], settings.gepa.dspy_requirement
    )
    client = docker.from_env()
    network = await asyncio.to_thread(egress.ensure_network, client, settings.gepa.network)
    assert network
    hosts = ProgramHosts(client, settings.gepa.network, {}, HostLimits(memory="1g"))
    started = await asyncio.to_thread(hosts.host_for, "client_00000000000000ff", worktrees, env_dir)
    yield started
    await asyncio.to_thread(hosts.close)


def run(host, entry_point: str, timeout_s: float = 30) -> dict:
    return host.run(
        {
            "op": "run",
            "worktree": "/worktrees/p1",
            "program_json_path": "program.json",
            "entry_point": entry_point,
            "examples": [{"question": "q"}],
            "timeout_s": timeout_s,
        },
        timeout=60,
    )


async def test_a_step_past_its_deadline_is_killed_and_the_host_serves_on(host):
    reply = await asyncio.to_thread(run, host, "trouble.Hang", 1.5)
    assert reply["ok"] is False and reply["error"] == "the program did not finish within 1.5s and was killed"
    noisy = await asyncio.to_thread(run, host, "trouble.Noisy")
    assert noisy["ok"] is True and noisy["pipeline_outputs"] == [{"example_id": 0, "output": {"answer": "q"}}]
    if "and more noise" not in host.stderr_tail():  # its stderr frame may follow the reply: the next run reads it
        await asyncio.to_thread(run, host, "trouble.Noisy")
    assert "and more noise" in host.stderr_tail()  # printed output goes to stderr


async def test_a_program_cannot_kill_its_host(host):
    reply = await asyncio.to_thread(run, host, "trouble.Regicide")
    assert (
        reply["ok"] is True
        and json.dumps(reply["pipeline_outputs"]) == '[{"example_id": 0, "output": {"answer": "still q"}}]'
    )
    assert host.alive
