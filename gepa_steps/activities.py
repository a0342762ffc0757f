"""Activities of GEPA optimisation steps: clone, mutate (in a git worktree), run the program in its
client's sandbox container, record. Git runs here through its CLI (gepa_steps/gitops.py); the
repository's own code runs only in containers (gepa_steps/hosts.py, gepa_steps/coder.py).

Verdicts on the input (an unknown parent, a missing program.json, a candidate naming unknown
components, a patch that does not apply, a program that raises) are non-retryable
ApplicationErrors with a message for the caller; infrastructure errors are retried."""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import docker
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import async_sessionmaker
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import names
from genesis import netpolicy
from genesis.config import Settings
from genesis.db.models import GepaClient, Program
from gepa_steps import crossover, egress, envs as gepa_envs, gitops, image as program_image, programs
from gepa_steps.coder import CodingAgent
from gepa_steps.dto import (
    STEP_FAILED,
    ConnectRequest,
    ConnectResult,
    MutationOutcome,
    ProgramRun,
    ProgramStatus,
    ProgramStatusUpdate,
    StepRequest,
)
from gepa_steps.github_app import GitHubApp, GitHubAppError, NotOnGitHub
from gepa_steps.hosts import HostLimits, ProgramHostDied, ProgramHosts, remove_exited_hosts


def storable(value):
    """Program outputs as Postgres can hold them: NUL characters (which JSONB and text refuse)
    become U+FFFD; a program's output must not be able to wedge its step's record."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [storable(v) for v in value]
    return value


def rejected(message: str) -> ApplicationError:
    return ApplicationError(message, type=STEP_FAILED, non_retryable=True)


class GepaActivities:
    def __init__(self, settings: Settings, sessions: async_sessionmaker):
        self._settings, self._sessions = settings, sessions
        self._workspace = Path(settings.gepa.workspace_dir)
        self._policy = netpolicy.NetPolicy.from_settings(settings)
        self._clone_limits = gitops.CloneLimits(
            settings.gepa.clone_connect_timeout_s, settings.gepa.clone_stall_s, settings.gepa.clone_timeout_s
        )
        self._docker = docker.from_env(timeout=120)
        program_image.ensure(self._docker)
        remove_exited_hosts(self._docker)
        gateway_ip = egress.ensure_network(self._docker, settings.gepa.network)
        # Route names carry a random part only the intended containers are told: a program cannot
        # spend the coding model's key, nor the coding agent the programs' LM.
        lm_route, coder_route = f"lm-{secrets.token_hex(12)}", f"coder-{secrets.token_hex(12)}"
        claude_route = f"claude-{secrets.token_hex(12)}"  # the Claude Agent SDK backend's Anthropic API
        self.gateway = egress.EgressGateway(
            gateway_ip,
            settings.gepa.gateway_port,
            routes={
                lm_route: egress.Route(settings.gepa.lm_base_url, settings.gepa.lm_api_key.get_secret_value()),
                coder_route: egress.Route(settings.gepa.coder_base_url, settings.gepa.coder_api_key.get_secret_value()),
                claude_route: egress.Route(
                    settings.gepa.anthropic_base_url,
                    settings.gepa.anthropic_api_key.get_secret_value(),
                    key_header="x-api-key",
                ),
            },
            allow=egress.parse_allow_list(settings.gepa.egress_allow),
            policy=self._policy,
        ).start()
        if settings.gepa.enforce_egress:
            egress.open_host_port(self._docker, settings.gepa.network, self.gateway.port)
            egress.prune_stale_ports(gateway_ip)
        gateway_url = f"http://{gateway_ip}:{self.gateway.port}"
        proxy = {
            "HTTP_PROXY": gateway_url,
            "HTTPS_PROXY": gateway_url,
            "http_proxy": gateway_url,
            "https_proxy": gateway_url,
            "NO_PROXY": gateway_ip,
            "no_proxy": gateway_ip,
        }
        self._hosts = ProgramHosts(
            self._docker,
            settings.gepa.network,
            {
                "GENESIS_LM_MODEL": settings.gepa.lm_model,
                "GENESIS_LM_BASE_URL": f"{gateway_url}/{lm_route}",
                "LITELLM_LOCAL_MODEL_COST_MAP": "true",
                **proxy,
            },
            HostLimits(settings.gepa.runner_memory, settings.gepa.runner_pids_limit, settings.gepa.runner_cpus),
            idle_s=settings.gepa.runner_idle_s,
            gateway=self.gateway,
        )
        self._coder = CodingAgent(
            self._docker, settings, f"{gateway_url}/{coder_route}", proxy, claude_url=f"{gateway_url}/{claude_route}"
        )
        self._github = GitHubApp(settings)

    def close(self) -> None:
        self._hosts.close()
        self.gateway.close()
        if self._settings.gepa.enforce_egress:
            egress.close_host_port(self.gateway.port)

    # --- connect-git -------------------------------------------------------------------------

    @activity.defn(name=names.GEPA_CLONE_REPOSITORY)
    def clone_repository(self, request: ConnectRequest) -> ConnectResult:
        """The one clone of a client (an earlier attempt's partial clone is removed first)."""
        dirs = programs.ClientDirs(self._workspace, request.client_id)
        shutil.rmtree(dirs.root, ignore_errors=True)
        config, secret = {}, None
        if request.installation_id is not None:
            try:
                secret = self._github.repository_token(
                    request.installation_id, self._github.repository(request.repo_url)
                )
            except NotOnGitHub as exc:
                raise rejected(str(exc)) from None
            except GitHubAppError as exc:  # its code reaches the API's answer (ConnectResult.error_code)
                raise ApplicationError(str(exc), type=exc.code, non_retryable=True) from None
            config = GitHubApp.git_auth_config(secret, request.repo_url)
        try:
            gitops.clone(
                request.repo_url,
                dirs.repo,
                config=config,
                redact=secret,
                pin=self._checked_repository(request.repo_url),
                limits=self._clone_limits,
            )
            dirs.worktrees.mkdir(parents=True, exist_ok=True)
            dirs.egress_file.write_text(json.dumps(request.egress_allow))
            return ConnectResult(
                client_id=request.client_id,
                default_branch=gitops.default_branch(dirs.repo),
                head_commit=gitops.head_commit(dirs.repo),
            )
        except gitops.GitError as exc:
            shutil.rmtree(dirs.root, ignore_errors=True)
            activity.logger.warning(
                "clone of %s for %s failed: %s", request.repo_url, request.client_id, getattr(exc, "detail", exc)
            )
            raise rejected(f"cloning {request.repo_url} failed: {exc}") from None

    def _checked_repository(self, url: str) -> str | None:
        """For a network URL: its host resolved and checked here, where git connects from (the
        API checked it too, but an answer may change); the libcurl entry pinning git to it."""
        if urlsplit(url).scheme not in ("http", "https"):
            return None  # a local path, checked against GENESIS_GEPA_LOCAL_REPO_ROOTS by the API
        try:
            return netpolicy.check(*netpolicy.url_host_port(url), self._policy).curl_resolve()
        except netpolicy.Refused as exc:
            raise rejected(f"cloning {url} refused: {exc}") from None

    @activity.defn(name=names.GEPA_RECORD_CLIENT)
    async def record_client(self, client_id: str, status: str, default_branch: str | None, error: str | None) -> None:
        async with self._sessions() as session:
            await session.execute(
                update(GepaClient)
                .where(GepaClient.client_id == client_id)
                .values(status=status, default_branch=default_branch, error=error)
            )
            await session.commit()

    # --- execute_step ------------------------------------------------------------------------

    @activity.defn(name=names.GEPA_START_PROGRAM)
    async def start_program(self, request: StepRequest) -> str:
        """Mark the program in progress; return the git ref its branch starts from (the parent
        program's branch, or the client's default branch for a step without a parent)."""
        async with self._sessions() as session:
            client = await session.get(GepaClient, request.client_id)
            if client is None or client.status != "connected":
                raise rejected(
                    f"unknown client_id {request.client_id!r}: connect the repository with POST /connect-git first"
                )
            start = client.default_branch or "HEAD"
            for field, parent_id in (
                ("parent_program_id", request.parent_program_id),
                ("second_parent_program_id", request.second_parent_program_id),
            ):
                if parent_id is None:
                    continue
                parent = await session.get(Program, parent_id)
                if parent is None or parent.client_id != request.client_id:
                    raise rejected(f"unknown {field} {parent_id!r} for this client")
                if parent.status != ProgramStatus.completed.value:
                    raise rejected(f"parent program {parent_id!r} is {parent.status}, not completed")
                if field == "parent_program_id":
                    start = parent.branch_name
            await session.execute(
                update(Program)
                .where(Program.program_id == request.program_id)
                .values(status=ProgramStatus.in_progress.value, updated_at=datetime.now(UTC))
            )
            await session.commit()
        return start

    @activity.defn(name=names.GEPA_MUTATE)
    def mutate(self, request: StepRequest, start: str) -> MutationOutcome:
        """A worktree on ``program_<id>`` from ``start``, the mutation applied and committed."""
        dirs = programs.ClientDirs(self._workspace, request.client_id)
        worktree = dirs.worktree(request.program_id)
        branch = programs.branch_name(request.program_id)
        try:
            gitops.add_worktree(dirs.repo, worktree, branch, start)
        except gitops.GitError as exc:
            raise rejected(f"creating the worktree from {start!r} failed: {exc}") from None
        program_path = worktree / request.program_json_path
        changed: list[str] = []
        merge = None
        if request.mutation_type == "merge":
            merge = self._merge(request, worktree, start)
            changed = [request.program_json_path]
        if request.mutation_type == "code":
            activity.heartbeat("coding agent")
            patch = self._coder.propose_patch(request, worktree, progress=activity.heartbeat)
            try:
                changed = gitops.apply_patch(worktree, patch)
            except gitops.GitError as exc:
                raise rejected(f"the coding agent's patch does not apply: {exc}") from None
        program_json = self._read_program_json(program_path, request.program_json_path, branch)
        if request.mutation_type == "prompt":
            try:
                program_json = programs.apply_candidate(program_json, request.candidate)
            except programs.CandidateRejected as exc:
                raise rejected(str(exc)) from None
            program_path.write_text(json.dumps(program_json, indent=2, ensure_ascii=False) + "\n")
            changed = [request.program_json_path]
        parent = request.parent_program_id or start
        parents = f"parents {parent} and {request.second_parent_program_id}" if merge else f"parent {parent}"
        commit = gitops.commit_all(worktree, f"GEPA {request.mutation_type} mutation {request.program_id} ({parents})")
        return MutationOutcome(
            branch_name=branch,
            worktree=str(worktree),
            commit=commit,
            program_json=program_json,
            changed_files=changed,
            merge=merge,
        )

    def _merge(self, request: StepRequest, worktree: Path, start: str) -> dict:
        """Crossover: the second parent's branch merged into the worktree (on the first's), code by
        git's three-way merge, ``program.json`` component by component (gepa_steps/crossover.py).
        Left staged for the step's commit, which records both parents."""
        assert request.second_parent_program_id is not None  # the API requires it for a merge
        other = programs.branch_name(request.second_parent_program_id)
        path = request.program_json_path
        base = gitops.merge_base(worktree, start, other)
        if base is None:
            raise rejected(f"{start} and {other} share no history: there is nothing to merge them from")
        first, second = (
            self._parse_program_json(gitops.file_at(worktree, ref, path), path, ref) for ref in (start, other)
        )
        try:
            gitops.start_merge(worktree, other, path)
        except gitops.MergeConflict as exc:
            raise rejected(
                f"the parents' code cannot be merged: {exc} (crossover merges code only where the "
                "parents changed different lines)"
            ) from None
        ancestor = gitops.file_at(worktree, base, path)
        try:
            base_json = json.loads(ancestor) if ancestor is not None else {}
        except ValueError:
            base_json = {}  # an unreadable ancestor: every difference counts as a change
        merged, report = crossover.merge_program_json(base_json if isinstance(base_json, dict) else {}, first, second)
        (worktree / path).write_text(json.dumps(merged, indent=2, ensure_ascii=False) + "\n")
        return {"base_commit": base, **report.to_data()}

    @classmethod
    def _read_program_json(cls, path: Path, relative: str, branch: str) -> dict:
        try:
            text = path.read_text() if path.is_file() else None
        except UnicodeDecodeError as exc:
            raise rejected(f"{relative} is not valid JSON: {exc}") from None
        return cls._parse_program_json(text, relative, branch)

    @staticmethod
    def _parse_program_json(text: str | None, relative: str, branch: str) -> dict:
        if text is None:
            raise rejected(
                f"{relative} does not exist on branch {branch} (program_json_path is relative to the repository root)"
            )
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise rejected(f"{relative} is not valid JSON on branch {branch}: {exc}") from None
        if not isinstance(data, dict):
            raise rejected(f"{relative} is not a JSON object (a saved DSPy program is)")
        return data

    @activity.defn(name=names.GEPA_RUN_PROGRAM)
    def run_program(self, request: StepRequest) -> ProgramRun:
        """Run the program of the step's worktree on ``test_examples`` in the client's container."""
        dirs = programs.ClientDirs(self._workspace, request.client_id)
        worktree = dirs.worktree(request.program_id)
        try:
            requirements = gepa_envs.requirements_of(worktree)
            env_dir = gepa_envs.ensure_environment(
                Path(self._settings.gepa.envs_dir),
                requirements,
                self._settings.gepa.dspy_requirement,
                progress=activity.heartbeat,
            )
        except gepa_envs.RequirementsRejected as exc:
            raise rejected(str(exc)) from None
        activity.heartbeat("program host")
        started = time.monotonic()
        host = self._hosts.host_for(
            request.client_id,
            dirs.worktrees,
            env_dir,
            waiting=lambda: activity.heartbeat("program host"),
            egress_allow=egress.parse_allow_list(",".join(self._client_egress(dirs))),
        )
        try:
            reply = host.run(
                {
                    "op": "run",
                    "worktree": f"{program_image.WORKTREES_IN_IMAGE}/{request.program_id}",
                    "program_json_path": request.program_json_path,
                    "entry_point": request.entry_point,
                    "examples": request.test_examples,
                    "capture_traces": request.capture_traces,
                    "timeout_s": self._settings.gepa.run_timeout_s,
                },
                timeout=self._settings.gepa.run_timeout_s + 30,
                waiting=lambda: activity.heartbeat("running"),
            )
        except ProgramHostDied as exc:
            raise ApplicationError(f"the program host failed: {exc}") from None  # retried
        duration_ms = round((time.monotonic() - started) * 1000, 1)
        if not reply.get("ok"):
            raise rejected(f"running {request.entry_point} failed: {reply.get('error')}")
        return ProgramRun(
            ok=True,
            pipeline_outputs=reply.get("pipeline_outputs") or [],
            traces=reply.get("traces"),
            duration_ms=duration_ms,
        )

    @staticmethod
    def _client_egress(dirs: programs.ClientDirs) -> list[str]:
        return json.loads(dirs.egress_file.read_text()) if dirs.egress_file.exists() else []

    @activity.defn(name=names.GEPA_FINISH_PROGRAM)
    async def finish_program(self, change: ProgramStatusUpdate) -> None:
        """Record the step's end, then apply the worktree policy: the worktree goes (unless
        gepa_keep_worktrees), the branch stays for a completed program and goes for a failed one."""
        values: dict = {"status": change.status.value, "updated_at": datetime.now(UTC)}
        if change.program_json is not None:
            values["program_json"] = storable(change.program_json)
        if change.result is not None:
            values["result"] = storable(change.result.model_dump())
            values["error"] = storable(change.result.error)
        async with self._sessions() as session:
            await session.execute(update(Program).where(Program.program_id == change.program_id).values(**values))
            await session.commit()
            client_id = await session.scalar(select(Program.client_id).where(Program.program_id == change.program_id))
        if client_id is None:
            return
        dirs = programs.ClientDirs(self._workspace, client_id)
        if not dirs.repo.exists():
            return
        failed = change.status == ProgramStatus.failed
        if failed or not self._settings.gepa.keep_worktrees:
            await asyncio.to_thread(gitops.remove_worktree, dirs.repo, dirs.worktree(change.program_id))
        if failed:
            await asyncio.to_thread(gitops.delete_branch, dirs.repo, programs.branch_name(change.program_id))
