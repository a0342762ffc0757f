"""The settings of every Genesis process: one model, a group per room (``settings.sandbox.memory``).

Every setting is read from an environment variable named ``GENESIS_<GROUP>_<NAME>`` (a group's
fields) or ``GENESIS_<NAME>`` (the few that belong to no group), or from a ``.env`` file:
``GENESIS_SANDBOX_MEMORY`` is ``settings.sandbox.memory``. ``docs/configuration.md`` is generated
from the descriptions here (``python -m genesis.config_docs``)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from genesis import github_grants, netpolicy
from genesis.world_config import EngineSettings, JournalSettings, ObservationSettings, RoundSettings, VerdictSettings

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class TemporalSettings(BaseModel):
    """The Temporal server every process talks to."""

    address: str = Field(default="127.0.0.1:7233", description="Temporal frontend (gRPC host:port).")
    namespace: str = Field(default="default", description="Temporal namespace of every Genesis workflow.")
    ui_url: str = Field(
        default="http://127.0.0.1:8233",
        description="Temporal Web UI; `make run` prints it and the world viewer links each mutation's workflow there.",
    )


class ApiSettings(BaseModel):
    """The API process."""

    host: str = Field(default="127.0.0.1", description="Address the API binds to.")
    port: int = Field(default=8000, description="Port the API binds to.")
    key_pepper: SecretStr = Field(
        default=SecretStr(""),
        description="Server secret of the stored API-key hashes (HMAC-SHA256). Empty: a random one is created once "
        "in `<state_dir>/api-key-pepper`. Set it when several API hosts share a database; changing it "
        "invalidates every key.",
    )
    sockets_per_client: int = Field(
        default=16,
        ge=1,
        description="WebSockets one client address may hold open on an API process (`/ws/world`, `/ws/feed`, "
        "`/api/agents/telemetry` together); one more is closed with 1013 TOO_MANY_SOCKETS.",
    )
    sockets_total: int = Field(
        default=1000, ge=1, description="WebSockets an API process holds open at most, from all clients together."
    )
    redis_pool: int = Field(
        default=64,
        ge=4,
        description="Redis connections the API's requests share (a request waits up to 2 s for one when all are in "
        "use). Streams to WebSockets read on connections of their own, one per stream per process.",
    )


class SandboxSettings(BaseModel):
    """The sandbox test of a new mutation: a fresh trait-host container running a seeded world."""

    image: str = Field(
        default="",
        description="Trait-host image of the sandbox test and the live engine. Empty: the image built offline "
        "from this machine's CPython 3.11 (`python -m sandbox.image name` prints its tag).",
    )
    ticks: int = Field(
        default=50,
        description="Ticks of the seeded test world a new trait runs in its sandbox test, at least: each test draws "
        "its length between this and twice this, so that it is no number a trait can count to.",
    )
    seed: int = Field(default=1234, description="Seed of the sandbox test world.")
    call_timeout_ms: float = Field(
        default=5.0, description="CPU time one `execute` call may use (SANDBOX_TIMEOUT in the test, a strike live)."
    )
    tick_deadline_s: float = Field(
        default=2.0, description="Wall clock one sandbox-test tick may take before the container is killed."
    )
    memory: str = Field(
        default="128m", description="Memory limit of a sandbox test's container (supervisor, zygote, one worker)."
    )
    pids_limit: int = Field(default=16, description="Process limit of a sandbox test's container.")
    cpus: float = Field(default=1.0, description="CPU limit of a sandbox test's container.")
    memory_horizon_ticks: int = Field(
        default=216_000,
        ge=1,
        description="A sandbox test fails with SANDBOX_MEMORY when its trait's memory growth would pass "
        "`trait_worker_memory_mb` within this many live ticks (an hour at 60 ticks/s).",
    )
    min_fps: float = Field(
        default=30.0,
        description="Projected world ticks per second with the trait below which the test fails (SANDBOX_FPS_DROP).",
    )
    concurrency: int = Field(default=8, ge=1, description="Sandbox tests one worker runs at once.")
    pool_size: int = Field(
        default=2, ge=0, description="Warm trait-host containers a worker keeps ready for sandbox tests (0: none)."
    )
    host_socket: bool = Field(default=True, description="The same private socket for the sandbox test's trait hosts.")
    check_timeout_s: float = Field(
        default=60.0,
        gt=0,
        le=600,
        description="How long `POST /api/mutations/check` waits for its verdict (gatekeeper and sandbox test on the "
        "worker) before answering 503 CHECK_TIMEOUT.",
    )


class TraitSettings(BaseModel):
    """Limits of one agent's traits, and what a name clash means."""

    tick_cpu_ms: float = Field(
        default=100.0,
        gt=0,
        description="CPU one agent's traits may use in one tick before the host kills their process "
        "(the trait that was running is blamed).",
    )
    tick_cpu_share: float = Field(
        default=0.5,
        gt=0,
        le=1.0,
        description="Share of the live trait host's CPU time per tick (its CPUs times the tick period) that all "
        "traits together may use; when they use more, it is split evenly between the agents with traits in the "
        "tick, and an agent over its share is throttled (its traits sit ticks out) until it is back within it.",
    )
    worker_memory_mb: int = Field(
        default=128,
        ge=32,
        description="Address space of one agent's process in a trait host; an allocation beyond it is a "
        "MemoryError in the trait.",
    )
    exists_policy: Literal["reject", "replace"] = Field(
        default="reject",
        description="A proposal without `replaces` whose trait_name is live. `reject`: 409 TRAIT_EXISTS, and "
        "activation refuses (VERSION_CONFLICT) if a version went live meanwhile. `replace`: it becomes "
        "the next version, replacing whatever is live at activation (the owner is still checked).",
    )


class WorkflowSettings(BaseModel):
    """How the API starts the workflows of recorded proposals."""

    start_sweep_s: float = Field(
        default=5.0,
        gt=0,
        description="How often each API process looks for accepted proposals whose workflow has not started.",
    )
    start_stale_s: float = Field(
        default=10.0,
        gt=0,
        description="A proposal still `queued` after this long has its workflow started by the sweep.",
    )
    start_concurrency: int = Field(default=4, ge=1, description="Workflow starts in flight at once per API process.")


class RatelimitSettings(BaseModel):
    """Proposal and check rate limits (Redis, atomic)."""

    active_per_agent: int = Field(default=5, ge=1, description="Mutations of one agent not yet in a terminal state.")
    proposals_per_ip_minute: int = Field(default=10, ge=1, description="Proposals per client IP per minute.")
    proposals_per_agent_hour: int = Field(default=30, ge=1, description="Proposals per agent per hour.")
    active_slot_ttl_s: int = Field(
        default=3 * 3600,
        ge=60,
        description="An active-mutation slot never released (its workflow was terminated by hand) lapses after this.",
    )
    active_retry_after_s: int = Field(
        default=30, ge=1, description="`retry_after_sec` answered when the active-mutations limit is hit."
    )
    registrations_per_ip_hour: int = Field(
        default=20, ge=1, description="Agent registrations from one client address per hour (429 beyond)."
    )
    gepa_steps_per_client_hour: int = Field(
        default=60,
        ge=1,
        description="GEPA steps (`POST /execute_step`) one caller (agent, or address without a key) may start per "
        "hour; each holds a program container for minutes (429 beyond).",
    )
    gepa_connects_per_client_hour: int = Field(
        default=10,
        ge=1,
        description="Repositories (`POST /connect-git`) one caller (agent, or address without a key) may connect "
        "per hour; each is cloned once (429 beyond).",
    )
    rule_proposals_per_agent_hour: int = Field(
        default=12,
        ge=1,
        description="Proposals of rule changes (`POST /api/governance/proposals`) one agent may make per hour, "
        "counted when made, whatever becomes of them; operators are not limited.",
    )
    pending_rule_proposals_per_agent: int = Field(
        default=2,
        ge=1,
        description="Proposals of rule changes of one agent not yet decided (proposed, shadowing, awaiting "
        "approval, approved); one more is 429 TOO_MANY_PENDING_PROPOSALS.",
    )
    checks_per_agent_minute: int = Field(
        default=20,
        ge=1,
        description="Checks (`POST /api/mutations/check`: gatekeeper and sandbox test, nothing recorded) per agent "
        "per minute; counted apart from proposals.",
    )
    checks_per_ip_minute: int = Field(default=30, ge=1, description="Checks per client IP per minute.")


class TelemetrySettings(BaseModel):
    """WS /api/agents/telemetry: one Redis subscription per API process, fanned out to every socket."""

    client_queue: int = Field(
        default=256,
        ge=1,
        description="Events a telemetry client may fall behind before it is disconnected (close 1013 SLOW_CONSUMER).",
    )
    reconnect_max_s: float = Field(
        default=5.0, gt=0, description="Longest pause between the stream hub's Redis reconnects (backoff with jitter)."
    )


class WebhookSettings(BaseModel):
    """Signed POSTs to a proposal's notify_url."""

    secret: SecretStr = Field(
        default=SecretStr(""),
        description="Server secret every agent's webhook signing secret derives from; API and worker must share it. "
        "Empty: a random one is created once in `<state_dir>/webhook-secret`.",
    )
    allow_private: bool = Field(
        default=False,
        description="Let webhook receivers be on any address (loopback, private, ...); false: global addresses "
        "only, or those `outbound_private_allow` covers.",
    )
    timeout_s: float = Field(default=10.0, gt=0, description="One webhook delivery attempt.")
    retry_window_s: float = Field(
        default=3600.0, gt=0, description="A status change's webhook is retried this long, then dropped."
    )
    max_retry_interval_s: float = Field(default=60.0, gt=0, description="Longest pause between two delivery attempts.")


class TaskSettings(BaseModel):
    """Tasks for external agents and claims on them."""

    ttl_critical_s: float = Field(default=900.0, gt=0, description="Time to live of a `critical` task.")
    ttl_high_s: float = Field(default=600.0, gt=0, description="Time to live of a `high` task.")
    ttl_low_s: float = Field(default=300.0, gt=0, description="Time to live of a `low` or `periodic_improvement` task.")
    claim_lease_s: float = Field(
        default=120.0,
        gt=0,
        description="A claim lapses unless its agent proposes a mutation for the task within this long; each such "
        "proposal renews it (never past the task's expiry).",
    )

    def ttl_s(self, severity: str) -> float:
        """Time to live of a task of this severity (critical 15 min, high 10, low 5)."""
        return {"critical": self.ttl_critical_s, "high": self.ttl_high_s}.get(severity, self.ttl_low_s)


class WatcherSettings(BaseModel):
    """The Watcher (`python -m evolution`)."""

    cooldown_s: float = Field(
        default=300.0,
        ge=0,
        description="Seconds before the Watcher triggers again for the same anomaly type (`critical` ignores it).",
    )
    trigger_limit: int = Field(
        default=5, ge=1, description="Circuit breaker: more triggers than this within the window pause the Watcher."
    )
    trigger_window_s: int = Field(default=60, ge=1, description="Circuit breaker: the window, in seconds.")
    pause_s: int = Field(default=300, ge=1, description="Circuit breaker: how long the Watcher pauses.")
    report_ttl_s: int = Field(default=600, ge=1, description="Lifetime of a WorldReport `evo:trigger:{id}`.")
    max_running_cycles: int = Field(
        default=2,
        ge=1,
        description="Evolution cycles that may run at once (a cycle runs until its trait's verdict): while this "
        "many run, a trigger publishes its task for external agents but starts no cycle, so the built-in "
        "operator proposes no faster than verdicts are given. Forced triggers are not held back.",
    )


class LlmSettings(BaseModel):
    """The LLM provider of evolution cycles (Architect and Coder)."""

    provider: Literal["ollama", "openai", "anthropic", "builtin", "off"] = Field(
        default="builtin",
        description="Who plans and codes the evolution cycles: `builtin` (the default, no model: the built-in "
        "operator varies live traits and seed traits, evolution/operator.py), an LLM — `ollama` (/api/generate), "
        "`openai` (any OpenAI-compatible /v1/chat/completions), `anthropic` (/v1/messages) — or `off` (cycles "
        "end at once).",
    )
    builtin_share: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="With an LLM provider: the share of cycles the built-in operator plans and codes instead "
        "(chosen per cycle from its trigger id; 0: the LLM does all, 1: the operator does all).",
    )
    url: str = Field(default="", description="LLM server; empty: the provider's default.")
    model: str = Field(default="", description="LLM model; empty: the provider's default.")
    api_key: SecretStr = Field(
        default=SecretStr(""), description="LLM key: `Authorization: Bearer` (openai) or `x-api-key` (anthropic)."
    )
    timeout_s: float = Field(default=60.0, gt=0, description="One HTTP request to the LLM.")
    attempts: int = Field(default=3, ge=1, description="Attempts per LLM step while the LLM is unreachable.")
    concurrency: int = Field(
        default=4, ge=1, description="LLM calls one worker makes at once (task queue `<task_queue>-llm`)."
    )
    max_tokens: int = Field(default=1024, ge=16, description="Most tokens one LLM answer may have.")
    temperature: float = Field(default=0.7, ge=0, le=2, description="Sampling temperature of the LLM.")
    cost_in_per_mtok: float = Field(
        default=0.0,
        ge=0,
        description="USD per million input tokens, for a cycle's `estimated_cost_usd` (0: a local model).",
    )
    cost_out_per_mtok: float = Field(
        default=0.0, ge=0, description="USD per million output tokens, for a cycle's `estimated_cost_usd`."
    )


class LogSettings(BaseModel):
    """Logging of every process."""

    format: Literal["console", "json"] = Field(
        default="console", description="`console`: readable lines; `json`: one JSON object per line."
    )
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(default="INFO", description="Lowest level logged.")


class WorkerSettings(BaseModel):
    """The Temporal worker process (`python worker.py`)."""

    metrics_port: int = Field(
        default=9102,
        ge=0,
        le=65535,
        description="Port of the worker's `/metrics` (0: off; a taken port is logged and skipped).",
    )
    sdk_metrics_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="Port of the Temporal SDK's own worker metrics (task slots, schedule-to-start latency); 0: off.",
    )


RUN_PROCESSES = ("worker", "engine", "watcher", "api")


class RunSettings(BaseModel):
    """`make run` (`python -m cli.run`): which processes it starts and how it keeps them up."""

    processes: str = Field(
        default=",".join(RUN_PROCESSES),
        description="The processes `make run` starts, comma separated, of `worker`, `engine`, `watcher` and "
        "`api` (e.g. leave out the one you run in a debugger).",
    )

    @field_validator("processes")
    @classmethod
    def _known_processes(cls, value: str) -> str:
        names = [name.strip() for name in value.split(",") if name.strip()]
        unknown = sorted(set(names) - set(RUN_PROCESSES))
        if unknown or not names:
            raise ValueError(
                f"GENESIS_RUN_PROCESSES must name some of {', '.join(RUN_PROCESSES)}; "
                + (f"unknown: {', '.join(unknown)}" if unknown else "it names none")
            )
        return ",".join(dict.fromkeys(names))

    restart_initial_s: float = Field(
        default=1.0,
        gt=0,
        description="Pause before restarting a process that exited; it doubles with each further exit of that "
        "process within `crash_window_s`. Each pause is drawn between half and all of that value (jitter).",
    )
    restart_max_s: float = Field(
        default=30.0, gt=0, description="Longest pause before a restart, however often the process exited."
    )
    crash_limit: int = Field(
        default=5,
        ge=1,
        description="Exits of one process within `crash_window_s` that stop `make run` as a crash loop, naming "
        "the process and its log, instead of restarting it again.",
    )
    crash_window_s: float = Field(
        default=60.0, gt=0, description="The window of `crash_limit`, in seconds; older exits are forgotten."
    )

    @model_validator(mode="after")
    def _pauses_in_order(self) -> RunSettings:
        if self.restart_max_s < self.restart_initial_s:
            raise ValueError(
                f"GENESIS_RUN_RESTART_MAX_S ({self.restart_max_s:g}) must be at least "
                f"GENESIS_RUN_RESTART_INITIAL_S ({self.restart_initial_s:g})"
            )
        return self


class GepaSettings(BaseModel):
    """POST /connect-git, /execute_step, GET /program."""

    workspace_dir: Path = Field(
        default=PROJECT_ROOT / ".state" / "gepa", description="Clones and worktrees, on the worker's host."
    )
    envs_dir: Path = Field(
        default=PROJECT_ROOT / ".state" / "gepa-envs",
        description="Program and coder environments, one per requirements hash.",
    )
    task_queue_suffix: str = Field(
        default="-gepa", description="GEPA workflows and activities poll `<task_queue><suffix>`."
    )
    concurrency: int = Field(default=24, ge=1, description="GEPA activities one worker runs at once.")
    demo: bool = Field(
        default=False,
        description="`make run` serves the offline quickstart: a local DSPy program repository, its examples and a "
        "scripted LM on loopback, and points the programs' LM at it (docs/gepa.md).",
    )
    dspy_requirement: str = Field(default="dspy==3.4.1", description="Installed into every program environment.")
    local_repo_roots: str = Field(
        default="",
        description="Directories (comma separated) local repositories may be cloned from, as a path or file:// URL; "
        "empty: https:// only.",
    )
    lm_model: str = Field(default="openai/gpt-4o-mini", description="The programs' LM (a litellm model name).")
    lm_base_url: str = Field(
        default="https://api.openai.com/v1", description="The programs' LM endpoint (OpenAI-compatible)."
    )
    lm_api_key: SecretStr = Field(
        default=SecretStr(""), description="The programs' LM key; the egress gateway adds it, no container sees it."
    )
    coder_model: str = Field(default="gpt-4o-mini", description="Coding model of code mutations (`chat` backend).")
    coder_base_url: str = Field(
        default="https://api.openai.com/v1", description="Coding model endpoint (OpenAI-compatible chat)."
    )
    coder_api_key: SecretStr = Field(
        default=SecretStr(""), description="Coding model key; added by the egress gateway."
    )
    network: str = Field(
        default="genesis-gepa", description="The internal Docker network of program and coding-agent containers."
    )
    gateway_port: int = Field(
        default=0, ge=0, le=65535, description="Port of the worker's egress gateway on that network (0: any free port)."
    )
    egress_allow: str = Field(
        default="",
        description="`host:port` pairs (comma separated) every GEPA container may reach through the gateway's proxy.",
    )
    enforce_egress: bool = Field(
        default=True,
        description="Install the iptables rules of the GEPA network (needs root; false only without iptables).",
    )
    run_timeout_s: float = Field(default=300.0, gt=0, description="One step's program run; then it is killed.")
    step_timeout_s: float = Field(
        default=1800.0, gt=0, description="How long a synchronous `execute_step` waits before answering 202."
    )
    runner_memory: str = Field(default="2g", description="Memory limit of a client's program-host container.")
    runner_cpus: float = Field(default=2.0, gt=0, description="CPU limit of a program-host container.")
    runner_pids_limit: int = Field(default=512, ge=16, description="Process limit of a program-host container.")
    runner_idle_s: float = Field(default=600.0, gt=0, description="An idle program host is removed after this.")
    keep_worktrees: bool = Field(
        default=False, description="Keep each step's worktree for debugging (branches of completed steps always stay)."
    )
    max_body_bytes: int = Field(
        default=1024 * 1024,
        ge=1024,
        description="Largest `execute_step` body (requests travel through Temporal, whose payloads are limited).",
    )
    max_examples: int = Field(default=1000, ge=1, description="Most examples in one step.")
    github_app_id: str = Field(
        default="", description="GitHub App of the operator, for private repositories (`installation_id`)."
    )
    github_private_key_path: Path | None = Field(default=None, description="The GitHub App's private key (PEM).")
    github_api_url: str = Field(default="https://api.github.com", description="The GitHub App's REST API.")
    github_url: str = Field(
        default="https://github.com",
        description="Where the App's repositories live: an `installation_id` is accepted only with a `repo_url` "
        "there, and its token goes nowhere else.",
    )
    github_installations: str = Field(
        default="",
        description="Who may use which installation: `<installation_id>=<agent_id>` or `<installation_id>=*`, "
        "comma separated; empty: nobody.",
    )

    @field_validator("github_url")
    @classmethod
    def _github_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if (
            parts.scheme not in ("http", "https")
            or not parts.hostname
            or parts.username
            or parts.query
            or parts.fragment
        ):
            raise ValueError(
                "gepa_github_url must be http(s)://host[:port][/path] without credentials, query or fragment"
            )
        return value.rstrip("/")

    @field_validator("github_installations")
    @classmethod
    def _github_installations(cls, value: str) -> str:
        github_grants.InstallationGrants.parse(value)  # ValueError names the bad entry
        return value

    allow_http_repos: bool = Field(
        default=False, description="Also accept http:// repository URLs (a GitHub Enterprise on a trusted network)."
    )
    clone_connect_timeout_s: float = Field(
        default=10.0, gt=0, description="A clone fails when the repository has not listed its refs within this long."
    )
    clone_stall_s: int = Field(
        default=20, ge=1, description="A clone fails when it transfers under 1 KB/s for this long."
    )
    clone_timeout_s: float = Field(default=600.0, gt=0, description="A clone fails after this long in all.")
    coder_backend: Literal["chat", "claude_agent_sdk"] = Field(
        default="chat",
        description="Coding agent of code mutations: `chat` asks the `gepa_coder_*` model for a diff; "
        "`claude_agent_sdk` runs Claude Code inside the coder container.",
    )
    anthropic_base_url: str = Field(
        default="https://api.anthropic.com", description="Anthropic API of the `claude_agent_sdk` backend."
    )
    anthropic_api_key: SecretStr = Field(
        default=SecretStr(""),
        description="Anthropic key of the `claude_agent_sdk` backend (required by it); added by the egress gateway.",
    )
    claude_model: str = Field(default="claude-sonnet-4-5", description="Model of the `claude_agent_sdk` backend.")
    claude_sdk_requirement: str = Field(
        default="claude-agent-sdk==0.2.184", description="Package installed into the coder environment."
    )
    claude_max_turns: int = Field(default=30, ge=1, le=200, description="Turn limit of one Claude Code run.")
    claude_timeout_s: float = Field(default=600.0, gt=0, description="Time limit of one Claude Code run.")
    claude_memory: str = Field(default="2g", description="Memory limit of the Claude Code coder container.")


class Settings(BaseSettings):
    """Every setting of every Genesis process, read from ``GENESIS_<NAME>`` environment variables
    (or a ``.env`` file). ``docs/configuration.md`` is generated from the descriptions below
    (``python -m genesis.config_docs``)."""

    # GENESIS_SANDBOX_CALL_TIMEOUT_MS -> sandbox.call_timeout_ms: a group's name is one word, split
    # off at the first underscore after the prefix.
    model_config = SettingsConfigDict(
        env_prefix="GENESIS_", env_file=".env", extra="ignore", env_nested_delimiter="_", env_nested_max_split=1
    )

    # Services.
    database_url: str = Field(
        default="postgresql+asyncpg://genesis:genesis@127.0.0.1:5432/genesis",
        description="Postgres, the system of record (SQLAlchemy URL with the asyncpg driver).",
    )
    redis_url: str = Field(
        default="redis://127.0.0.1:6379/0", description="Redis: hot, expiring state and pub/sub channels."
    )
    task_queue: str = Field(
        default="genesis",
        description="The worker's task queue; LLM calls use `<task_queue>-llm` and GEPA steps `<task_queue>-gepa`.",
    )
    trusted_proxies: str = Field(
        default="",
        description="Reverse proxies whose X-Forwarded-For / X-Forwarded-Proto the API believes, as comma-separated "
        "IPs or CIDRs (e.g. `10.0.0.5,172.18.0.0/16`). Empty: nobody's; the client is the connection's "
        "peer. Applied by `python -m api`.",
    )
    state_dir: Path = Field(
        default=PROJECT_ROOT / ".state",
        description="Local state: the Temporal dev server's SQLite file, service logs, generated secrets.",
    )
    receipt_keys_dir: Path | None = Field(
        default=None,
        description="The Ed25519 keys that sign receipts (created once, mode 0700; docs/receipts.md); empty: "
        "`<state_dir>/receipt-keys`. The worker and the engine sign; the API needs no private key.",
    )
    activate_mutations: bool = Field(
        default=True, description="Activate mutations that pass their sandbox test; false: they end at `sandbox_ok`."
    )
    mutations_dir: Path = Field(
        default=PROJECT_ROOT / "mutations",
        description="Where activation writes audit copies `trait_{name}_v{N}.py` (nothing imports them).",
    )
    rollback_threshold: float = Field(
        default=-0.10, description="Fitness delta at or below which a live trait is rolled back."
    )

    # Agents' identity and the propose path.
    auth: Literal["required", "open"] = Field(
        default="required",
        description="`required`: write endpoints need an agent's X-API-Key and operator endpoints an X-Operator-Key. "
        "`open`: keyless proposals (`agent_id` in the body) and keyless operator endpoints, for local "
        "experiments only (the API logs a warning at start); a key that is sent is still checked.",
    )
    registration: Literal["open", "invitation"] = Field(
        default="open",
        description="`open`: anyone may register an agent (`GENESIS_RATELIMIT_REGISTRATIONS_PER_IP_HOUR` per "
        "address); `invitation`: registration needs an operator's single-use invitation "
        "(`genesis agents invite`).",
    )

    batch_max_items: int = Field(
        default=10, ge=1, le=100, description="Proposals in one `POST /api/mutations/propose/batch`."
    )

    outbound_private_allow: str = Field(
        default="",
        description="Private destinations the server may still connect to for clients (clones, `egress_allow`, "
        "webhooks): `host:port`, `[v6]:port`, CIDR networks or bare addresses (every port), comma "
        "separated. Everything else must resolve to global addresses only.",
    )

    @field_validator("outbound_private_allow")
    @classmethod
    def _outbound_private_allow(cls, value: str) -> str:
        netpolicy.AllowList.parse(value)  # ValueError names the bad entry
        return value

    @property
    def receipt_keys_path(self) -> Path:
        return self.receipt_keys_dir if self.receipt_keys_dir is not None else self.state_dir / "receipt-keys"

    @property
    def journal_dir(self) -> Path:
        return self.journal.dir if self.journal.dir is not None else self.state_dir / "journal"

    @property
    def journal_archive_dir(self) -> Path:
        if self.journal.archive_dir is not None:
            return self.journal.archive_dir
        return self.journal_dir.with_name(self.journal_dir.name + "-archive")

    forced_trigger_limit: int = Field(
        default=10,
        ge=1,
        description="Operators' forced triggers (`POST /api/evolution/trigger`) per window; over it 429 "
        "FORCED_TRIGGER_LIMIT (they are not held by the Watcher's circuit breaker).",
    )
    forced_trigger_window_s: int = Field(
        default=600, ge=1, description="The window of `forced_trigger_limit`, in seconds."
    )

    # Evolution cycles: Architect and Coder LLM agents.
    evolution_cycles_enabled: bool = Field(
        default=True, description="The Watcher starts an evolution cycle for each trigger."
    )
    schedule_min_interval_s: float = Field(
        default=60.0, gt=0, description="Shortest interval a periodic improvement schedule may have."
    )
    metrics_host: str = Field(
        default="127.0.0.1", description="Address the engine's and the worker's `/metrics` servers listen on."
    )

    temporal: TemporalSettings = Field(
        default_factory=TemporalSettings, title="Temporal", description="The Temporal server every process talks to."
    )
    api: ApiSettings = Field(default_factory=ApiSettings, title="API", description="The API process.")
    sandbox: SandboxSettings = Field(
        default_factory=SandboxSettings,
        title="Sandbox test",
        description="The sandbox test of a new mutation: a fresh trait-host container running a seeded world.",
    )
    trait: TraitSettings = Field(
        default_factory=TraitSettings,
        title="Traits",
        description="Limits of one agent's traits, and what a name clash means.",
    )
    engine: EngineSettings = Field(
        default_factory=EngineSettings,
        title="World engine",
        description="The world engine (`python -m engine`) and its live trait host.",
    )
    journal: JournalSettings = Field(
        default_factory=JournalSettings,
        title="Journal",
        description="The world's input journal, its hash chain and the snapshots bound to it.",
    )
    rounds: RoundSettings = Field(
        default_factory=RoundSettings,
        title="Rounds",
        description="Agents' members in the world and the rounds of their actions.",
    )
    workflow: WorkflowSettings = Field(
        default_factory=WorkflowSettings,
        title="Workflow starts",
        description="How the API starts the workflows of recorded proposals.",
    )
    observation: ObservationSettings = Field(
        default_factory=ObservationSettings,
        title="Observation",
        description="The observation window after activation that decides keep or roll back.",
    )
    verdict: VerdictSettings = Field(
        default_factory=VerdictSettings,
        title="Verdicts",
        description="A trait's fitness verdict: an experiment in forks of the live world.",
    )
    ratelimit: RatelimitSettings = Field(
        default_factory=RatelimitSettings,
        title="Rate limits",
        description="Proposal and check rate limits (Redis, atomic).",
    )
    telemetry: TelemetrySettings = Field(
        default_factory=TelemetrySettings,
        title="Telemetry stream",
        description="WS /api/agents/telemetry: one Redis subscription per API process, fanned out to every socket.",
    )
    webhook: WebhookSettings = Field(
        default_factory=WebhookSettings, title="Webhooks", description="Signed POSTs to a proposal's notify_url."
    )
    task: TaskSettings = Field(
        default_factory=TaskSettings, title="Tasks", description="Tasks for external agents and claims on them."
    )
    watcher: WatcherSettings = Field(
        default_factory=WatcherSettings, title="Watcher", description="The Watcher (`python -m evolution`)."
    )
    llm: LlmSettings = Field(
        default_factory=LlmSettings,
        title="LLM",
        description="The LLM provider of evolution cycles (Architect and Coder).",
    )
    log: LogSettings = Field(default_factory=LogSettings, title="Logs", description="Logging of every process.")
    worker: WorkerSettings = Field(
        default_factory=WorkerSettings, title="Worker", description="The Temporal worker process (`python worker.py`)."
    )
    run: RunSettings = Field(
        default_factory=RunSettings,
        title="make run",
        description="The launcher of `make run`: the processes it starts, their restarts, and when it gives up.",
    )
    gepa: GepaSettings = Field(
        default_factory=GepaSettings,
        title="GEPA optimisation steps",
        description="POST /connect-git, /execute_step, GET /program.",
    )

    def gepa_task_queue(self) -> str:
        return self.task_queue + self.gepa.task_queue_suffix

    def environment(self) -> dict[str, str]:
        """These settings as the environment variables that give them (secrets in clear): how a
        process hands its settings to the processes it starts."""
        values = {name: getattr(self, name) for name in type(self).model_fields if name not in GROUPS}
        for group in GROUPS:
            section = getattr(self, group)
            values.update({f"{group}_{name}": getattr(section, name) for name in type(section).model_fields})
        # None (an unset optional path) is the default: no variable at all says so.
        return {f"GENESIS_{name.upper()}": _env_value(value) for name, value in values.items() if value is not None}

    def override(self, **changes: object) -> Settings:
        """A copy with some settings changed, named as their environment variables are without the
        prefix (``override(sandbox_ticks=5, redis_url=...)``), validated like the environment."""
        updates: dict[str, dict[str, object]] = {}
        top: dict[str, object] = {}
        for key, value in changes.items():
            group, _, name = key.partition("_")
            if group in GROUPS and name in type(getattr(self, group)).model_fields:
                updates.setdefault(group, {})[name] = value
            elif key in type(self).model_fields and key not in GROUPS:
                top[key] = value
            else:
                raise ValueError(f"no setting {key!r} (GENESIS_{key.upper()})")
        data = self.model_dump()
        for group, fields in updates.items():
            data[group].update(fields)
        data.update(top)
        return type(self).model_validate(data)


def _env_value(value: object) -> str:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


GROUPS = tuple(
    name
    for name, field in Settings.model_fields.items()
    if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
)


@lru_cache
def get_settings() -> Settings:
    return Settings()
