"""The world's rules as one document: the manifest.

Parameters a governed change may set, the policy that decides gated requests, the capabilities a
new agent is granted, which mutations wait for an operator's approval, snapshot retention, the
length of a round and how selection bounds the live traits. The document is plain JSON data;
:func:`manifest_hash` is the sha256 of its canonical CBOR, so two processes agree on a hash
without agreeing on key order. A change is an RFC
6902 patch against a base hash (``governance.patches``); :func:`validate` is what the patched
document must pass before it can be proposed.

The version number is not part of the document: it is where the document sits in the history
(``governance/records/manifests.py``), and the hash is what approvals bind to.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from genesis import canonical
from genesis.world_params import ALLOWED as GOVERNED_PARAMS

# The requests a policy decides. An agent needs a live grant of the capability of the same name;
# the operator-only ones are never granted to agents.
CapabilityName = Literal["traits.propose", "traits.modify", "actions.submit", "rules.propose"]
RoleName = Literal["agent", "operator"]
AGENT_CAPABILITIES: tuple[CapabilityName, ...] = ("traits.propose", "traits.modify", "actions.submit", "rules.propose")
OPERATOR_ACTIONS = ("rules.approve", "mutations.approve")
GATED_ACTIONS = AGENT_CAPABILITIES + OPERATOR_ACTIONS
ROLES: tuple[RoleName, ...] = ("agent", "operator")

_SLUG = r"^[a-z0-9][a-z0-9_.-]{0,63}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PolicyRule(_Strict):
    """One rule of the first-match policy: the first rule in force whose conditions all hold
    decides; ``dry_run`` rules are recorded as what they would have decided and skipped."""

    id: str = Field(pattern=_SLUG, description="Unique name of the rule, quoted in every decision it makes.")
    decision: Literal["allow", "deny"]
    actions: list[str] = Field(min_length=1, description='Gated actions it applies to, or ["*"].')
    roles: list[RoleName] = Field(default=list(ROLES), min_length=1)
    agents: list[str] | None = Field(default=None, description="Only these agent ids (None: any).")
    mode: Literal["enforce", "dry_run"] = "enforce"
    note: str = Field(default="", max_length=500)

    @field_validator("actions")
    @classmethod
    def _known_actions(cls, actions: list[str]) -> list[str]:
        unknown = [a for a in actions if a != "*" and a not in GATED_ACTIONS]
        if unknown:
            raise ValueError(f"unknown actions {unknown}; known: {', '.join(GATED_ACTIONS)} or *")
        return actions


class Policy(_Strict):
    """Rules in order; a request no rule in force allows is denied (default deny, not a setting)."""

    rules: list[PolicyRule] = Field(default_factory=list, max_length=200)

    @field_validator("rules")
    @classmethod
    def _unique_ids(cls, rules: list[PolicyRule]) -> list[PolicyRule]:
        seen: set[str] = set()
        for rule in rules:
            if rule.id in seen:
                raise ValueError(f"rule id {rule.id!r} is used twice")
            seen.add(rule.id)
        return rules


class Capabilities(_Strict):
    agent_defaults: list[CapabilityName] = Field(
        default=list(AGENT_CAPABILITIES), description="Granted to an agent when it registers."
    )
    ttl_sec: int | None = Field(default=None, ge=60, description="Expiry of the default grants (None: never).")


class Approvals(_Strict):
    first_traits: int = Field(default=0, ge=0, le=1000, description="An agent's first N traits wait for approval.")
    replaces_live: bool = Field(default=False, description="A trait that replaces a live one waits for approval.")
    ttl_sec: int = Field(default=86_400, ge=60, le=30 * 86_400, description="Unapproved mutations expire after this.")


class Retention(_Strict):
    """What the journal keeps (journal/retention.py); the engine applies a change within seconds."""

    keep_last: int = Field(default=10, ge=1, le=10_000, description="Snapshots kept: the last this many.")
    keep_every: int = Field(
        default=60, ge=1, le=1_000_000, description="Also every Nth snapshot ever taken, while `keep_ticks` allows."
    )
    keep_ticks: int = Field(
        default=1_296_000,
        ge=0,
        le=10**12,
        description="How many ticks behind the newest snapshot the `keep_every` ones stay (six hours at 60 "
        "ticks/s); 0: for ever. The oldest kept snapshot is where the journal's replayable history begins.",
    )
    segments: Literal["keep", "archive", "delete"] = Field(
        default="archive",
        description="Journal segments older than the oldest kept snapshot (and already projected into the audit): "
        "`keep` them, `archive` them (compressed, chain-checked, replayable, in GENESIS_JOURNAL_ARCHIVE_DIR) or "
        "`delete` them; each retirement has a receipt.",
    )


class Rounds(_Strict):
    ticks: int = Field(default=300, ge=10, le=36_000, description="Ticks per round (its accepting window).")
    member_idle_sec: int = Field(
        default=3600,
        ge=60,
        le=30 * 86_400,
        description="An agent that has not acted for this long loses its member to the pool (its number is "
        "never given to another agent).",
    )


class Governance(_Strict):
    proposal_ttl_sec: int = Field(default=86_400, ge=60, le=30 * 86_400, description="Unapproved proposals expire.")
    shadow_ticks: int = Field(default=600, ge=60, le=36_000, description="Length of a shadow run.")


class Selection(_Strict):
    max_live_traits: int = Field(
        default=40,
        ge=1,
        le=1000,
        description="Traits live at once. When the set is full, an activation makes room by taking out the least "
        "fit kept trait by the live ledger (one no Molbot carries first); with none to take out it is refused.",
    )
    extinction_ticks: int = Field(
        default=18_000,
        ge=300,
        le=10_000_000,
        description="A kept trait no Molbot has carried for this many ticks goes extinct: it leaves the live set "
        "(its owner may revive it).",
    )


class Manifest(_Strict):
    params: dict[str, float] = Field(
        default_factory=dict, description="Governed world parameters set by this manifest (absent: as configured)."
    )
    policy: Policy = Field(default_factory=Policy)
    capabilities: Capabilities = Field(default_factory=Capabilities)
    approvals: Approvals = Field(default_factory=Approvals)
    retention: Retention = Field(default_factory=Retention)
    rounds: Rounds = Field(default_factory=Rounds)
    governance: Governance = Field(default_factory=Governance)
    selection: Selection = Field(default_factory=Selection)

    @field_validator("params")
    @classmethod
    def _governed_params(cls, params: dict[str, float]) -> dict[str, float]:
        problems = []
        for name, value in params.items():
            bounds = GOVERNED_PARAMS.get(name)
            if bounds is None:
                problems.append(f"{name}: not a governed parameter ({', '.join(GOVERNED_PARAMS)})")
            elif not bounds.low <= value <= bounds.high:
                problems.append(f"{name}: {value:g} is outside [{bounds.low:g}, {bounds.high:g}]")
            elif bounds.integer and value != int(value):
                problems.append(f"{name}: must be a whole number")
        if problems:
            raise ValueError("; ".join(problems))
        return params


DEFAULT_RULES = (
    PolicyRule(
        id="agents-act",
        decision="allow",
        actions=list(AGENT_CAPABILITIES),
        roles=["agent"],
        note="agents act within their capability grants",
    ),
    PolicyRule(id="operators-govern", decision="allow", actions=["*"], roles=["operator"]),
)


class ManifestError(ValueError):
    """A document that is not a valid manifest; the message names each problem and where."""


def default_document(
    keep_last: int = 10, keep_every: int = 60, params: dict[str, float] | None = None
) -> dict[str, Any]:
    """The first manifest of a world: the default rules, parameters as configured."""
    manifest = Manifest(
        params=dict(params or {}),
        policy=Policy(rules=list(DEFAULT_RULES)),
        retention=Retention(keep_last=keep_last, keep_every=keep_every),
    )
    return manifest.model_dump(mode="json")


def validate(document: Any) -> Manifest:
    if not isinstance(document, dict):
        raise ManifestError("a manifest is a JSON object")
    try:
        return Manifest.model_validate(document)
    except ValidationError as exc:
        raise ManifestError(
            "; ".join(
                f"/{'/'.join(str(p) for p in e['loc'])}: {e['msg'].removeprefix('Value error, ')}" for e in exc.errors()
            )
        ) from None


def normalized(document: dict[str, Any]) -> dict[str, Any]:
    """The document with every default spelled out (what is stored and hashed)."""
    return validate(document).model_dump(mode="json")


def manifest_hash(document: Any) -> str:
    """sha256 (hex) of the document's canonical CBOR."""
    return hashlib.sha256(canonical.encode(document)).hexdigest()
