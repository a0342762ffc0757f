"""What other processes need to know about the workflows: names and search attributes."""

from __future__ import annotations

from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

MUTATION_WORKFLOW = "MutationWorkflow"

SA_AGENT_ID = SearchAttributeKey.for_keyword("GenesisAgentId")
SA_TRAIT_NAME = SearchAttributeKey.for_keyword("GenesisTraitName")
SA_STATUS = SearchAttributeKey.for_keyword("GenesisStatus")
SA_FAILURE_CODE = SearchAttributeKey.for_keyword("GenesisFailureCode")
SA_PROGRAM_ID = SearchAttributeKey.for_keyword("GenesisProgramId")  # GEPA steps
SA_PROBLEM_TYPE = SearchAttributeKey.for_keyword("GenesisProblemType")  # tasks and evolution cycles
# Every key, registered by `make services` (scripts/services.sh), compose's migrate one-shot
# (genesis/temporal_setup.py) and the test servers.
SEARCH_ATTRIBUTE_KEYS = (SA_AGENT_ID, SA_TRAIT_NAME, SA_STATUS, SA_FAILURE_CODE, SA_PROGRAM_ID, SA_PROBLEM_TYPE)


def search_attributes(
    agent_id: str | None = None,
    trait_name: str | None = None,
    program_id: str | None = None,
    problem_type: str | None = None,
) -> TypedSearchAttributes:
    """A workflow's attributes at its start, those that apply: how an operator finds it in the
    Temporal UI (``GenesisAgentId = "agt_…"``, ``GenesisProblemType = "starvation"``, ...)."""
    given = (
        (SA_AGENT_ID, agent_id),
        (SA_TRAIT_NAME, trait_name),
        (SA_PROGRAM_ID, program_id),
        (SA_PROBLEM_TYPE, problem_type),
    )
    return TypedSearchAttributes([SearchAttributePair(key, value) for key, value in given if value])


# POST /api/mutations/check: the gatekeeper and the sandbox test of code, recording nothing. Its
# workflows carry none of the search attributes above, so a search for mutations never lists them.
CHECK_WORKFLOW = "CheckWorkflow"


def check_workflow_id(check_id: str) -> str:
    return f"check-{check_id}"


ROLLBACK_WORKFLOW = "RollbackWorkflow"


def rollback_workflow_id(mutation_id: str) -> str:
    return f"rollback-{mutation_id}"


# Selection after the verdict (workflows/extinction.py): a kept trait goes extinct, an extinct
# one is revived by its owner.
EXTINCTION_WORKFLOW = "ExtinctionWorkflow"
REVIVAL_WORKFLOW = "RevivalWorkflow"


def extinction_workflow_id(mutation_id: str) -> str:
    return f"extinction-{mutation_id}"


def revival_workflow_id(mutation_id: str) -> str:
    return f"revival-{mutation_id}"


TASK_WORKFLOW = "TaskWorkflow"
TASK_SIGNAL_MUTATION_ACTIVATED = "mutation_activated"  # arg: mutation_id (from MutationWorkflow)
TASK_SIGNAL_RESOLVE = "resolve"  # arg: reason (the Watcher, or POST /api/agents/tasks/{id}/resolve)
TASK_QUERY = "task"  # the AgentTask, or None before the workflow has run


def task_workflow_id(task_id: str) -> str:
    return f"task-{task_id}"


EVOLUTION_WORKFLOW = "EvolutionCycleWorkflow"
EVOLUTION_SIGNAL_WORLD_SNAPSHOT = "world_snapshot"  # the engine, while a world-parameter change is observed
EVOLUTION_QUERY = "cycle"  # the workflow's current stage and what it has so far


def evolution_workflow_id(trigger_id: str) -> str:
    return f"evolution-{trigger_id}"


def trigger_id_of(workflow_id: str) -> str:
    """The cycle's trigger id from its workflow id (a Schedule's runs carry their time in it)."""
    return workflow_id.removeprefix("evolution-")


def journal_task_queue(task_queue: str) -> str:
    """Replays of the journal and manifest signatures run on their own queue (worker.py): a replay
    of an hour of world never holds a slot that sandbox tests need."""
    return f"{task_queue}-journal"


def audit_task_queue(task_queue: str) -> str:
    """Audit manifests are signed on a queue of their own (worker.py): however busy replays and
    shadows keep the journal queue, an export's signature is never waiting behind them."""
    return f"{task_queue}-audit"


def verdict_task_queue(task_queue: str) -> str:
    """A trait's verdict experiment runs on its own queue (worker.py): workers on more machines add
    verdict capacity, and a replicate never holds a slot that sandbox tests need."""
    return f"{task_queue}-verdicts"


def llm_task_queue(task_queue: str) -> str:
    """The Architect's and Coder's LLM calls run on their own queue (worker.py), with their own
    concurrency budget."""
    return f"{task_queue}-llm"


# The world's journal (workflows/journal.py): a replay that checks recorded state hashes, and the
# signature of an audit export's manifest.
REPLAY_VERIFY_WORKFLOW = "ReplayVerifyWorkflow"
AUDIT_MANIFEST_WORKFLOW = "AuditManifestWorkflow"
GOVERNANCE_WORKFLOW = "GovernanceWorkflow"
GOVERNANCE_DECIDE_SIGNAL = "decide"
MUTATION_APPROVAL_SIGNAL = "approval"


def replay_verify_workflow_id(epoch: int, from_tick: int, to_tick: int) -> str:
    """One replay per epoch and range (its end pinned when first asked): a request while it runs
    joins it, and one after it ended gets its result."""
    return f"world-replay-e{epoch}-{from_tick}-{to_tick}"
