"""The coding-agent step of a GEPA code mutation: the agent runs in a fresh container of the
program image with only the step's worktree mounted, read-only, on the internal egress network;
the worker applies the diff it returns (gepa_steps/activities.py). Two backends
(GENESIS_GEPA_CODER_BACKEND): ``chat`` (gepa_steps/coding_agent.py asks an OpenAI-compatible model for a
diff) and ``claude_agent_sdk`` (gepa_steps/claude_coding_agent.py runs Claude Code on a writable copy
and diffs it; the SDK comes from a coder environment mounted read-only)."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from pathlib import Path

import docker
from docker.errors import APIError, NotFound
from requests.exceptions import ConnectionError as RequestsConnectionError, ReadTimeout
from temporalio.exceptions import ApplicationError

from genesis.config import Settings
from gepa_steps import envs as gepa_envs, image as program_image
from gepa_steps.dto import STEP_FAILED, StepRequest
from sandbox.container import attached_socket

AGENT_TIMEOUT_S = 600
WAIT_SLICE_S = 5  # the container is waited for in slices, reporting progress (activity heartbeats) in between
# Claude Code inside the container: no update checks, telemetry or error reports (they would be
# refused by the gateway anyway); its home and the working copy live on the container's tmpfs.
CLAUDE_ENVIRONMENT = {
    "HOME": "/tmp/home",
    "PYTHONPATH": program_image.ENV_IN_IMAGE,
    "DISABLE_AUTOUPDATER": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "ANTHROPIC_API_KEY": "added-by-the-genesis-egress-gateway",
}


def failed(message: str) -> ApplicationError:
    return ApplicationError(message, type=STEP_FAILED, non_retryable=True)


class CodingAgent:
    def __init__(
        self,
        client: docker.DockerClient,
        settings: Settings,
        coder_url: str,
        proxy_env: dict[str, str],
        claude_url: str = "",
    ):
        self._client, self._settings, self._proxy_env = client, settings, proxy_env
        self._environment = {
            "GENESIS_CODER_URL": coder_url,
            "GENESIS_CODER_MODEL": settings.gepa.coder_model,
            **proxy_env,
        }
        self._claude_url = claude_url

    def propose_patch(
        self, request: StepRequest, worktree: Path, progress: Callable[[str], None] = lambda _: None
    ) -> str:
        if not request.change_request:
            raise failed("a code mutation needs a change_request")
        task: dict[str, object] = {"change_request": request.change_request, "change_location": request.change_location}
        if self._settings.gepa.coder_backend == "claude_agent_sdk":
            spec = self._claude_container(worktree, progress)
            timeout = self._settings.gepa.claude_timeout_s
            task |= {
                "model": self._settings.gepa.claude_model,
                "max_turns": self._settings.gepa.claude_max_turns,
                "timeout_s": timeout,
            }
        else:
            spec = dict(
                command=[program_image.PYTHON_IN_IMAGE, "-I", "-S", "-B", program_image.AGENT_IN_IMAGE],
                tmpfs={"/tmp": "rw,nosuid,nodev,size=16m"},
                mem_limit="256m",
                memswap_limit="256m",
                pids_limit=32,
                volumes={str(worktree): {"bind": "/workspace", "mode": "ro"}},
                environment=self._environment,
            )
            timeout = AGENT_TIMEOUT_S - 30
            task["timeout_s"] = timeout
        return self._run(request, spec, task, timeout + 30, progress)

    def _claude_container(self, worktree: Path, progress: Callable[[str], None]) -> dict:
        if not self._settings.gepa.anthropic_api_key.get_secret_value() or not self._claude_url:
            raise failed(
                "the claude_agent_sdk coding backend needs GENESIS_GEPA_ANTHROPIC_API_KEY (the egress gateway "
                "adds it to the agent's requests; it never enters the container)"
            )
        try:
            env_dir = gepa_envs.ensure_environment(
                Path(self._settings.gepa.envs_dir), [], self._settings.gepa.claude_sdk_requirement, progress
            )
        except gepa_envs.RequirementsRejected as exc:
            raise failed(
                f"the Claude Agent SDK ({self._settings.gepa.claude_sdk_requirement}) could not be installed "
                f"into the coder environment: {exc}"
            ) from None
        memory = self._settings.gepa.claude_memory
        return dict(
            command=[program_image.PYTHON_IN_IMAGE, "-s", "-B", program_image.CLAUDE_AGENT_IN_IMAGE],
            tmpfs={"/tmp": "rw,nosuid,nodev,size=512m"},
            mem_limit=memory,
            memswap_limit=memory,
            pids_limit=256,
            volumes={
                str(worktree): {"bind": "/workspace", "mode": "ro"},
                str(env_dir): {"bind": program_image.ENV_IN_IMAGE, "mode": "ro"},
            },
            environment={**self._proxy_env, **CLAUDE_ENVIRONMENT, "ANTHROPIC_BASE_URL": self._claude_url},
        )

    def _run(
        self, request: StepRequest, spec: dict, task: dict, timeout: float, progress: Callable[[str], None]
    ) -> str:
        container = self._client.containers.create(
            program_image.ensure(self._client),
            name=f"genesis-coder-{request.client_id}-{secrets.token_hex(3)}",
            stdin_open=True,
            tty=False,
            network=self._settings.gepa.network,
            read_only=True,
            user="10001:10001",
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            nano_cpus=int(1e9),
            labels={"genesis.role": "gepa-coding-agent", "genesis.gepa.client": request.client_id},
            **spec,
        )
        try:
            sock = attached_socket(container, {"stdin": 1, "stream": 1})
            container.start()
            sock.sendall(json.dumps(task).encode() + b"\n")
            sock.close()
            exit_code = self._wait(container, timeout, progress)
            stdout = container.logs(stdout=True, stderr=False).decode(errors="replace").strip()
            stderr = container.logs(stdout=False, stderr=True).decode(errors="replace").strip()
        finally:
            try:
                container.remove(force=True)
            except (APIError, NotFound):
                pass
        try:
            reply = json.loads(stdout.splitlines()[-1])
        except (ValueError, IndexError):
            raise ApplicationError(
                f"the coding agent exited ({exit_code}) without an answer: {stderr[-800:]}"
            ) from None
        if not reply.get("ok"):
            raise failed(f"the coding agent failed: {reply.get('error')}")
        return reply["patch"]

    @staticmethod
    def _wait(container, timeout: float, progress: Callable[[str], None]) -> int | None:
        started = time.monotonic()
        while True:
            try:
                return container.wait(timeout=WAIT_SLICE_S).get("StatusCode")
            except (ReadTimeout, RequestsConnectionError):
                elapsed = time.monotonic() - started
                if elapsed > timeout:
                    container.kill()
                    raise failed(f"the coding agent did not finish within {timeout:.0f} s") from None
                progress(f"coding agent: {elapsed:.0f}s")
