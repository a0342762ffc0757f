"""The policy gate's decisions (governance/policy.py): default deny, capabilities first, first match,
dry-run rules noted and skipped, and nothing about a decision that depends on anything but its inputs."""

from __future__ import annotations

import pytest

from governance import manifest, policy
from governance.manifest import AGENT_CAPABILITIES, Policy, PolicyRule

pytestmark = pytest.mark.unit

DEFAULT = manifest.Manifest.model_validate(manifest.default_document())
H = manifest.manifest_hash(manifest.default_document())
ALL = frozenset(AGENT_CAPABILITIES)


def decide(rules: Policy, role: str, action: str, agent: str | None = "agt_a", held=ALL) -> policy.Decision:
    return policy.decide(rules, H, policy.Request(role, action, agent, frozenset(held)))


def test_no_rules_deny_everything():
    for action in manifest.GATED_ACTIONS:
        for role in ("agent", "operator"):
            d = decide(Policy(), role, action)
            assert not d.allowed and d.rule in (policy.DEFAULT_DENY, "operator-only"), (role, action, d)


def test_the_default_rules_let_agents_act_within_their_grants_and_operators_govern():
    for action in AGENT_CAPABILITIES:
        assert decide(DEFAULT.policy, "agent", action).allowed
        assert decide(DEFAULT.policy, "agent", action).rule == "agents-act"
        assert decide(DEFAULT.policy, "operator", action).rule == "operators-govern"
    for action in manifest.OPERATOR_ACTIONS:
        assert decide(DEFAULT.policy, "operator", action).allowed
        denied = decide(DEFAULT.policy, "agent", action)
        assert (denied.allowed, denied.rule) == (False, "operator-only")
        assert "operator key" in denied.reason


def test_an_agent_without_the_grant_is_denied_before_any_rule():
    everyone = Policy(rules=[PolicyRule(id="all", decision="allow", actions=["*"])])
    d = decide(everyone, "agent", "actions.submit", held=ALL - {"actions.submit"})
    assert (d.allowed, d.rule) == (False, "capability")
    assert "no live grant of actions.submit" in d.reason


def test_the_first_matching_rule_decides():
    rules = Policy(
        rules=[
            PolicyRule(id="no-bob", decision="deny", actions=["*"], agents=["agt_bob"]),
            PolicyRule(id="agents", decision="allow", actions=["traits.propose"], roles=["agent"]),
        ]
    )
    assert decide(rules, "agent", "traits.propose", "agt_bob").rule == "no-bob"
    assert decide(rules, "agent", "traits.propose", "agt_ann").rule == "agents"
    assert decide(rules, "agent", "traits.modify", "agt_ann").rule == policy.DEFAULT_DENY
    assert decide(rules, "operator", "traits.propose", "ops").rule == policy.DEFAULT_DENY


def test_dry_run_rules_are_noted_and_skipped():
    rules = Policy(
        rules=[
            PolicyRule(id="try-deny", decision="deny", actions=["traits.propose"], mode="dry_run"),
            PolicyRule(id="try-allow", decision="allow", actions=["traits.modify"], mode="dry_run"),
            *DEFAULT.policy.rules,
        ]
    )
    d = decide(rules, "agent", "traits.propose")
    assert (d.allowed, d.rule, d.would) == (True, "agents-act", [{"rule": "try-deny", "decision": "deny"}])
    only_dry = Policy(rules=[PolicyRule(id="try-allow", decision="allow", actions=["*"], mode="dry_run")])
    d = decide(only_dry, "operator", "rules.approve")
    assert (d.allowed, d.rule, d.would) == (False, policy.DEFAULT_DENY, [{"rule": "try-allow", "decision": "allow"}])


def test_unknown_actions_and_roles_are_denied_with_the_reason():
    assert decide(DEFAULT.policy, "agent", "world.destroy").rule == "unknown-action"
    assert decide(DEFAULT.policy, "root", "traits.propose").rule == "unknown-role"


def test_a_decision_records_its_manifest_and_is_the_same_for_the_same_inputs():
    a = decide(DEFAULT.policy, "agent", "traits.propose").to_data()
    b = decide(DEFAULT.policy, "agent", "traits.propose").to_data()
    assert a == b and a["manifest_hash"] == H and a["decision"] == "allow"


def test_rules_refuse_unknown_actions_and_duplicate_ids():
    with pytest.raises(ValueError, match="unknown actions"):
        PolicyRule(id="x", decision="allow", actions=["traits.eat"])
    with pytest.raises(ValueError, match="used twice"):
        Policy(rules=[PolicyRule(id="x", decision="allow", actions=["*"])] * 2)
