"""One Settings class for every Genesis process (env prefix ``GENESIS_``)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from genesis import github_grants, netpolicy

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GENESIS_", env_file=".env", extra="ignore")

    database_url: str = "postgresql+asyncpg://genesis:genesis@127.0.0.1:5432/genesis"
    redis_url: str = "redis://127.0.0.1:6379/0"
    temporal_address: str = "127.0.0.1:7233"
    temporal_namespace: str = "default"
    temporal_ui_url: str = "http://127.0.0.1:8233"
    task_queue: str = "genesis"

    api_host: str = "127.0.0.1"
    api_port: int = 8000
    # Reverse proxies whose X-Forwarded-For / X-Forwarded-Proto the API believes (comma separated
    # IPs or CIDRs, e.g. "10.0.0.5,172.18.0.0/16"). Empty (default): none, the client address is
    # the connection's peer. Only `python -m api` applies it (api/__main__.py).
    trusted_proxies: str = ""
    state_dir: Path = PROJECT_ROOT / ".state"

    # Sandbox (trait host container) limits.
    # One image (CPython 3.11) runs traits in the sandbox test and live; empty: built offline.
    sandbox_image: str = ""
    sandbox_ticks: int = 50
    sandbox_seed: int = 1234
    sandbox_call_timeout_ms: float = 5.0
    sandbox_tick_deadline_s: float = 2.0  # wall clock per tick before the container is killed
    sandbox_memory: str = "128m"  # a sandbox test's host: supervisor, zygote and one worker
    sandbox_pids_limit: int = 16
    sandbox_cpus: float = 1.0
    # Each agent's traits run in a process of their own inside the host container; these limits
    # are enforced from outside that process (its supervisor kills it) or by the kernel.
    trait_tick_cpu_ms: float = Field(default=100.0, gt=0)  # CPU of one agent's traits in one tick
    trait_worker_memory_mb: int = Field(default=128, ge=32)  # address space of one agent's process
    # A sandbox test fails (SANDBOX_MEMORY) when its trait's memory grows at a rate that would
    # exceed trait_worker_memory_mb within this many live ticks (an hour at 60 ticks/s).
    sandbox_memory_horizon_ticks: int = Field(default=216_000, ge=1)
    sandbox_min_fps: float = 30.0  # projected world fps with the trait below this -> SANDBOX_FPS_DROP
    sandbox_concurrency: int = Field(default=8, ge=1)
    sandbox_pool_size: int = Field(default=2, ge=0)  # warm trait-host containers kept idle; 0: none

    # World engine (python -m engine).
    engine_tick_rate: float = Field(default=60.0, gt=0)  # ticks per second; budget = 1 / rate
    engine_seed: int = 42
    engine_snapshot_interval: int = Field(default=300, ge=1)  # ticks between WorldSnapshots
    engine_postgres_every: int = Field(default=30, ge=1)  # every Nth snapshot also goes to Postgres
    engine_frame_interval: int = Field(default=2, ge=1)  # ticks between viewer frames
    engine_entities_limit: int = Field(default=500, ge=1)  # entities written to engine:entities
    engine_world_width: float = Field(default=800.0, gt=0)
    engine_world_height: float = Field(default=600.0, gt=0)
    engine_initial_population: int = Field(default=200, ge=0)
    engine_min_population: int = Field(default=20, ge=0)
    engine_max_population: int = Field(default=1000, ge=1)
    engine_initial_resources: int = Field(default=150, ge=0)
    engine_max_resources: int = Field(default=300, ge=0)
    engine_resource_spawn_chance: float = Field(default=0.8, ge=0, le=1)
    engine_trait_gain_chance: float = Field(default=0.25, ge=0, le=1)

    # Life after the sandbox: activation, observation, rollback.
    # Proposals are recorded, answered, then their workflows started (api/workflow_starter.py);
    # a row still queued after workflow_start_stale_s is (re)started by a sweep every _sweep_s.
    workflow_start_sweep_s: float = Field(default=5.0, gt=0)
    workflow_start_stale_s: float = Field(default=10.0, gt=0)
    workflow_start_concurrency: int = Field(default=4, ge=1)  # starts in flight per API process
    activate_mutations: bool = True  # false: a good mutation ends at sandbox_ok
    mutations_dir: Path = PROJECT_ROOT / "mutations"  # audit copies trait_{name}_v{N}.py
    observation_window_ticks: int = Field(default=300, ge=1)
    observation_timeout_s: float = Field(default=900.0, gt=0)
    rollback_threshold: float = -0.10  # fitness delta at or below this rolls the trait back
    engine_trait_deadline_ms: float = 200.0  # wall clock for one tick of the live trait host
    # The live host's container holds a process per agent with live traits.
    engine_trait_host_memory: str = "512m"
    engine_trait_host_pids: int = Field(default=256, ge=16)
    engine_trait_host_cpus: float = Field(default=2.0, gt=0)
    # How long the engine keeps retrying to record a quarantined trait in Postgres and to have its
    # mutation rolled back (Postgres or Temporal down), in the background, before it gives up.
    engine_quarantine_report_retry_s: float = Field(default=3600.0, gt=0)

    # Identity of external agents (external-agents-phase2.md): API keys on write endpoints.
    # required: propose/rollback need X-API-Key and act as the key's agent, and operator endpoints
    # need X-Operator-Key (genesis operator create-key); open: the seed's keyless flow (agent_id
    # from the body) and keyless operator endpoints, for local experiments only (the API says so
    # loudly at start); a key is still honoured (and checked) if sent.
    auth: Literal["required", "open"] = "required"
    # Server secret mixed into every stored key hash (HMAC-SHA256). Empty: a random one is
    # created once in <state_dir>/api-key-pepper. Set it explicitly when several API hosts
    # share one database; changing it invalidates every issued key.
    api_key_pepper: SecretStr = SecretStr("")

    # A proposal without ``replaces`` whose trait_name is already live. reject (default): 409
    # TRAIT_EXISTS at propose time, and activation refuses (VERSION_CONFLICT) if a version went
    # live meanwhile, so nothing is overwritten by accident; replace: the old implicit behaviour
    # (it becomes the next version of the trait, replacing whatever is live at activation, if
    # its owner is the proposer: NOT_TRAIT_OWNER otherwise, at propose time and at activation).
    trait_exists_policy: Literal["reject", "replace"] = "reject"

    # Rate limits of open-mutation-api.md (Redis, atomic). Raise them for load tests.
    ratelimit_active_per_agent: int = Field(default=5, ge=1)  # mutations not yet in a terminal state
    ratelimit_proposals_per_ip_minute: int = Field(default=10, ge=1)
    ratelimit_proposals_per_agent_hour: int = Field(default=30, ge=1)
    # An active slot that was never released (its workflow was terminated from outside) lapses
    # after this long; longer than any mutation's legitimate life (sandbox + observation).
    ratelimit_active_slot_ttl_s: int = Field(default=3 * 3600, ge=60)
    # retry_after_sec when the active limit is hit (a slot frees when a mutation ends).
    ratelimit_active_retry_after_s: int = Field(default=30, ge=1)

    # Telemetry stream WS /api/agents/telemetry (api/telemetry_hub.py): one Redis subscription per
    # API process, fanned out to every socket. A client that falls this many events behind is
    # disconnected (close 1013, reason SLOW_CONSUMER) instead of slowing the others.
    telemetry_client_queue: int = Field(default=256, ge=1)
    telemetry_reconnect_max_s: float = Field(default=5.0, gt=0)  # longest pause between reconnects

    # Batch propose (POST /api/mutations/propose/batch): items per request.
    batch_max_items: int = Field(default=10, ge=1, le=100)

    # Server-side connections to hosts a client names (repository clones, webhook deliveries, the
    # GEPA egress gateway's proxy) go only to global addresses (genesis/netpolicy.py). These
    # private destinations are allowed all the same (comma separated): host:port (a name or an
    # address, [v6]:port), or a network in CIDR form / a bare address (every port).
    outbound_private_allow: str = ""

    @field_validator("outbound_private_allow")
    @classmethod
    def _outbound_private_allow(cls, value: str) -> str:
        netpolicy.AllowList.parse(value)  # ValueError names the bad entry
        return value

    # Webhooks: a proposal's notify_url gets a signed POST on each status change (Standard
    # Webhooks: webhook-id / webhook-timestamp / webhook-signature, HMAC-SHA256). Each agent signs
    # with its own secret, derived from this server secret (pipeline/webhooks.py). Empty: a random
    # one is created once in <state_dir>/webhook-secret; set it when API and worker hosts differ.
    webhook_secret: SecretStr = SecretStr("")
    # false (default): notify_url must resolve to global addresses (or ones outbound_private_allow
    # covers), checked on propose and again on each delivery, which connects to the checked
    # address. true: any address (receivers on a trusted network; the test suite's on loopback).
    webhook_allow_private: bool = False
    webhook_timeout_s: float = Field(default=10.0, gt=0)  # one delivery attempt
    # Deliveries are retried with backoff for this long after the status change, then dropped.
    webhook_retry_window_s: float = Field(default=3600.0, gt=0)
    webhook_max_retry_interval_s: float = Field(default=60.0, gt=0)

    # Tasks for external agents (TaskWorkflow) and claims on them.
    task_ttl_critical_s: float = Field(default=900.0, gt=0)  # 15 min (open-mutation-api.md)
    task_ttl_high_s: float = Field(default=600.0, gt=0)  # 10 min
    task_ttl_low_s: float = Field(default=300.0, gt=0)  # 5 min: low and periodic_improvement
    # A claim is a lease: it lapses unless the claimant proposes a mutation for the task within
    # this many seconds; each such proposal renews it (never past the task's expiry).
    task_claim_lease_s: float = Field(default=120.0, gt=0)

    # Watcher (logic-flow.md 2.3, python -m evolution). The seed names EVOLUTION_COOLDOWN_SEC
    # without a value: 5 minutes between two triggers of the same anomaly type (critical skips it).
    watcher_cooldown_s: float = Field(default=300.0, ge=0)
    # Circuit breaker: more than this many triggers within the window pause the Watcher.
    watcher_trigger_limit: int = Field(default=5, ge=1)
    watcher_trigger_window_s: int = Field(default=60, ge=1)
    watcher_pause_s: int = Field(default=300, ge=1)
    watcher_report_ttl_s: int = Field(default=600, ge=1)  # evo:trigger:{id}
    # Operators' forced triggers (POST /api/evolution/trigger) are limited on their own, not by the
    # Watcher's circuit breaker: at most this many per window, then 429 until the window ends.
    forced_trigger_limit: int = Field(default=10, ge=1)
    forced_trigger_window_s: int = Field(default=600, ge=1)

    # Evolution cycles (issue 5): the Watcher starts an EvolutionCycleWorkflow per trigger
    # (Architect LLM -> Coder LLM -> MutationWorkflow, or a bounded world-parameter change).
    evolution_cycles_enabled: bool = True
    # LLM provider behind evolution/llm.py: ollama (/api/generate), openai (any OpenAI-compatible
    # /v1/chat/completions), anthropic (/v1/messages), or off (no LLM: cycles end at once with a
    # feed message; external agents still mutate the world). Empty url: the provider's default.
    llm_provider: Literal["ollama", "openai", "anthropic", "off"] = "ollama"
    llm_url: str = ""
    llm_model: str = ""
    llm_api_key: SecretStr = SecretStr("")
    llm_timeout_s: float = Field(default=60.0, gt=0)  # one HTTP request to the LLM
    llm_attempts: int = Field(default=3, ge=1)  # per LLM step, through the activity retry policy
    llm_concurrency: int = Field(default=4, ge=1)  # LLM calls one worker makes at once (queue <task_queue>-llm)
    llm_max_tokens: int = Field(default=1024, ge=16)
    llm_temperature: float = Field(default=0.7, ge=0, le=2)
    # Estimated cost (USD per million tokens) recorded per cycle; 0 for a local model.
    llm_cost_in_per_mtok: float = Field(default=0.0, ge=0)
    llm_cost_out_per_mtok: float = Field(default=0.0, ge=0)
    # Periodic improvement schedules (POST /api/schedules): the shortest interval accepted.
    schedule_min_interval_s: float = Field(default=60.0, gt=0)
    # Observability (genesis/logs.py, genesis/metrics.py). Logs: console (readable, `make run`)
    # or json (one object per line with service, logger, level, timestamp and, inside Temporal
    # activities, workflow_id / mutation_id; compose sets json). Prometheus: the API serves
    # GET /metrics on its own port; the engine and the worker have no HTTP server of their own,
    # so each serves /metrics on its port below (0: off). A port already taken is logged and
    # skipped: metrics never stop the world or the pipeline.
    log_format: Literal["console", "json"] = "console"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    metrics_host: str = "127.0.0.1"  # where the engine/worker metrics servers listen (0.0.0.0 in compose)
    engine_metrics_port: int = Field(default=9101, ge=0, le=65535)
    worker_metrics_port: int = Field(default=9102, ge=0, le=65535)
    # The Temporal SDK's own metrics of the worker (task slots, schedule-to-start latency: the
    # signal to add workers), served by the SDK core; 0 (default): off.
    worker_sdk_metrics_port: int = Field(default=0, ge=0, le=65535)
    # GEPA optimisation steps (POST /connect-git, /execute_step, GET /program; README "GEPA
    # optimisation steps"). Clones and worktrees live under gepa_workspace_dir on the worker host
    # (the API reads nothing there); program environments under gepa_envs_dir, one per requirements hash.
    gepa_workspace_dir: Path = PROJECT_ROOT / ".state" / "gepa"
    gepa_envs_dir: Path = PROJECT_ROOT / ".state" / "gepa-envs"
    gepa_task_queue_suffix: str = "-gepa"  # GEPA workflows and activities poll <task_queue><suffix>
    gepa_concurrency: int = Field(default=24, ge=1)  # GEPA activities in flight per worker
    gepa_dspy_requirement: str = "dspy==3.4.1"  # installed into every program environment
    # Local repositories (a path or file:// URL) are cloned only from under these directories
    # (comma separated); empty: only https:// URLs can be connected.
    gepa_local_repo_roots: str = ""
    # The LM the programs call (OpenAI-compatible). Containers reach it only through the egress
    # gateway, which adds the key: no key ever enters a container.
    gepa_lm_model: str = "openai/gpt-4o-mini"
    gepa_lm_base_url: str = "https://api.openai.com/v1"
    gepa_lm_api_key: SecretStr = SecretStr("")
    # The coding model of code mutations (OpenAI-compatible chat; it answers with a unified diff).
    gepa_coder_model: str = "gpt-4o-mini"
    gepa_coder_base_url: str = "https://api.openai.com/v1"
    gepa_coder_api_key: SecretStr = SecretStr("")
    # Egress of GEPA containers: an internal Docker network whose only way out is the worker's
    # gateway on gepa_gateway_port (iptables drops the rest), which forwards the LM/coder routes
    # and proxies the host:port pairs of gepa_egress_allow (comma separated).
    gepa_network: str = "genesis-gepa"
    gepa_gateway_port: int = Field(default=0, ge=0, le=65535)  # 0: any free port
    gepa_egress_allow: str = ""
    gepa_enforce_egress: bool = True  # false: skip the iptables rules (a host without iptables)
    gepa_run_timeout_s: float = Field(default=300.0, gt=0)  # one step's program run
    gepa_step_timeout_s: float = Field(default=1800.0, gt=0)  # a synchronous execute_step waits this long
    gepa_runner_memory: str = "2g"  # per client's program host container
    gepa_runner_cpus: float = Field(default=2.0, gt=0)
    gepa_runner_pids_limit: int = Field(default=512, ge=16)
    gepa_runner_idle_s: float = Field(default=600.0, gt=0)  # an idle program host is removed after this
    gepa_keep_worktrees: bool = False  # false: a step's worktree is removed when it ends (its branch stays)
    # POST /execute_step: the request travels through Temporal (2 MB payloads by default).
    gepa_max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    gepa_max_examples: int = Field(default=1000, ge=1)
    # GitHub App for private repositories (installation_id): tokens are fetched per clone, scoped
    # to the one repository (read-only) and passed to git in a header for that repository's URL
    # only, never stored or logged. gepa_github_url is where the App's repositories live (an
    # installation_id is accepted only with a repo_url there); gepa_github_api_url its REST API.
    gepa_github_app_id: str = ""
    gepa_github_private_key_path: Path | None = None
    gepa_github_api_url: str = "https://api.github.com"
    gepa_github_url: str = "https://github.com"
    # Who may use which installation: <installation_id>=<agent_id> or <installation_id>=*, comma
    # separated (genesis/github_grants.py); empty: nobody.
    gepa_github_installations: str = ""

    @field_validator("gepa_github_url")
    @classmethod
    def _github_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.query or parts.fragment:
            raise ValueError("gepa_github_url must be http(s)://host[:port][/path] without credentials, query or fragment")
        return value.rstrip("/")

    @field_validator("gepa_github_installations")
    @classmethod
    def _github_installations(cls, value: str) -> str:
        github_grants.InstallationGrants.parse(value)  # ValueError names the bad entry
        return value
    # Also accept http:// repository URLs (a GitHub Enterprise on a trusted network, tests).
    gepa_allow_http_repos: bool = False
    # A clone first asks the repository for its refs (git ls-remote): a host that has not
    # answered as a git server within gepa_clone_connect_timeout_s fails the clone. The clone
    # itself then fails when it transfers under 1 KB/s for gepa_clone_stall_s, or after
    # gepa_clone_timeout_s in all.
    gepa_clone_connect_timeout_s: float = Field(default=10.0, gt=0)
    gepa_clone_stall_s: int = Field(default=20, ge=1)
    gepa_clone_timeout_s: float = Field(default=600.0, gt=0)
    # GEPA code mutations' coding agent (README "GEPA optimisation steps"): "chat" asks the
    # OpenAI-compatible gepa_coder_* model for a diff; "claude_agent_sdk" runs Claude Code (the
    # gepa_claude_sdk_requirement package, installed into a coder environment under gepa_envs_dir)
    # in the coder container, reaching gepa_anthropic_base_url through the egress gateway, which
    # adds gepa_anthropic_api_key (required for this backend; it never enters the container).
    gepa_coder_backend: Literal["chat", "claude_agent_sdk"] = "chat"
    gepa_anthropic_base_url: str = "https://api.anthropic.com"
    gepa_anthropic_api_key: SecretStr = SecretStr("")
    gepa_claude_model: str = "claude-sonnet-4-5"
    gepa_claude_sdk_requirement: str = "claude-agent-sdk==0.2.184"
    gepa_claude_max_turns: int = Field(default=30, ge=1, le=200)
    gepa_claude_timeout_s: float = Field(default=600.0, gt=0)  # one agent run, inside the container
    gepa_claude_memory: str = "2g"  # the Claude Code process (a Bun runtime) needs more than the chat agent
    # Gatekeeper process pool (genesis/gatekeeper_pool.py): the worker's validate activity hands
    # proposals to this many helper processes, so validations use every core; 0 validates in the
    # worker process itself.
    gatekeeper_processes: int = Field(default=2, ge=0, le=64)

    # Engine speed (bench/engine.py): the live trait host answers over a Unix socket in a private
    # directory bind-mounted read-only into its container, instead of docker attach (dockerd copies
    # every byte twice: ~1 MB per tick at 5,000 entities). Needs root (to hand the directory to
    # the sandbox uid); otherwise, or when false, docker attach is used.
    engine_trait_host_socket: bool = True
    # The same private socket for the sandbox test's hosts (50 round trips per test: ~1.5 ms each
    # through docker attach, ~0.3 ms over the socket).
    sandbox_host_socket: bool = True

    def gepa_task_queue(self) -> str:
        return self.task_queue + self.gepa_task_queue_suffix

    def task_ttl_s(self, severity: str) -> float:
        """Time to live of a task of this severity (critical 15 min, high 10, low 5)."""
        return {"critical": self.task_ttl_critical_s, "high": self.task_ttl_high_s}.get(severity, self.task_ttl_low_s)


@lru_cache
def get_settings() -> Settings:
    return Settings()
