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
    """Every setting of every Genesis process, read from ``GENESIS_<NAME>`` environment variables
    (or a ``.env`` file). ``docs/configuration.md`` is generated from the descriptions below
    (``python -m genesis.config_docs``)."""

    model_config = SettingsConfigDict(env_prefix="GENESIS_", env_file=".env", extra="ignore")

    # Services.
    database_url: str = Field(
        default="postgresql+asyncpg://genesis:genesis@127.0.0.1:5432/genesis",
        description="Postgres, the system of record (SQLAlchemy URL with the asyncpg driver).")
    redis_url: str = Field(
        default="redis://127.0.0.1:6379/0", description="Redis: hot, expiring state and pub/sub channels.")
    temporal_address: str = Field(default="127.0.0.1:7233", description="Temporal frontend (gRPC host:port).")
    temporal_namespace: str = Field(default="default", description="Temporal namespace of every Genesis workflow.")
    temporal_ui_url: str = Field(
        default="http://127.0.0.1:8233",
        description="Temporal Web UI; `make run` prints it and the world viewer links each mutation's workflow there.")
    task_queue: str = Field(
        default="genesis",
        description="The worker's task queue; LLM calls use `<task_queue>-llm` and GEPA steps `<task_queue>-gepa`.")

    # The API process.
    api_host: str = Field(default="127.0.0.1", description="Address the API binds to.")
    api_port: int = Field(default=8000, description="Port the API binds to.")
    trusted_proxies: str = Field(
        default="",
        description="Reverse proxies whose X-Forwarded-For / X-Forwarded-Proto the API believes, as comma-separated "
                    "IPs or CIDRs (e.g. `10.0.0.5,172.18.0.0/16`). Empty: nobody's; the client is the connection's "
                    "peer. Applied by `python -m api`.")
    state_dir: Path = Field(
        default=PROJECT_ROOT / ".state",
        description="Local state: the Temporal dev server's SQLite file, service logs, generated secrets.")

    # Sandbox test of a new mutation (a fresh trait-host container).
    sandbox_image: str = Field(
        default="",
        description="Trait-host image of the sandbox test and the live engine. Empty: the image built offline "
                    "from this machine's CPython 3.11 (`python -m sandbox.image name` prints its tag).")
    sandbox_ticks: int = Field(default=50, description="Ticks of the seeded test world a new trait runs in its sandbox test.")
    sandbox_seed: int = Field(default=1234, description="Seed of the sandbox test world.")
    sandbox_call_timeout_ms: float = Field(
        default=5.0, description="CPU time one `execute` call may use (SANDBOX_TIMEOUT in the test, a strike live).")
    sandbox_tick_deadline_s: float = Field(
        default=2.0, description="Wall clock one sandbox-test tick may take before the container is killed.")
    sandbox_memory: str = Field(
        default="128m", description="Memory limit of a sandbox test's container (supervisor, zygote, one worker).")
    sandbox_pids_limit: int = Field(default=16, description="Process limit of a sandbox test's container.")
    sandbox_cpus: float = Field(default=1.0, description="CPU limit of a sandbox test's container.")
    trait_tick_cpu_ms: float = Field(
        default=100.0, gt=0,
        description="CPU one agent's traits may use in one tick before the host kills their process "
                    "(the trait that was running is blamed).")
    trait_worker_memory_mb: int = Field(
        default=128, ge=32,
        description="Address space of one agent's process in a trait host; an allocation beyond it is a "
                    "MemoryError in the trait.")
    sandbox_memory_horizon_ticks: int = Field(
        default=216_000, ge=1,
        description="A sandbox test fails with SANDBOX_MEMORY when its trait's memory growth would pass "
                    "`trait_worker_memory_mb` within this many live ticks (an hour at 60 ticks/s).")
    sandbox_min_fps: float = Field(
        default=30.0, description="Projected world ticks per second with the trait below which the test fails (SANDBOX_FPS_DROP).")
    sandbox_concurrency: int = Field(default=8, ge=1, description="Sandbox tests one worker runs at once.")
    sandbox_pool_size: int = Field(
        default=2, ge=0, description="Warm trait-host containers a worker keeps ready for sandbox tests (0: none).")

    # World engine (python -m engine).
    engine_tick_rate: float = Field(
        default=60.0, gt=0, description="World ticks per second; a tick's budget is its inverse.")
    engine_seed: int = Field(default=42, description="Seed of the live world.")
    engine_snapshot_interval: int = Field(default=300, ge=1, description="Ticks between two WorldSnapshots.")
    engine_postgres_every: int = Field(
        default=30, ge=1, description="Every Nth WorldSnapshot is also written to the Postgres table `world_snapshots`.")
    engine_frame_interval: int = Field(default=2, ge=1, description="Ticks between two viewer frames on `/ws/world`.")
    engine_entities_limit: int = Field(
        default=500, ge=1, description="Entities written to `engine:entities` (what `GET /api/world/entities` reads).")
    engine_world_width: float = Field(default=800.0, gt=0, description="Width of the live world.")
    engine_world_height: float = Field(default=600.0, gt=0, description="Height of the live world.")
    engine_initial_population: int = Field(default=200, ge=0, description="Molbots at the start.")
    engine_min_population: int = Field(
        default=20, ge=0, description="Population floor: below it the engine spawns Molbots.")
    engine_max_population: int = Field(default=1000, ge=1, description="Population cap: at it births stop.")
    engine_initial_resources: int = Field(default=150, ge=0, description="Food at the start.")
    engine_max_resources: int = Field(default=300, ge=0, description="Food cap.")
    engine_resource_spawn_chance: float = Field(
        default=0.8, ge=0, le=1, description="Chance per tick that one piece of food appears.")
    engine_trait_gain_chance: float = Field(
        default=0.25, ge=0, le=1, description="Chance that a newborn gains one active trait it does not carry yet.")

    # Life after the sandbox: activation, observation, rollback.
    workflow_start_sweep_s: float = Field(
        default=5.0, gt=0,
        description="How often each API process looks for accepted proposals whose workflow has not started.")
    workflow_start_stale_s: float = Field(
        default=10.0, gt=0,
        description="A proposal still `queued` after this long has its workflow started by the sweep.")
    workflow_start_concurrency: int = Field(
        default=4, ge=1, description="Workflow starts in flight at once per API process.")
    activate_mutations: bool = Field(
        default=True, description="Activate mutations that pass their sandbox test; false: they end at `sandbox_ok`.")
    mutations_dir: Path = Field(
        default=PROJECT_ROOT / "mutations",
        description="Where activation writes audit copies `trait_{name}_v{N}.py` (nothing imports them).")
    observation_window_ticks: int = Field(
        default=300, ge=1, description="World ticks a live trait is observed before its fitness verdict.")
    observation_timeout_s: float = Field(
        default=900.0, gt=0,
        description="How long a workflow waits for its observation window; then the trait is kept without a verdict.")
    rollback_threshold: float = Field(
        default=-0.10, description="Fitness delta at or below which a live trait is rolled back.")
    engine_trait_deadline_ms: float = Field(
        default=200.0,
        description="Wall clock the live trait host has for one tick before it is replaced (no trait is blamed).")
    engine_trait_host_memory: str = Field(
        default="512m", description="Memory limit of the live trait host's container (a process per agent with live traits).")
    engine_trait_host_pids: int = Field(default=256, ge=16, description="Process limit of the live trait host's container.")
    engine_trait_host_cpus: float = Field(default=2.0, gt=0, description="CPU limit of the live trait host's container.")
    engine_quarantine_report_retry_s: float = Field(
        default=3600.0, gt=0,
        description="How long the engine keeps retrying, in the background, to record a quarantined trait and have "
                    "its mutation rolled back while Postgres or Temporal is unreachable.")

    # Agents' identity and the propose path.
    auth: Literal["required", "open"] = Field(
        default="required",
        description="`required`: write endpoints need an agent's X-API-Key and operator endpoints an X-Operator-Key. "
                    "`open`: keyless proposals (`agent_id` in the body) and keyless operator endpoints, for local "
                    "experiments only (the API logs a warning at start); a key that is sent is still checked.")
    api_key_pepper: SecretStr = Field(
        default=SecretStr(""),
        description="Server secret of the stored API-key hashes (HMAC-SHA256). Empty: a random one is created once "
                    "in `<state_dir>/api-key-pepper`. Set it when several API hosts share a database; changing it "
                    "invalidates every key.")
    trait_exists_policy: Literal["reject", "replace"] = Field(
        default="reject",
        description="A proposal without `replaces` whose trait_name is live. `reject`: 409 TRAIT_EXISTS, and "
                    "activation refuses (VERSION_CONFLICT) if a version went live meanwhile. `replace`: it becomes "
                    "the next version, replacing whatever is live at activation (the owner is still checked).")
    ratelimit_active_per_agent: int = Field(
        default=5, ge=1, description="Mutations of one agent not yet in a terminal state.")
    ratelimit_proposals_per_ip_minute: int = Field(default=10, ge=1, description="Proposals per client IP per minute.")
    ratelimit_proposals_per_agent_hour: int = Field(default=30, ge=1, description="Proposals per agent per hour.")
    ratelimit_active_slot_ttl_s: int = Field(
        default=3 * 3600, ge=60,
        description="An active-mutation slot never released (its workflow was terminated by hand) lapses after this.")
    ratelimit_active_retry_after_s: int = Field(
        default=30, ge=1, description="`retry_after_sec` answered when the active-mutations limit is hit.")

    # Telemetry stream (WS /api/agents/telemetry): one Redis subscription per API process.
    telemetry_client_queue: int = Field(
        default=256, ge=1,
        description="Events a telemetry client may fall behind before it is disconnected (close 1013 SLOW_CONSUMER).")
    telemetry_reconnect_max_s: float = Field(
        default=5.0, gt=0, description="Longest pause between the stream hub's Redis reconnects (backoff with jitter).")

    batch_max_items: int = Field(
        default=10, ge=1, le=100, description="Proposals in one `POST /api/mutations/propose/batch`.")

    outbound_private_allow: str = Field(
        default="",
        description="Private destinations the server may still connect to for clients (clones, `egress_allow`, "
                    "webhooks): `host:port`, `[v6]:port`, CIDR networks or bare addresses (every port), comma "
                    "separated. Everything else must resolve to global addresses only.")

    @field_validator("outbound_private_allow")
    @classmethod
    def _outbound_private_allow(cls, value: str) -> str:
        netpolicy.AllowList.parse(value)  # ValueError names the bad entry
        return value

    # Webhooks (a proposal's notify_url).
    webhook_secret: SecretStr = Field(
        default=SecretStr(""),
        description="Server secret every agent's webhook signing secret derives from; API and worker must share it. "
                    "Empty: a random one is created once in `<state_dir>/webhook-secret`.")
    webhook_allow_private: bool = Field(
        default=False,
        description="Let webhook receivers be on any address (loopback, private, ...); false: global addresses "
                    "only, or those `outbound_private_allow` covers.")
    webhook_timeout_s: float = Field(default=10.0, gt=0, description="One webhook delivery attempt.")
    webhook_retry_window_s: float = Field(
        default=3600.0, gt=0, description="A status change's webhook is retried this long, then dropped.")
    webhook_max_retry_interval_s: float = Field(
        default=60.0, gt=0, description="Longest pause between two delivery attempts.")

    # Tasks for external agents (TaskWorkflow) and claims on them.
    task_ttl_critical_s: float = Field(default=900.0, gt=0, description="Time to live of a `critical` task.")
    task_ttl_high_s: float = Field(default=600.0, gt=0, description="Time to live of a `high` task.")
    task_ttl_low_s: float = Field(
        default=300.0, gt=0, description="Time to live of a `low` or `periodic_improvement` task.")
    task_claim_lease_s: float = Field(
        default=120.0, gt=0,
        description="A claim lapses unless its agent proposes a mutation for the task within this long; each such "
                    "proposal renews it (never past the task's expiry).")

    # The Watcher (python -m evolution).
    watcher_cooldown_s: float = Field(
        default=300.0, ge=0,
        description="Seconds before the Watcher triggers again for the same anomaly type (`critical` ignores it).")
    watcher_trigger_limit: int = Field(
        default=5, ge=1, description="Circuit breaker: more triggers than this within the window pause the Watcher.")
    watcher_trigger_window_s: int = Field(default=60, ge=1, description="Circuit breaker: the window, in seconds.")
    watcher_pause_s: int = Field(default=300, ge=1, description="Circuit breaker: how long the Watcher pauses.")
    watcher_report_ttl_s: int = Field(default=600, ge=1, description="Lifetime of a WorldReport `evo:trigger:{id}`.")
    forced_trigger_limit: int = Field(
        default=10, ge=1,
        description="Operators' forced triggers (`POST /api/evolution/trigger`) per window; over it 429 "
                    "FORCED_TRIGGER_LIMIT (they are not held by the Watcher's circuit breaker).")
    forced_trigger_window_s: int = Field(default=600, ge=1, description="The window of `forced_trigger_limit`, in seconds.")

    # Evolution cycles: Architect and Coder LLM agents.
    evolution_cycles_enabled: bool = Field(
        default=True, description="The Watcher starts an evolution cycle for each trigger.")
    llm_provider: Literal["ollama", "openai", "anthropic", "off"] = Field(
        default="ollama",
        description="LLM of the evolution cycles: `ollama` (/api/generate), `openai` (any OpenAI-compatible "
                    "/v1/chat/completions), `anthropic` (/v1/messages) or `off` (cycles end at once).")
    llm_url: str = Field(default="", description="LLM server; empty: the provider's default.")
    llm_model: str = Field(default="", description="LLM model; empty: the provider's default.")
    llm_api_key: SecretStr = Field(
        default=SecretStr(""), description="LLM key: `Authorization: Bearer` (openai) or `x-api-key` (anthropic).")
    llm_timeout_s: float = Field(default=60.0, gt=0, description="One HTTP request to the LLM.")
    llm_attempts: int = Field(default=3, ge=1, description="Attempts per LLM step while the LLM is unreachable.")
    llm_concurrency: int = Field(
        default=4, ge=1, description="LLM calls one worker makes at once (task queue `<task_queue>-llm`).")
    llm_max_tokens: int = Field(default=1024, ge=16, description="Most tokens one LLM answer may have.")
    llm_temperature: float = Field(default=0.7, ge=0, le=2, description="Sampling temperature of the LLM.")
    llm_cost_in_per_mtok: float = Field(
        default=0.0, ge=0, description="USD per million input tokens, for a cycle's `estimated_cost_usd` (0: a local model).")
    llm_cost_out_per_mtok: float = Field(
        default=0.0, ge=0, description="USD per million output tokens, for a cycle's `estimated_cost_usd`.")
    schedule_min_interval_s: float = Field(
        default=60.0, gt=0, description="Shortest interval a periodic improvement schedule may have.")

    # Observability.
    log_format: Literal["console", "json"] = Field(
        default="console", description="`console`: readable lines; `json`: one JSON object per line.")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(default="INFO", description="Lowest level logged.")
    metrics_host: str = Field(
        default="127.0.0.1", description="Address the engine's and the worker's `/metrics` servers listen on.")
    engine_metrics_port: int = Field(
        default=9101, ge=0, le=65535, description="Port of the engine's `/metrics` (0: off; a taken port is logged and skipped).")
    worker_metrics_port: int = Field(
        default=9102, ge=0, le=65535, description="Port of the worker's `/metrics` (0: off; a taken port is logged and skipped).")
    worker_sdk_metrics_port: int = Field(
        default=0, ge=0, le=65535,
        description="Port of the Temporal SDK's own worker metrics (task slots, schedule-to-start latency); 0: off.")

    # GEPA optimisation steps (POST /connect-git, /execute_step, GET /program).
    gepa_workspace_dir: Path = Field(
        default=PROJECT_ROOT / ".state" / "gepa", description="Clones and worktrees, on the worker's host.")
    gepa_envs_dir: Path = Field(
        default=PROJECT_ROOT / ".state" / "gepa-envs",
        description="Program and coder environments, one per requirements hash.")
    gepa_task_queue_suffix: str = Field(
        default="-gepa", description="GEPA workflows and activities poll `<task_queue><suffix>`.")
    gepa_concurrency: int = Field(default=24, ge=1, description="GEPA activities one worker runs at once.")
    gepa_dspy_requirement: str = Field(default="dspy==3.4.1", description="Installed into every program environment.")
    gepa_local_repo_roots: str = Field(
        default="",
        description="Directories (comma separated) local repositories may be cloned from, as a path or file:// URL; "
                    "empty: https:// only.")
    gepa_lm_model: str = Field(
        default="openai/gpt-4o-mini", description="The programs' LM (a litellm model name).")
    gepa_lm_base_url: str = Field(
        default="https://api.openai.com/v1", description="The programs' LM endpoint (OpenAI-compatible).")
    gepa_lm_api_key: SecretStr = Field(
        default=SecretStr(""), description="The programs' LM key; the egress gateway adds it, no container sees it.")
    gepa_coder_model: str = Field(default="gpt-4o-mini", description="Coding model of code mutations (`chat` backend).")
    gepa_coder_base_url: str = Field(
        default="https://api.openai.com/v1", description="Coding model endpoint (OpenAI-compatible chat).")
    gepa_coder_api_key: SecretStr = Field(
        default=SecretStr(""), description="Coding model key; added by the egress gateway.")
    gepa_network: str = Field(
        default="genesis-gepa", description="The internal Docker network of program and coding-agent containers.")
    gepa_gateway_port: int = Field(
        default=0, ge=0, le=65535, description="Port of the worker's egress gateway on that network (0: any free port).")
    gepa_egress_allow: str = Field(
        default="",
        description="`host:port` pairs (comma separated) every GEPA container may reach through the gateway's proxy.")
    gepa_enforce_egress: bool = Field(
        default=True, description="Install the iptables rules of the GEPA network (needs root; false only without iptables).")
    gepa_run_timeout_s: float = Field(default=300.0, gt=0, description="One step's program run; then it is killed.")
    gepa_step_timeout_s: float = Field(
        default=1800.0, gt=0, description="How long a synchronous `execute_step` waits before answering 202.")
    gepa_runner_memory: str = Field(default="2g", description="Memory limit of a client's program-host container.")
    gepa_runner_cpus: float = Field(default=2.0, gt=0, description="CPU limit of a program-host container.")
    gepa_runner_pids_limit: int = Field(default=512, ge=16, description="Process limit of a program-host container.")
    gepa_runner_idle_s: float = Field(default=600.0, gt=0, description="An idle program host is removed after this.")
    gepa_keep_worktrees: bool = Field(
        default=False, description="Keep each step's worktree for debugging (branches of completed steps always stay).")
    gepa_max_body_bytes: int = Field(
        default=1024 * 1024, ge=1024,
        description="Largest `execute_step` body (requests travel through Temporal, whose payloads are limited).")
    gepa_max_examples: int = Field(default=1000, ge=1, description="Most examples in one step.")
    gepa_github_app_id: str = Field(
        default="", description="GitHub App of the operator, for private repositories (`installation_id`).")
    gepa_github_private_key_path: Path | None = Field(default=None, description="The GitHub App's private key (PEM).")
    gepa_github_api_url: str = Field(default="https://api.github.com", description="The GitHub App's REST API.")
    gepa_github_url: str = Field(
        default="https://github.com",
        description="Where the App's repositories live: an `installation_id` is accepted only with a `repo_url` "
                    "there, and its token goes nowhere else.")
    gepa_github_installations: str = Field(
        default="",
        description="Who may use which installation: `<installation_id>=<agent_id>` or `<installation_id>=*`, "
                    "comma separated; empty: nobody.")

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

    gepa_allow_http_repos: bool = Field(
        default=False, description="Also accept http:// repository URLs (a GitHub Enterprise on a trusted network).")
    gepa_clone_connect_timeout_s: float = Field(
        default=10.0, gt=0, description="A clone fails when the repository has not listed its refs within this long.")
    gepa_clone_stall_s: int = Field(
        default=20, ge=1, description="A clone fails when it transfers under 1 KB/s for this long.")
    gepa_clone_timeout_s: float = Field(default=600.0, gt=0, description="A clone fails after this long in all.")
    gepa_coder_backend: Literal["chat", "claude_agent_sdk"] = Field(
        default="chat",
        description="Coding agent of code mutations: `chat` asks the `gepa_coder_*` model for a diff; "
                    "`claude_agent_sdk` runs Claude Code inside the coder container.")
    gepa_anthropic_base_url: str = Field(
        default="https://api.anthropic.com", description="Anthropic API of the `claude_agent_sdk` backend.")
    gepa_anthropic_api_key: SecretStr = Field(
        default=SecretStr(""),
        description="Anthropic key of the `claude_agent_sdk` backend (required by it); added by the egress gateway.")
    gepa_claude_model: str = Field(default="claude-sonnet-4-5", description="Model of the `claude_agent_sdk` backend.")
    gepa_claude_sdk_requirement: str = Field(
        default="claude-agent-sdk==0.2.184", description="Package installed into the coder environment.")
    gepa_claude_max_turns: int = Field(default=30, ge=1, le=200, description="Turn limit of one Claude Code run.")
    gepa_claude_timeout_s: float = Field(default=600.0, gt=0, description="Time limit of one Claude Code run.")
    gepa_claude_memory: str = Field(default="2g", description="Memory limit of the Claude Code coder container.")
    gatekeeper_processes: int = Field(
        default=2, ge=0, le=64,
        description="Helper processes the worker's validation hands proposals to; 0: validate in the worker itself.")

    # How the trait hosts are reached.
    engine_trait_host_socket: bool = Field(
        default=True,
        description="The live trait host talks over a Unix socket in a private directory mounted read-only into "
                    "its container (needs root); false, or without root: `docker attach`.")
    sandbox_host_socket: bool = Field(
        default=True, description="The same private socket for the sandbox test's trait hosts.")

    def gepa_task_queue(self) -> str:
        return self.task_queue + self.gepa_task_queue_suffix

    def task_ttl_s(self, severity: str) -> float:
        """Time to live of a task of this severity (critical 15 min, high 10, low 5)."""
        return {"critical": self.task_ttl_critical_s, "high": self.task_ttl_high_s}.get(severity, self.task_ttl_low_s)


@lru_cache
def get_settings() -> Settings:
    return Settings()
