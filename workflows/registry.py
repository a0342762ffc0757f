"""Every workflow the worker registers, by task queue: what production runs, so what a recorded
history must replay on (genesis/cli/replay.py)."""

from __future__ import annotations

from workflows.evolution import EvolutionCycleWorkflow
from workflows.gepa_connect import GepaConnectWorkflow
from workflows.gepa_step import GepaStepWorkflow
from workflows.mutation import MutationWorkflow
from workflows.rollback import RollbackWorkflow
from workflows.task import TaskWorkflow

WORKFLOWS = [MutationWorkflow, RollbackWorkflow, TaskWorkflow, EvolutionCycleWorkflow]
GEPA_WORKFLOWS = [GepaStepWorkflow, GepaConnectWorkflow]  # on the GEPA task queue (build_gepa_worker)
