"""What other processes need to know about the workflows: names and search attributes."""

from __future__ import annotations

from temporalio.common import SearchAttributeKey

MUTATION_WORKFLOW = "MutationWorkflow"

SA_AGENT_ID = SearchAttributeKey.for_keyword("GenesisAgentId")
SA_TRAIT_NAME = SearchAttributeKey.for_keyword("GenesisTraitName")
SA_STATUS = SearchAttributeKey.for_keyword("GenesisStatus")
SA_FAILURE_CODE = SearchAttributeKey.for_keyword("GenesisFailureCode")

ROLLBACK_WORKFLOW = "RollbackWorkflow"


def rollback_workflow_id(mutation_id: str) -> str:
    return f"rollback-{mutation_id}"
