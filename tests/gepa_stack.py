"""A worker and an API of their own for the GEPA tests (one per test session), pointed at a scripted LM (a real local
HTTP server) and a workspace in a temporary folder. They poll a task queue nobody else uses, so
the session's worker never picks up these steps."""

from __future__ import annotations

import asyncio
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr
from sqlalchemy import text

from cli.processes import ManagedProcess, api_process, free_port, wait_for_api, worker_process
from doubles.gepa_repo import make_repo
from doubles.scripted_lm import ScriptedLM
from genesis.config import Settings
from genesis.db.session import get_engine
from gepa_steps import envs as gepa_envs
from tests import agents
from tests.agents import TestAgent
from tests.fake_github import APP_ID, FakeGitHub, RecordingHost

GITHUB_INSTALLATION_ID = 7001
GITHUB_UNKNOWN_INSTALLATION_ID = 7002  # granted by the operator, but no installation on GitHub


@dataclass
class GepaStack:
    url: str
    settings: Settings
    lm: ScriptedLM
    repo: Path  # the client's source repository (a local git repo made by the test)
    allowed: tuple[str, int]  # an HTTP server on the allow-list (GENESIS_GEPA_EGRESS_ALLOW)
    forbidden: tuple[str, int]  # an HTTP server on every host address, not on the allow-list
    github: FakeGitHub  # the App API and a private repository acme/private-qa.git
    elsewhere: RecordingHost  # another host on the operator's private allow-list: records what reaches it
    silent_port: int  # on the operator's private allow-list; nothing listens there unless a test does
    agent: TestAgent | None = None  # the tests' agent: its X-API-Key owns the clients they connect
    worker: ManagedProcess | None = None

    def clone_of(self, client_id: str) -> Path:
        return Path(self.settings.gepa.workspace_dir) / "clients" / client_id / "repo"

    async def connect(self, http: httpx.AsyncClient, repo: Path | None = None) -> str:
        response = await http.post("/connect-git", json={"repo_url": str(repo or self.repo)})
        assert response.status_code == 201, response.text
        return response.json()["client_id"]


@pytest.fixture(scope="session")  # one stack for every GEPA test module: it starts in ~10 s
async def gepa_stack(settings, tmp_path_factory):
    root = tmp_path_factory.mktemp("gepa")
    async with get_engine(settings.database_url).begin() as conn:  # program ids of an earlier run
        await conn.execute(text("TRUNCATE programs, gepa_clients"))
    lm = ScriptedLM()
    repo = make_repo(root / "sources" / "qa-repo")
    allowed = ScriptedLM("127.0.0.1")  # any real HTTP server will do: the egress tests GET it
    forbidden = ScriptedLM("0.0.0.0")
    github_root = root / "github" / "acme"
    github_root.mkdir(parents=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(github_root / "private-qa.git")], check=True)
    github = FakeGitHub(root / "github", installation_id=GITHUB_INSTALLATION_ID)
    elsewhere = RecordingHost()
    (root / "github-app.pem").write_bytes(github.private_key_pem)
    silent_port = free_port()
    # Everything the tests serve on loopback is private: the operator's allow-list names each
    # such host:port (the checks themselves stay as strict as in production).
    private_allow = ",".join(
        f"127.0.0.1:{port}"
        for port in (github.server.server_address[1], allowed.port, forbidden.port, silent_port, elsewhere.port)
    )
    stack_settings = settings.override(
        task_queue=f"genesis-test-gepa-{free_port()}",
        api_port=free_port(),
        gepa_workspace_dir=root / "workspace",
        gepa_local_repo_roots=str(root / "sources"),
        gepa_lm_model="openai/scripted",
        gepa_lm_base_url=lm.base_url,
        gepa_lm_api_key=SecretStr("sk-test-lm-key"),
        gepa_coder_base_url=lm.base_url,
        gepa_coder_model="scripted-coder",
        gepa_coder_api_key=SecretStr("sk-test-coder-key"),
        gepa_gateway_port=free_port(),
        gepa_egress_allow=f"127.0.0.1:{allowed.port}",
        gepa_github_app_id=APP_ID,
        gepa_github_private_key_path=root / "github-app.pem",
        gepa_github_api_url=github.url,
        gepa_github_url=github.url,
        gepa_allow_http_repos=True,
        outbound_private_allow=private_allow,
        gepa_clone_connect_timeout_s=4.0,
        gepa_clone_stall_s=3,
        gepa_run_timeout_s=60.0,
        gepa_step_timeout_s=240.0,
    )
    # The program environment (DSPy) is installed once per requirements hash and kept in
    # .state/gepa-envs across runs; the first run on a machine pays for it here, not in a test.
    await asyncio.to_thread(
        gepa_envs.ensure_environment, Path(stack_settings.gepa.envs_dir), [], stack_settings.gepa.dspy_requirement
    )
    worker = worker_process(stack_settings, "worker-gepa")
    worker.start()
    api = api_process(stack_settings, "api-gepa")
    api.start()
    try:
        url = await asyncio.to_thread(wait_for_api, api)
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            agent = await agents.register(http, "gepa-tests")
        # The operator grants the GitHub App installation to the tests' agent alone (agents made
        # later are outsiders to it): the API starts again with that grant.
        api.stop()
        stack_settings = stack_settings.override(
            gepa_github_installations=",".join(
                f"{installation}={agent.agent_id}"
                for installation in (GITHUB_INSTALLATION_ID, GITHUB_UNKNOWN_INSTALLATION_ID)
            )
        )
        api = api_process(stack_settings, "api-gepa")
        api.start()
        url = await asyncio.to_thread(wait_for_api, api)
        yield GepaStack(
            agent=agent,
            worker=worker,
            url=url,
            settings=stack_settings,
            lm=lm,
            repo=repo,
            allowed=("127.0.0.1", allowed.port),
            forbidden=("0.0.0.0", forbidden.port),
            github=github,
            elsewhere=elsewhere,
            silent_port=silent_port,
        )
    finally:
        api.stop()
        worker.stop()
        for server in (lm, allowed, forbidden, github, elsewhere):
            server.close()


@pytest.fixture(scope="session")
async def gepa_client_id(gepa_stack) -> str:
    """One connected client for the tests that need no repository of their own: its program host
    stays warm from test to test."""
    async with httpx.AsyncClient(base_url=gepa_stack.url, timeout=300, headers=gepa_stack.agent.headers) as http:
        return await gepa_stack.connect(http)


@pytest.fixture
async def gepa_http(gepa_stack):
    async with httpx.AsyncClient(base_url=gepa_stack.url, timeout=300, headers=gepa_stack.agent.headers) as client:
        yield client


async def wait_for_program(http: httpx.AsyncClient, program_id: str, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        body = (await http.get(f"/program/{program_id}")).json()
        if body.get("status") in ("completed", "failed") or time.monotonic() > deadline:
            return body
        await asyncio.sleep(0.2)
