"""Temporal worker: runs the Genesis workflows and activities on task queue ``genesis``.

python worker.py
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from concurrent.futures import ThreadPoolExecutor

import redis.asyncio as aioredis
from temporalio.worker import Worker

from activities.evolution import EvolutionActivities
from activities.governance import GovernanceActivities
from activities.journal import JournalActivities
from activities.lifecycle import LifecycleActivities
from activities.metrics import PipelineMetrics
from activities.mutations import MutationRecordActivities
from activities.sandbox import SandboxActivities
from activities.selection import SelectionActivities
from activities.tasks import TaskActivities
from activities.trait_shadow import TraitShadowActivities
from activities.verdict_experiment import VerdictActivities
from activities.webhooks import WebhookActivities
from audit import projection
from genesis import gc_tuning, signing
from genesis.config import Settings, get_settings
from genesis.db.schema import exit_if_schema_behind
from genesis.db.session import get_sessionmaker
from genesis.logs import configure_logging
from genesis.metrics import serve_metrics, temporal_sdk_runtime
from genesis.temporal import connect
from genesis.workflow_api import audit_task_queue, journal_task_queue, llm_task_queue, verdict_task_queue
from gepa_steps.activities import GepaActivities
from workflows.registry import GEPA_WORKFLOWS, WORKFLOWS

log = logging.getLogger("genesis.worker")


def build_workers(client, settings: Settings, executor: ThreadPoolExecutor, sandbox: SandboxActivities) -> list[Worker]:
    """The main worker (every workflow; activities bounded by the sandbox tests' threads) and the
    LLM worker (the Architect's and Coder's calls, on their own queue and budget, so slow LLM
    answers never hold the slots sandbox tests need)."""
    sessions = get_sessionmaker(settings.database_url)
    redis = aioredis.from_url(settings.redis_url, socket_timeout=5)
    keyring = signing.ensure_keyring(settings.receipt_keys_path)  # created once, the first time
    records = MutationRecordActivities(sessions, redis, keyring)
    journal = JournalActivities(settings, sessions, keyring)
    governance = GovernanceActivities(settings, sessions, keyring)
    harm = settings.journal.harm_fitness if settings.journal.enabled else None
    lifecycle = LifecycleActivities(sessions, redis, settings.mutations_dir, records.record, harm)
    selection = SelectionActivities(sessions, redis, records.record)
    webhooks = WebhookActivities(settings)
    task_activities = TaskActivities(redis)
    evolution = EvolutionActivities(settings, sessions, redis)
    shadows = TraitShadowActivities(settings, sessions, sandbox.client)
    pipeline = Worker(
        client,
        task_queue=settings.task_queue,
        workflows=WORKFLOWS,
        activities=[
            records.validate_and_record_mutation,
            records.record_mutation_status,
            records.approval_needed,
            records.check_trait_code,
            sandbox.run_sandbox_test,
            lifecycle.activate_trait,
            lifecycle.rollback_trait,
            selection.retire_trait,
            selection.revive_trait,
            webhooks.deliver_webhook,
            task_activities.publish_task,
            task_activities.close_task,
            # Evolution cycles
            evolution.load_cycle_context,
            evolution.submit_proposal,
            evolution.record_cycle,
            evolution.publish_feed,
            evolution.apply_world_params,
            evolution.revert_world_params,
            # governed changes of the world's rules
            governance.decide_proposal,
            governance.apply_proposal,
        ],
        activity_executor=executor,
        max_concurrent_activities=settings.sandbox.concurrency,  # regular activities: sandbox tests only
        interceptors=[PipelineMetrics()],  # stage durations and verdicts for /metrics
    )
    llm = Worker(
        client,
        task_queue=llm_task_queue(settings.task_queue),
        activities=[evolution.architect_plan, evolution.coder_generate],
        max_concurrent_activities=settings.llm.concurrency,
    )
    journal_worker = Worker(
        client,
        task_queue=journal_task_queue(settings.task_queue),
        # the world's journal: replays, shadow runs of governance proposals and of held mutations
        # (and audit manifests of runs started before they had a queue of their own)
        activities=[
            journal.verify_replay,
            journal.sign_audit_manifest,
            governance.shadow_proposal,
            shadows.shadow_mutation,
        ],
        max_concurrent_activities=2,  # a replay is a CPU-bound subprocess
    )
    audit_worker = Worker(
        client,
        task_queue=audit_task_queue(settings.task_queue),
        activities=[journal.sign_audit_manifest],  # quick: a signature over an export's digest
        max_concurrent_activities=4,
    )
    verdicts = VerdictActivities(settings, sessions, sandbox.client)
    verdict_worker = Worker(
        client,
        task_queue=verdict_task_queue(settings.task_queue),
        # a trait's verdict: its plan, and replicates of paired forks of the live world
        activities=[verdicts.plan_verdict, verdicts.run_verdict_replicate],
        max_concurrent_activities=settings.verdict.concurrency,
    )
    return [pipeline, llm, journal_worker, audit_worker, verdict_worker]


def build_gepa_worker(client, settings: Settings, executor: ThreadPoolExecutor, gepa: GepaActivities) -> Worker:
    """GEPA optimisation steps poll a task queue of their own, so their long program runs never
    take the slots of the trait sandbox tests (and the other way round)."""
    return Worker(
        client,
        task_queue=settings.gepa_task_queue(),
        workflows=GEPA_WORKFLOWS,
        activities=[
            gepa.clone_repository,
            gepa.record_client,
            gepa.start_program,
            gepa.mutate,
            gepa.run_program,
            gepa.finish_program,
        ],
        activity_executor=executor,
        max_concurrent_activities=settings.gepa.concurrency,
    )


async def main() -> None:
    settings = get_settings()
    configure_logging("worker", settings)
    await exit_if_schema_behind(settings.database_url)
    gc_tuning.observe_gc_pauses()
    serve_metrics("worker", settings.metrics_host, settings.worker.metrics_port)
    client = await connect(settings, temporal_sdk_runtime(settings.metrics_host, settings.worker.sdk_metrics_port))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    sandbox = await asyncio.to_thread(SandboxActivities, settings)  # builds the image, warms the pool
    # GEPA: the program image, the egress network and gateway (gepa_steps/egress.py).
    gepa = await asyncio.to_thread(GepaActivities, settings, get_sessionmaker(settings.database_url))
    projecting = None
    if settings.journal.enabled:  # the audit projection follows the world's journal (audit/projection.py)
        keyring = signing.ensure_keyring(settings.receipt_keys_path)
        sessions = get_sessionmaker(settings.database_url)
        projecting = asyncio.create_task(projection.follow(sessions, settings.journal_dir, keyring, stop))
    try:
        with (
            ThreadPoolExecutor(max_workers=settings.sandbox.concurrency) as executor,
            ThreadPoolExecutor(max_workers=settings.gepa.concurrency, thread_name_prefix="gepa") as gepa_executor,
        ):
            workers = build_workers(client, settings, executor, sandbox)
            gepa_worker = build_gepa_worker(client, settings, gepa_executor, gepa)
            log.info("start-up heap frozen: %d objects", gc_tuning.freeze_startup_heap())
            log.info(
                "worker polling task queues %s on %s",
                ", ".join(repr(w.task_queue) for w in (*workers, gepa_worker)),
                settings.temporal.address,
            )
            async with contextlib.AsyncExitStack() as running:
                for worker in (*workers, gepa_worker):
                    await running.enter_async_context(worker)
                await stop.wait()
    finally:
        stop.set()
        if projecting is not None:
            await projecting
        await asyncio.to_thread(gepa.close)
        await asyncio.to_thread(sandbox.close)
    log.info("worker stopped")


if __name__ == "__main__":
    asyncio.run(main())
