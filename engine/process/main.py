"""The world engine process, ``python -m engine`` (engine/__main__.py runs :func:`run`); its loop
is engine/process/loop.py.

At start the trait registry is rebuilt from Postgres (self-heal), live traits run in a trait-host
container (engine/process/live_traits.py), each snapshot is reported to the workflows observing a
live trait (engine/process/observers.py) and a quarantined trait to the mutation lifecycle
(engine/process/quarantine.py)."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import redis.asyncio as aioredis
from prometheus_client import REGISTRY
from sqlalchemy import select
from temporalio.client import Client

from audit import journal_outbox, receipts
from engine.core.model import world_params
from engine.core.replay import ReplayError
from engine.core.world import World
from genesis import canonical, gc_tuning, signing
from genesis.config import get_settings
from genesis.db.models import Mutation
from genesis.db.schema import EXIT_SCHEMA_BEHIND, exit_if_schema_behind
from genesis.db.session import get_engine, get_sessionmaker
from genesis.effects import WorldSample
from genesis.logs import configure_logging
from genesis.metrics import serve_metrics
from genesis.temporal import connect
from governance.records import manifests
from pipeline import registry

from .journaling import WorldJournal
from .live_traits import HostTraitRunner
from .loop import Engine
from .metrics import EngineCollector
from .observers import ObservationReporter
from .quarantine import QuarantineReporter
from .retention import RetentionKeeper
from .rollbacks import RollbackFollower
from .rounds import RoundKeeper
from .selection import SelectionKeeper
from .world_overrides import ParamsFollower

log = logging.getLogger("genesis.engine")
RECORD_EVERY_S = 1.0


async def self_heal_registry(settings, redis: aioredis.Redis) -> None:
    try:
        version = await registry.rebuild_from_postgres(get_sessionmaker(settings.database_url), redis)
        log.info("trait registry rebuilt from Postgres (registry v%d)", version)
    except Exception as exc:  # the world runs without live traits until the next refresh
        log.warning("could not rebuild the trait registry from Postgres: %s", exc)


def temporal_connector(settings) -> Callable[[], Awaitable[Client]]:
    """One Temporal client for the engine, connected on first use: the world does not wait for it."""
    client: Client | None = None
    lock = asyncio.Lock()

    async def get() -> Client:
        nonlocal client
        async with lock:
            if client is None:
                client = await connect(settings)
        return client

    return get


def observation_hook(runner: HostTraitRunner, params: ParamsFollower, temporal: Callable[[], Awaitable[Client]]):
    reporter: ObservationReporter | None = None

    async def report(snapshot: dict) -> None:
        nonlocal reporter
        live = runner.mutation_ids()
        if not live and not params.observer_workflow:
            return
        if reporter is None:
            reporter = ObservationReporter(await temporal())
        sample = WorldSample(
            tick=snapshot["tick"],
            run_id=snapshot.get("run_id", ""),
            entity_count=snapshot["entity_count"],
            avg_energy=snapshot["avg_energy"],
            period_starvation=snapshot["death_starvation"],
            trait_stats=snapshot.get("trait_stats") or {},
        )
        await reporter.report(sample, live)
        if params.observer_workflow:  # an evolution cycle observing a world-parameter change
            await reporter.report_to(params.observer_workflow, sample)

    return report


def open_world(settings) -> tuple[WorldJournal | None, World]:
    """The world the journal ends with (a new one when it is empty or off). A journal that cannot
    be replayed stops the engine with the reason: it is never overwritten or ignored."""

    def new_world() -> World:
        return World(world_params(settings.engine), seed=settings.engine.seed)

    if not settings.journal.enabled:
        log.warning("the journal is off (GENESIS_JOURNAL_ENABLED=false): a fresh world, nothing recorded")
        return None, new_world()
    try:
        return WorldJournal.open(settings, new_world)
    except ReplayError as exc:
        log.error("the journal cannot be resumed: %s", exc)
        sys.exit(EXIT_SCHEMA_BEHIND)


# A rolled-back mutation's rollback point stays this long: an operator may take the world back to
# before it (POST /v1/world/rollback {"mutation_id"}), as the feed suggests for one that did harm.
PIN_AFTER_ROLLBACK_S = 24 * 3600.0


async def still_open(sessions, pinned: set[str]) -> set[str]:
    """The pinned mutations whose rollback points are still needed: under observation, or rolled
    back within a day (an operator may still take the world back to before them)."""
    async with sessions() as session:
        rows = (
            await session.execute(
                select(Mutation.mutation_id, Mutation.status, Mutation.updated_at).where(
                    Mutation.mutation_id.in_(pinned)
                )
            )
        ).all()
    recent = datetime.now(UTC) - timedelta(seconds=PIN_AFTER_ROLLBACK_S)
    found = {m for m, _, _ in rows}
    kept = {m for m, status, at in rows if status == "activated" or (status == "rolled_back" and at >= recent)}
    return kept | (pinned - found)  # a mutation not on record (yet): keep its point


async def keep_the_record(
    settings, engine: Engine, keyring: signing.Keyring, redis: aioredis.Redis, stop: asyncio.Event
) -> None:
    """About once a second: carry the new receipts and policy decisions into the journal (where the
    audit finds them: audit/journal_outbox.py); re-sign the receipt chain's head once a minute, so
    its time says how current it is; and apply the manifest's retention to the journal behind the
    audit projection, which the worker keeps up (audit/projection.py, engine/process/retention.py)."""
    sessions = get_sessionmaker(settings.database_url)
    signer = receipts.Signer(sessions, keyring)
    assert engine.journal is not None
    keeper = RetentionKeeper(
        settings, engine, engine.journal, get_engine(settings.database_url), sessions, keyring, redis
    )
    try:  # the journal's status at once, not after the first round (which waits for Postgres)
        await keeper.publish()
    except Exception as exc:
        log.warning("journal status: %s", exc)
    while not stop.is_set():
        try:
            await signer.ready()  # the public keys published once (retried while Postgres is away)
            await receipts.refresh_head(sessions, keyring)
            for outbox in journal_outbox.OUTBOXES:
                rows = await journal_outbox.unjournaled(sessions, outbox)
                if rows:
                    placed = engine.journal_events(outbox.kind, [canonical.decode(r.body) for r in rows])
                    done = {r.id: seq for r, seq in zip(rows, placed, strict=True)}
                    await journal_outbox.mark_journaled(sessions, outbox, done)
            if engine.journal.pins:
                engine.journal.unpin(await still_open(sessions, set(engine.journal.pins)))
            await keeper.maybe_run()
        except Exception as exc:  # Postgres away: retried
            log.warning("receipts and journal retention: %s", exc)
        try:
            await asyncio.wait_for(stop.wait(), RECORD_EVERY_S)
        except TimeoutError:
            pass


async def main() -> None:
    settings = get_settings()
    await exit_if_schema_behind(settings.database_url)
    redis = aioredis.from_url(settings.redis_url, socket_timeout=5, socket_connect_timeout=5)
    await self_heal_registry(settings, redis)
    temporal = temporal_connector(settings)
    quarantine = QuarantineReporter(settings, redis, get_sessionmaker(settings.database_url), temporal)
    log.info("%d quarantined trait version(s) on record", await quarantine.load())
    journal, world = open_world(settings)
    runner = HostTraitRunner(settings, redis, quarantine=quarantine)
    engine = Engine(settings, runner, world=world, journal=journal)
    database = get_engine(settings.database_url)

    async def governed_params() -> dict:
        async with database.connect() as conn:
            return dict((await manifests.current(conn, settings)).document.get("params", {}))

    params = ParamsFollower(world_params(settings.engine), engine.request_params, redis, governed_params)
    engine.snapshot_hooks.append(observation_hook(runner, params, temporal))
    engine.snapshot_hooks.append(SelectionKeeper(settings, engine, redis, database, temporal))
    REGISTRY.register(EngineCollector(engine))
    gc_tuning.observe_gc_pauses()
    # A full collection over the start-up heap costs several ticks' budget: skip it from now on.
    log.info("start-up heap frozen: %d objects", gc_tuning.freeze_startup_heap())
    serve_metrics("engine", settings.metrics_host, settings.engine.metrics_port)
    try:  # overrides in force apply from the first tick, not from whenever the follower first reads
        await params.refresh()
    except Exception as exc:
        log.warning("could not read the world parameter overrides at start: %s", exc)
    stop = asyncio.Event()
    following = asyncio.create_task(params.follow(stop))
    rollbacks = asyncio.create_task(RollbackFollower(engine, redis).follow(stop))
    keyring = signing.ensure_keyring(settings.receipt_keys_path)
    projecting = (
        asyncio.create_task(keep_the_record(settings, engine, keyring, redis, stop)) if journal is not None else None
    )
    keeping_rounds = None
    if settings.rounds.enabled:  # agents' rounds (engine/process/rounds.py)
        keeper = RoundKeeper(settings, engine, database, keyring)
        keeping_rounds = asyncio.create_task(keeper.run(stop))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await engine.run(stop)
    finally:
        stop.set()
        engine.cancel_rounds()
        await following
        await rollbacks
        if keeping_rounds is not None:
            await keeping_rounds
        if projecting is not None:
            await projecting
        await engine.close()
        if journal is not None:
            journal.close()
        await quarantine.close()
        await redis.aclose()
        log.info(
            "engine stopped at tick %d: mean tick %.3f ms, %d overruns, %d snapshots, %d trait-host restarts",
            engine.world.tick,
            engine.mean_tick_ms(),
            engine.tick_overruns,
            engine.snapshots_taken,
            runner.stats.restarts,
        )


def run() -> None:
    """``python -m engine``: logging as configured, then the engine until SIGINT or SIGTERM."""
    configure_logging("engine", get_settings())
    asyncio.run(main())
