"""A recorded mutation proposal (a ``mutations`` row: a trait's code) as the input of its
MutationWorkflow: shared by the API's workflow starter and the evolution cycle, whose Coder proposes
like any agent. A proposal to change the world's rules is a governance proposal
(governance/records/proposals.py)."""

from __future__ import annotations

from genesis.config import Settings
from genesis.db.models import Mutation
from genesis.dto import MutationInput, TraitRef


def mutation_input(record: Mutation, settings: Settings) -> MutationInput:
    """The workflow input of a recorded mutation (settings as of the start). A modification
    carries the version it replaces; a new trait under GENESIS_TRAIT_EXISTS_POLICY=reject must
    still be new at activation (api/mutations/admission.py checked both at propose time); and who, if
    anyone, allowed it to replace another agent's version (activation checks the owner again)."""
    replaces = (
        TraitRef(trait_name=record.replaces_trait, version=record.replaces_version) if record.replaces_trait else None
    )
    return MutationInput(
        replaces=replaces,
        require_new=replaces is None and settings.trait.exists_policy == "reject",
        replacement_approved_by=record.replacement_approved_by,
        mutation_id=record.mutation_id,
        agent_id=record.agent_id,
        trait_name=record.trait_name,
        code=record.code,
        goal=record.goal,
        task_id=record.task_id,
        activate=settings.activate_mutations,
        observation_window_ticks=settings.observation.window_ticks,
        observation_timeout_s=settings.observation.timeout_s,
        rollback_threshold=settings.rollback_threshold,
        min_carriers=settings.observation.min_carriers,
        min_carrier_share=settings.observation.min_carrier_share,
        experiment=settings.verdict.experiment(),
        selection=settings.verdict.mode != "off",
        notify_url=record.notify_url,
        webhook_retry_window_s=settings.webhook.retry_window_s,
        webhook_max_retry_interval_s=settings.webhook.max_retry_interval_s,
    )
