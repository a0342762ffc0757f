"""Every workflow the worker registers, by task queue: what production runs, so what a recorded
history must replay on (cli/replay.py)."""

from __future__ import annotations

from gepa_steps.connect_workflow import GepaConnectWorkflow
from gepa_steps.step_workflow import GepaStepWorkflow
from workflows.check import CheckWorkflow
from workflows.evolution import EvolutionCycleWorkflow
from workflows.extinction import ExtinctionWorkflow, RevivalWorkflow
from workflows.governance import GovernanceWorkflow
from workflows.journal import AuditManifestWorkflow, ReplayVerifyWorkflow
from workflows.mutation import MutationWorkflow
from workflows.rollback import RollbackWorkflow
from workflows.task import TaskWorkflow

WORKFLOWS = [
    MutationWorkflow,
    RollbackWorkflow,
    ExtinctionWorkflow,
    RevivalWorkflow,
    TaskWorkflow,
    EvolutionCycleWorkflow,
    CheckWorkflow,
    ReplayVerifyWorkflow,
    AuditManifestWorkflow,
    GovernanceWorkflow,
]
GEPA_WORKFLOWS = [GepaStepWorkflow, GepaConnectWorkflow]  # on the GEPA task queue (build_gepa_worker)
