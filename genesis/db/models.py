"""Postgres is the system of record: the durable mutation record the REST API reads."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Identity,
    Index,
    Integer,
    LargeBinary,
    SmallInteger,
    String,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class Mutation(Base):
    __tablename__ = "mutations"

    mutation_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    agent_id: Mapped[str] = mapped_column(String(128), index=True)
    task_id: Mapped[str | None] = mapped_column(String(64))
    trait_name: Mapped[str] = mapped_column(String(64), index=True)
    goal: Mapped[str] = mapped_column(Text, default="")
    code: Mapped[str] = mapped_column(Text)
    # SHA-256 of the normalised source (set by the gatekeeper once the code parses).
    code_hash: Mapped[str | None] = mapped_column(String(64))
    # True while this mutation holds its code_hash for deduplication (released on rejection).
    holds_code_hash: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))
    class_name: Mapped[str | None] = mapped_column(String(128))
    status: Mapped[str] = mapped_column(String(32), index=True)
    failure_reason_code: Mapped[str | None] = mapped_column(String(64))
    validation_log: Mapped[list[str]] = mapped_column(JSONB, default=list)
    sandbox_report: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    # A held mutation's shadow: its trait in a fork of the live world (migration 0019).
    shadow_report: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    verdict_report: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    # Set on activation and after observation (issue: the living world).
    trait_version: Mapped[int | None] = mapped_column()
    activated_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    effects: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    fitness_verdict: Mapped[str | None] = mapped_column(String(16))
    rollback_reason: Mapped[str | None] = mapped_column(Text)
    workflow_id: Mapped[str] = mapped_column(String(80))
    client_ip: Mapped[str | None] = mapped_column(String(64))
    # Signed webhooks on each status change go here (migration 0005; pipeline/webhooks.py).
    notify_url: Mapped[str | None] = mapped_column(Text)
    # Modifying a live trait (migration 0006): the trait and version the proposal names in
    # ``replaces`` (version None: whatever is live), the version it actually replaced when it was
    # activated, and the version a rollback of it brought back.
    replaces_trait: Mapped[str | None] = mapped_column(String(64))
    replaces_version: Mapped[int | None] = mapped_column()
    replaced_version: Mapped[int | None] = mapped_column()
    restored_version: Mapped[int | None] = mapped_column()
    # Who allowed it to replace a version another agent made (migration 0011): an operator whose
    # X-Operator-Key came with the proposal, or the built-in evolution. None: only the proposer's
    # own versions may be replaced (checked at propose time and again at activation).
    replacement_approved_by: Mapped[str | None] = mapped_column(String(160))
    # Where its code came from (migration 0012; genesis.dto.Lineage as a dict): parent versions,
    # operators, seed, origin. None: recorded before lineage existed.
    lineage: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    __table_args__ = (
        # At most one live (non-rejected) mutation per normalised code: DUPLICATE_CODE, race-free.
        Index(
            "uq_mutations_live_code_hash",
            "code_hash",
            unique=True,
            postgresql_where=text("holds_code_hash"),
        ),
    )


class TraitVersion(Base):
    """Every activated trait version. The live registry in Redis is rebuilt from the rows with
    ``status == 'active'`` (self-heal after an engine or Redis restart)."""

    __tablename__ = "trait_versions"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    trait_name: Mapped[str] = mapped_column(String(64), index=True)
    version: Mapped[int] = mapped_column()
    mutation_id: Mapped[str] = mapped_column(String(40), unique=True)
    class_name: Mapped[str] = mapped_column(String(128))
    code: Mapped[str] = mapped_column(Text)
    code_hash: Mapped[str] = mapped_column(String(64))
    file_path: Mapped[str] = mapped_column(Text)
    # active | superseded (a newer version replaced it) | rolled_back
    status: Mapped[str] = mapped_column(String(16), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    __table_args__ = (
        Index("uq_trait_versions_name_version", "trait_name", "version", unique=True),
        # At most one active version per trait.
        Index("uq_trait_versions_one_active", "trait_name", unique=True, postgresql_where=text("status = 'active'")),
    )


class TraitQuarantine(Base):
    """A live trait version the engine quarantined (it kept failing in the trait host). The engine
    is the only writer; the row outlives the engine, so a restart never loads that version again,
    and the API shows it as quarantined before its workflow has finished rolling it back."""

    __tablename__ = "trait_quarantines"

    mutation_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    trait_name: Mapped[str] = mapped_column(String(64), index=True)
    version: Mapped[int] = mapped_column(Integer)
    reason: Mapped[str] = mapped_column(Text)
    quarantined_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class Agent(Base):
    """An external agent registered with POST /v1/agents/register (external-agents-phase2.md).

    Its API key is never stored: only ``key_prefix`` (the public lookup part of the key) and
    ``key_hash`` = HMAC-SHA256(server pepper, key), see identity/apikeys.py."""

    __tablename__ = "agents"

    agent_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(64))
    description: Mapped[str] = mapped_column(Text, default="", server_default="")
    key_prefix: Mapped[str] = mapped_column(String(16))
    key_hash: Mapped[str] = mapped_column(String(128))
    key_scheme: Mapped[str] = mapped_column(String(32))  # how key_hash was made: "hmac-sha256"
    client_ip: Mapped[str | None] = mapped_column(String(64))  # who registered it
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    member_id: Mapped[int | None] = mapped_column(Integer)  # the member (a Molbot) it controls
    member_since: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))  # when it was given its member
    last_action_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))  # its latest round submission

    __table_args__ = (
        Index("uq_agents_key_prefix", "key_prefix", unique=True),
        Index("uq_agents_member_id", "member_id", unique=True),
    )


class OperatorKey(Base):
    """A key of an operator (``genesis operator create-key``): it opens the operator endpoints
    (tasks, schedules, forced triggers, rollback of any mutation, replacing another agent's
    trait). Stored like an agent's key: only ``key_prefix`` and the HMAC ``key_hash``."""

    __tablename__ = "operator_keys"

    key_prefix: Mapped[str] = mapped_column(String(16), primary_key=True)
    name: Mapped[str] = mapped_column(String(64))
    key_hash: Mapped[str] = mapped_column(String(128))
    key_scheme: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class WorldSnapshot(Base):
    """Every ``engine_postgres_every``-th WorldSnapshot of the engine (logic-flow.md 1.3, step 5d).

    The seed's fields are columns; ``data`` holds the whole snapshot (trait_usage, trait_stats, ...).
    ``run_id`` tells engine runs apart: ticks start again from 0 when the engine restarts."""

    __tablename__ = "world_snapshots"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(32), index=True)
    tick: Mapped[int] = mapped_column(BigInteger, index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    timestamp: Mapped[float] = mapped_column(Float)  # the engine's wall clock (unix seconds)
    entity_count: Mapped[int] = mapped_column(Integer)
    avg_energy: Mapped[float] = mapped_column(Float)
    births_last_period: Mapped[int] = mapped_column(Integer)
    deaths_last_period: Mapped[int] = mapped_column(Integer)
    death_starvation: Mapped[int] = mapped_column(Integer)
    death_age: Mapped[int] = mapped_column(Integer)
    death_collision: Mapped[int] = mapped_column(Integer)
    resource_density: Mapped[float] = mapped_column(Float)
    resource_count: Mapped[int] = mapped_column(Integer)
    trait_diversity: Mapped[int] = mapped_column(Integer)
    dominant_trait: Mapped[str | None] = mapped_column(String(64))
    temperature: Mapped[float] = mapped_column(Float)
    tick_overruns: Mapped[int] = mapped_column(BigInteger)
    ticks_per_second: Mapped[float] = mapped_column(Float)
    state_hash: Mapped[str] = mapped_column(String(64))
    data: Mapped[dict[str, Any]] = mapped_column(JSONB)


class EvolutionCycle(Base):
    """One EvolutionCycleWorkflow: anomaly or schedule → Architect → Coder → mutation.

    ``stage`` is where it is (or where it stopped), ``status`` running / succeeded / failed.
    Token usage is summed over every LLM call of the cycle, retries included (they were spent)."""

    __tablename__ = "evolution_cycles"

    trigger_id: Mapped[str] = mapped_column(String(120), primary_key=True)
    workflow_id: Mapped[str] = mapped_column(String(140))
    kind: Mapped[str] = mapped_column(String(32))  # anomaly | periodic_improvement
    problem_type: Mapped[str | None] = mapped_column(String(64))
    severity: Mapped[str | None] = mapped_column(String(16))
    stage: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16), index=True)
    action_type: Mapped[str | None] = mapped_column(String(32))
    plan: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    code: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))  # Coder answers
    mutation_id: Mapped[str | None] = mapped_column(String(40), index=True)
    mutation_status: Mapped[str | None] = mapped_column(String(32))
    params_change: Mapped[dict[str, Any] | None] = mapped_column(JSONB)  # adjust_params: before/after
    provider: Mapped[str | None] = mapped_column(String(32))
    model: Mapped[str | None] = mapped_column(String(128))
    llm_calls: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    tokens_in: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    tokens_out: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    estimated_cost_usd: Mapped[float] = mapped_column(Float, default=0.0, server_default=text("0"))
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now(), index=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


# --- GEPA optimisation steps (migration 0008; gepa_steps/programs.py, gepa_steps/api.py) ---


class GepaClient(Base):
    """A repository connected with POST /connect-git: one clone per client. A GitHub App
    ``installation_id`` is kept (tokens are fetched per use and never stored)."""

    __tablename__ = "gepa_clients"

    client_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    repo_url: Mapped[str] = mapped_column(Text)
    installation_id: Mapped[int | None] = mapped_column(BigInteger)
    # The agent (X-API-Key) that connected it: only that agent may run its steps and read its
    # programs. None: connected without a key under GENESIS_AUTH=open (anyone may use it).
    owner_agent_id: Mapped[str | None] = mapped_column(String(40))
    egress_allow: Mapped[list[str]] = mapped_column(JSONB, default=list)  # host:port its programs may reach
    # connecting (clone in progress) | connected | failed
    status: Mapped[str] = mapped_column(String(16))
    default_branch: Mapped[str | None] = mapped_column(String(255))
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class Program(Base):
    """One program version of a GEPA run (codeevolver-gepa.md "Program Database"): its
    ``program.json`` after the mutation, its git branch and, once run, the step's response."""

    __tablename__ = "programs"

    program_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    client_id: Mapped[str] = mapped_column(String(40), index=True)
    parent_program_id: Mapped[str | None] = mapped_column(String(64))
    second_parent_program_id: Mapped[str | None] = mapped_column(String(64))  # a merge's other parent
    mutation_type: Mapped[str] = mapped_column(String(8))  # prompt | code | merge
    program_json: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    branch_name: Mapped[str] = mapped_column(String(80))
    # pending | in_progress | completed | failed
    status: Mapped[str] = mapped_column(String(16), index=True)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONB)  # the execute_step response
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class AuditEventRow(Base):
    """One audit event of the world's journal (journal/audit.py): a projection the engine keeps up
    to date and ``python -m audit.projection --rebuild`` rebuilds from the journal."""

    __tablename__ = "audit_events"

    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    idx: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    epoch: Mapped[int] = mapped_column(Integer)
    tick: Mapped[int] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(String(32))
    agent_id: Mapped[str | None] = mapped_column(String(64))
    mutation_id: Mapped[str | None] = mapped_column(String(40))
    trait_name: Mapped[str | None] = mapped_column(String(64))
    cause: Mapped[str | None] = mapped_column(String(500))
    summary: Mapped[dict[str, Any]] = mapped_column(JSONB)


class AuditProjection(Base):
    """How far the audit projection has read the journal (one row, id 1)."""

    __tablename__ = "audit_projection"

    id: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    journal_dir: Mapped[str] = mapped_column(String(500))
    projected_seq: Mapped[int] = mapped_column(BigInteger)
    chain_head: Mapped[bytes] = mapped_column(LargeBinary)
    params: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class ReceiptRow(Base):
    """A signed receipt (genesis/signing.py): ``body`` holds its exact canonical bytes."""

    __tablename__ = "receipts"
    # the chain is linear: a receipt names an existing one, which no other names (migration 0015)
    __table_args__ = (Index("ux_receipts_prev_hash", "prev_hash", unique=True, postgresql_nulls_not_distinct=True),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, Identity(), unique=True)
    kind: Mapped[str] = mapped_column(String(40))
    key_id: Mapped[str] = mapped_column(String(40))
    mutation_id: Mapped[str | None] = mapped_column(String(40))
    agent_id: Mapped[str | None] = mapped_column(String(128))
    trait_name: Mapped[str | None] = mapped_column(String(64))
    topic: Mapped[str] = mapped_column(String(120), unique=True)
    issued_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    hash: Mapped[str] = mapped_column(String(64), unique=True)
    prev_hash: Mapped[str | None] = mapped_column(String(64), ForeignKey("receipts.hash", name="fk_receipts_prev_hash"))
    body: Mapped[bytes] = mapped_column(LargeBinary)
    journal_seq: Mapped[int | None] = mapped_column(BigInteger)


class ReceiptChainHead(Base):
    """The chain's signed head (one row): a ``chain.head`` statement naming the newest receipt and
    the chain's length, re-signed with every receipt and once a minute (audit/receipts.py)."""

    __tablename__ = "receipt_chain_head"

    id: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    newest_hash: Mapped[str] = mapped_column(String(64))
    count: Mapped[int] = mapped_column(BigInteger)
    signed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    body: Mapped[bytes] = mapped_column(LargeBinary)


class ReceiptKey(Base):
    """A public key that verifies receipts (the private keys never leave their key directory)."""

    __tablename__ = "receipt_keys"

    key_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    public_key: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    retired_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class ManifestVersion(Base):
    """One version of the world's rules (governance/manifest.py); the highest is in force."""

    __tablename__ = "manifests"

    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    hash: Mapped[str] = mapped_column(String(64))
    document: Mapped[dict[str, Any]] = mapped_column(JSONB)
    cause: Mapped[str] = mapped_column(String(120))  # "initial", or the governance proposal applied
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class CapabilityGrant(Base):
    """A capability an agent holds (governance/manifest.py AGENT_CAPABILITIES) until it expires or
    is revoked."""

    __tablename__ = "capability_grants"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    agent_id: Mapped[str] = mapped_column(String(40), ForeignKey("agents.agent_id", ondelete="CASCADE"))
    capability: Mapped[str] = mapped_column(String(40))
    granted_by: Mapped[str] = mapped_column(String(128))
    granted_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_by: Mapped[str | None] = mapped_column(String(128))

    __table_args__ = (Index("ix_capability_grants_agent", "agent_id", "capability"),)


class PolicyDecisionRow(Base):
    """A decision of the policy gate; ``body`` is its canonical record, carried into the journal
    (``journal_seq`` once it is there)."""

    __tablename__ = "policy_decisions"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, Identity(), unique=True)
    decided_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    role: Mapped[str] = mapped_column(String(16))
    action: Mapped[str] = mapped_column(String(40))
    subject: Mapped[str | None] = mapped_column(String(128))
    resource: Mapped[str] = mapped_column(String(200))
    decision: Mapped[str] = mapped_column(String(8))
    rule: Mapped[str] = mapped_column(String(64))
    manifest_hash: Mapped[str] = mapped_column(String(64))
    body: Mapped[bytes] = mapped_column(LargeBinary)
    journal_seq: Mapped[int | None] = mapped_column(BigInteger)


class WorldRound(Base):
    """A round of agents' actions (engine/process/rounds.py): accepting, then executing, then settled."""

    __tablename__ = "world_rounds"

    round_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    state: Mapped[str] = mapped_column(String(12))
    epoch: Mapped[int] = mapped_column(Integer)
    opens_tick: Mapped[int] = mapped_column(BigInteger)
    closes_tick: Mapped[int] = mapped_column(BigInteger)
    deadline_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    opened_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    closed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    settled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    settled_tick: Mapped[int | None] = mapped_column(BigInteger)
    receipt_id: Mapped[str | None] = mapped_column(String(40))
    summary: Mapped[dict[str, Any] | None] = mapped_column(JSONB)


class RoundSubmission(Base):
    """An agent's action code for a round, and what became of it."""

    __tablename__ = "round_submissions"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, Identity(), unique=True)
    round_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("world_rounds.round_id"))
    agent_id: Mapped[str] = mapped_column(String(40), ForeignKey("agents.agent_id", ondelete="CASCADE"))
    member_id: Mapped[int] = mapped_column(Integer)
    idempotency_key: Mapped[str] = mapped_column(String(128))
    body_hash: Mapped[str] = mapped_column(String(64))
    code: Mapped[str] = mapped_column(Text)
    decision_id: Mapped[str] = mapped_column(String(40))
    submitted_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    status: Mapped[str] = mapped_column(String(12))  # accepted, applied, rejected
    error: Mapped[str | None] = mapped_column(String(32))
    detail: Mapped[str | None] = mapped_column(Text)
    outcomes: Mapped[list[Any] | None] = mapped_column(JSONB)


class GovernanceProposal(Base):
    """A proposal to change the world's rules (governance/lifecycle.py), from propose to apply."""

    __tablename__ = "governance_proposals"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, Identity(), unique=True)
    author: Mapped[str] = mapped_column(String(128))
    author_role: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text)
    base_version: Mapped[int] = mapped_column(Integer)
    base_hash: Mapped[str] = mapped_column(String(64))
    ops: Mapped[list[Any]] = mapped_column(JSONB)
    document: Mapped[dict[str, Any]] = mapped_column(JSONB)
    candidate_hash: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(20))
    report: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    report_hash: Mapped[str | None] = mapped_column(String(64))
    decided_by: Mapped[str | None] = mapped_column(String(128))
    decision_reason: Mapped[str | None] = mapped_column(Text)
    applied_version: Mapped[int | None] = mapped_column(Integer)
    failure: Mapped[str | None] = mapped_column(Text)
    workflow_id: Mapped[str] = mapped_column(String(80))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
