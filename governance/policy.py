"""The policy gate: whether one request may go ahead, decided from the manifest's rules alone.

Order of the decision:

1. an action the gate does not know is denied;
2. an agent never performs an operator's action (approvals need an operator key);
3. an agent needs a live grant of the capability named like the action;
4. the rules in order: the first rule in force whose ``actions``, ``roles`` and ``agents`` all
   match decides; a ``dry_run`` rule that matches is noted with what it would have decided, and
   the search goes on;
5. nothing allowed it: denied (default deny).

Pure and deterministic: the same manifest and request give the same decision, whose record
(:meth:`Decision.to_data`) is what the journal keeps. Replay reads those records; it never
evaluates a policy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .manifest import AGENT_CAPABILITIES, GATED_ACTIONS, OPERATOR_ACTIONS, Policy, PolicyRule

DEFAULT_DENY = "default-deny"


@dataclass(frozen=True)
class Request:
    role: str  # "agent" or "operator"
    action: str
    agent_id: str | None = None  # the agent (role agent), or the operator's name
    capabilities: frozenset[str] = frozenset()  # the agent's live grants
    resource: str = ""  # what the request is about (a trait, a mutation, a round), for the record

    def to_data(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "action": self.action,
            "subject": self.agent_id,
            "capabilities": sorted(self.capabilities),
            "resource": self.resource,
        }


@dataclass(frozen=True)
class Decision:
    allowed: bool
    rule: str  # the rule that decided, or DEFAULT_DENY, or the step that refused ("capability", ...)
    reason: str
    manifest_hash: str
    would: list[dict[str, str]] = field(default_factory=list)  # dry-run rules that matched, in order

    @property
    def decision(self) -> str:
        return "allow" if self.allowed else "deny"

    def to_data(self) -> dict[str, Any]:
        return {
            "decision": self.decision,
            "rule": self.rule,
            "reason": self.reason,
            "manifest_hash": self.manifest_hash,
            "dry_run": list(self.would),
        }


def _matches(rule: PolicyRule, request: Request) -> bool:
    return (
        ("*" in rule.actions or request.action in rule.actions)
        and request.role in rule.roles
        and (rule.agents is None or request.agent_id in rule.agents)
    )


def decide(policy: Policy, manifest_hash: str, request: Request) -> Decision:
    def deny(rule: str, reason: str, would: list[dict[str, str]] | None = None) -> Decision:
        return Decision(False, rule, reason, manifest_hash, would or [])

    if request.action not in GATED_ACTIONS:
        return deny("unknown-action", f"{request.action!r} is not a gated action ({', '.join(GATED_ACTIONS)})")
    if request.role not in ("agent", "operator"):
        return deny("unknown-role", f"{request.role!r} is not a role (agent, operator)")
    if request.role == "agent":
        if request.action in OPERATOR_ACTIONS:
            return deny("operator-only", f"{request.action} needs an operator key")
        if request.action in AGENT_CAPABILITIES and request.action not in request.capabilities:
            return deny("capability", f"the agent holds no live grant of {request.action}")
    would: list[dict[str, str]] = []
    for rule in policy.rules:
        if not _matches(rule, request):
            continue
        if rule.mode == "dry_run":
            would.append({"rule": rule.id, "decision": rule.decision})
            continue
        reason = f"rule {rule.id} {'allows' if rule.decision == 'allow' else 'denies'} {request.action}"
        return Decision(rule.decision == "allow", rule.id, reason, manifest_hash, would)
    return deny(DEFAULT_DENY, f"no rule in force allows {request.action} (default deny)", would)
