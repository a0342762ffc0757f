"""The coding-agent step of a GEPA code mutation: the agent (sandbox/coding_agent.py) runs in a
fresh container of the program image with only the step's worktree mounted, read-only, on the
internal egress network; the worker applies the diff it returns (activities/gepa.py)."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import docker
from docker.errors import APIError, NotFound
from temporalio.exceptions import ApplicationError

from genesis.config import Settings
from genesis.gepa_dto import STEP_FAILED, StepRequest
from sandbox import program_image

AGENT_TIMEOUT_S = 600


class CodingAgent:
    def __init__(self, client: docker.DockerClient, settings: Settings, coder_url: str, proxy_env: dict[str, str]):
        self._client, self._settings = client, settings
        self._environment = {"GENESIS_CODER_URL": coder_url, "GENESIS_CODER_MODEL": settings.gepa_coder_model, **proxy_env}

    def propose_patch(self, request: StepRequest, worktree: Path) -> str:
        if not request.change_request:
            raise ApplicationError("a code mutation needs a change_request", type=STEP_FAILED, non_retryable=True)
        container = self._client.containers.create(
            program_image.ensure(self._client),
            command=[program_image.PYTHON_IN_IMAGE, "-I", "-S", "-B", program_image.AGENT_IN_IMAGE],
            name=f"genesis-coder-{request.client_id}-{secrets.token_hex(3)}",
            stdin_open=True, tty=False, network=self._settings.gepa_network, read_only=True,
            tmpfs={"/tmp": "rw,nosuid,nodev,size=16m"},
            volumes={str(worktree): {"bind": "/workspace", "mode": "ro"}},
            user="10001:10001", cap_drop=["ALL"], security_opt=["no-new-privileges"],
            mem_limit="256m", memswap_limit="256m", pids_limit=32, nano_cpus=int(1e9),
            environment=self._environment,
            labels={"genesis.role": "gepa-coding-agent", "genesis.gepa.client": request.client_id},
        )
        try:
            sock = container.attach_socket(params={"stdin": 1, "stream": 1})._sock
            container.start()
            task = {"change_request": request.change_request, "change_location": request.change_location,
                    "timeout_s": AGENT_TIMEOUT_S - 30}
            sock.sendall(json.dumps(task).encode() + b"\n")
            sock.close()
            exit_code = container.wait(timeout=AGENT_TIMEOUT_S).get("StatusCode")
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
            raise ApplicationError(f"the coding agent exited ({exit_code}) without an answer: {stderr[-800:]}") from None
        if not reply.get("ok"):
            raise ApplicationError(f"the coding agent failed: {reply.get('error')}", type=STEP_FAILED, non_retryable=True)
        return reply["patch"]
