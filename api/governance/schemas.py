"""Request and response shapes of the world's rules: the manifest, capabilities and the policy."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from api.paging import NextCursor

Capability = Literal["traits.propose", "traits.modify", "actions.submit", "rules.propose"]
GatedAction = Literal[
    "traits.propose", "traits.modify", "actions.submit", "rules.propose", "rules.approve", "mutations.approve"
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ManifestResponse(BaseModel):
    version: int = Field(description="The manifest's place in the history (the highest is in force).")
    hash: str = Field(description="sha256 of the document's canonical CBOR: what patches and approvals name.")
    document: dict[str, Any]


class ManifestVersionItem(BaseModel):
    version: int
    hash: str
    cause: str
    created_at: float


class ManifestHistoryResponse(BaseModel):
    versions: list[ManifestVersionItem]


class GrantItem(BaseModel):
    id: str
    capability: str
    granted_by: str
    granted_at: float
    expires_at: float | None
    revoked_at: float | None
    revoked_by: str | None
    live: bool


class CapabilitiesResponse(BaseModel):
    agent_id: str
    live: list[str] = Field(description="The capabilities the agent holds now.")
    grants: list[GrantItem] = Field(description="Every grant, newest first, live or not.")


class GrantRequest(_Strict):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"capabilities": ["actions.submit"], "ttl_sec": 86400}, {"capabilities": ["traits.propose"]}]
        },
    )

    capabilities: list[Capability] = Field(min_length=1, max_length=4)
    ttl_sec: int | None = Field(default=None, ge=60, le=10 * 365 * 86_400, description="Expiry (absent: never).")


class RevokeResponse(BaseModel):
    agent_id: str
    capability: str
    revoked: int = Field(description="How many live grants were revoked.")


class SimulateRequest(_Strict):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"role": "agent", "action": "traits.propose", "agent_id": "agt_0123456789ab"},
                {"role": "agent", "action": "actions.submit", "capabilities": []},
                {"role": "operator", "action": "rules.approve"},
            ]
        },
    )

    role: Literal["agent", "operator"]
    action: GatedAction
    agent_id: str | None = Field(default=None, max_length=128)
    capabilities: list[Capability] | None = Field(
        default=None, description="The grants to assume (absent: the agent's live grants)."
    )
    document: dict[str, Any] | None = Field(
        default=None, description="A candidate manifest to decide with (absent: the one in force)."
    )
    resource: str = Field(default="", max_length=200)


class DecisionResponse(BaseModel):
    decision: Literal["allow", "deny"]
    rule: str = Field(description="The rule that decided, default-deny, or the step that refused.")
    reason: str
    manifest_hash: str
    dry_run: list[dict[str, str]] = Field(description="Dry-run rules that matched, with what they would decide.")
    capabilities: list[str] = Field(description="The grants the decision assumed.")


class DecisionItem(BaseModel):
    id: str
    seq: int
    decided_at: float
    role: str
    action: str
    subject: str | None
    resource: str
    decision: str
    rule: str
    reason: str
    dry_run: list[dict[str, str]]
    manifest_hash: str
    journal_seq: int | None = Field(description="Where the journal holds it (null: not carried there yet).")


class DecisionListResponse(BaseModel):
    decisions: list[DecisionItem]
    next_cursor: NextCursor = None


class ProposalRequest(_Strict):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "base_hash": "0" * 64,
                    "ops": [
                        {"op": "test", "path": "/approvals/first_traits", "value": 0},
                        {"op": "replace", "path": "/approvals/first_traits", "value": 1},
                    ],
                    "reason": "an agent's first trait waits for an operator",
                },
                {
                    "base_hash": "0" * 64,
                    "ops": [{"op": "add", "path": "/params/resource_energy", "value": 30.0}],
                    "reason": "richer food",
                },
            ]
        },
    )

    base_hash: str = Field(
        pattern=r"^[0-9a-f]{64}$", description="The hash of the manifest the patch is written against"
    )
    ops: list[dict[str, Any]] = Field(min_length=1, max_length=200, description="RFC 6902 operations")
    reason: str = Field(min_length=1, max_length=2000)


class ProposalAccepted(BaseModel):
    proposal_id: str
    status: str
    candidate_hash: str
    workflow_id: str
    url: str


class ProposalResponse(BaseModel):
    proposal_id: str
    status: str
    author: str
    author_role: str
    reason: str
    base_version: int
    base_hash: str
    ops: list[dict[str, Any]]
    candidate_hash: str
    diff: list[dict[str, Any]] = Field(description="The candidate against the base manifest (RFC 6902)")
    report: dict[str, Any] | None = Field(description="The shadow report: baseline and candidate side by side")
    report_hash: str | None = Field(description="What an approval must name")
    decided_by: str | None
    decision_reason: str | None
    applied_version: int | None
    failure: str | None
    workflow_id: str
    created_at: float
    expires_at: float


class ProposalListResponse(BaseModel):
    proposals: list[ProposalResponse]
    next_cursor: NextCursor = None


class ApproveRequest(_Strict):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"report_hash": "0" * 64}]})

    report_hash: str = Field(pattern=r"^[0-9a-f]{64}$", description="The hash of the shadow report approved")


class RejectRequest(_Strict):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"reason": "not now"}]})

    reason: str = Field(default="", max_length=2000)


class DecisionAccepted(BaseModel):
    proposal_id: str
    decision: Literal["approve", "reject"]
    status: str = Field(description="The proposal's status when the decision was sent (it moves on in its workflow)")
