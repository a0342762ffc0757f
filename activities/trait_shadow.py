"""The shadow of a held mutation: what its trait would do in the live world, run beside the world
without it before an operator decides.

Two copies of the world are forked from the latest kept snapshot of the journal. Both run the
traits live now; the **candidate** also runs the mutation's trait, available to newborns as
activation would make it. A replacement runs in place of the live version, on its carriers; a
new trait starts on a tenth of the Molbots (at least ``MIN_SEEDED``, evenly by id, even past
their limit of traits): with dozens of live traits a newborn rarely gains a new one within a
window, and a shadow with no carrier would show nothing of what the trait does. Each side's
traits run in a trait-host container of its own — this process runs only the world core — and
the side's world applies their intents through the live apply path (``engine.core.inputs``), tick by
tick, for the manifest's ``governance.shadow_ticks``. A trait that fails as the live engine would
quarantine it (errors or CPU overruns on ``STRIKES_TO_QUARANTINE`` ticks in a row, or a kill
confirmed while it ran alone) leaves its side's world at that tick, as a quarantine would.

The report has, for each side, population, energy, births and deaths (``engine.core.shadow``'s
summary) and each trait's calls, errors, timeouts and quarantine tick, with the candidate trait's
carriers; with deterministic traits, two runs give the same bytes (``report_hash``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import secrets
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import docker
from sqlalchemy.ext.asyncio import async_sessionmaker
from temporalio import activity

from activities import names
from engine.core.inputs import HOST_MISSED, HOST_OK, TickInputs
from engine.core.replay import ReplayError, load_world
from engine.core.shadow import Run, differences, pick_snapshot, report_hash
from engine.core.world import TickReport, World
from genesis.config import Settings
from genesis.dto import TraitShadowOutcome, TraitShadowRequest
from governance.records import manifests
from journal.reader import JournalReader
from journal.snapshots import SnapshotStore
from pipeline import registry
from pipeline.live import live_versions
from sandbox import image
from sandbox.container import IsolationLimits, TraitHostContainer, hello_message
from sandbox.host_client import HOST_START_DEADLINE_S, WORKERS_SHARE, HostClient, TraitAccount, account

REPORT_VERSION = 1
MAX_HOST_RESTARTS = 3  # per side; past them the run is an infrastructure failure (retried)
LOST_TICK_RETRIES = 3  # a tick the busy machine kept from finishing is run again
PROGRESS_EVERY = 50  # ticks
BESIDE_CPU_SHARES = 2  # the least Docker allows, against the live host's 4096 and the default 1024
SEEDED_SHARE = 0.1  # of the fork's Molbots that start with a new trait
MIN_SEEDED = 5  # the carriers a verdict needs by default (MutationInput.min_carriers)


T = TypeVar("T")


class ShadowStopped(Exception):
    """The activity was cancelled while the shadow ran."""


@dataclass
class TraitRecord(TraitAccount):
    """One trait's run on one side: what the live engine counts, and where it would have left."""

    entry: registry.RegistryEntry = field(kw_only=True)
    first_error: str | None = None
    quarantined_at: int | None = None
    quarantine_reason: str | None = None

    def summary(self) -> dict[str, Any]:
        return {
            "version": self.entry.version or None,  # None: the held mutation's own
            "mutation_id": self.entry.mutation_id,
            "calls": self.calls,
            "errors": self.errors,
            "timeouts": self.timeouts,
            "first_error": self.first_error,
            "quarantined_at_tick": self.quarantined_at,
            "quarantine_reason": self.quarantine_reason,
        }


@dataclass
class Side:
    """One side of the shadow: its world, its trait host and what its traits did."""

    name: str
    run: Run
    traits: dict[str, TraitRecord]
    new_host: Callable[[str], HostClient]
    host: HostClient | None = None
    restarts: int = 0
    missed_ticks: int = 0
    unloadable: dict[str, str] = field(default_factory=dict)

    @property
    def world(self) -> World:
        return self.run.world

    def running(self) -> list[str]:
        return sorted(n for n, t in self.traits.items() if t.quarantined_at is None and n not in self.unloadable)

    def start_host(self) -> None:
        self.host = self.new_host(self.name)
        for name, record in sorted(self.traits.items()):
            if name in self.unloadable or record.quarantined_at is not None:
                continue
            entry = record.entry
            error = self.host.load(name, entry.code, entry.class_name, entry.agent_id)
            if error is not None:
                self.unloadable[name] = error[:300]

    def host_failed(self) -> None:
        if self.host is not None:
            self.host.close()
            self.host = None
        self.restarts += 1
        if self.restarts > MAX_HOST_RESTARTS:
            raise RuntimeError(f"the {self.name} side's trait host failed {self.restarts} times")
        self.start_host()

    def close(self) -> None:
        if self.host is not None:
            self.host.close()
            self.host = None

    def tick(self, deadline_s: float) -> TickReport:
        """One tick: the running traits' intents from the host, then the world's step."""
        world = self.world
        inputs = TickInputs(tick=world.tick)
        run = self.running()
        views = world.trait_views(run, raw=True) if run else {"count": 0}
        if views["count"]:
            inputs.host, inputs.intents = self._ask(world.tick, views, run, deadline_s)
        return self.run.tick(inputs)

    def _ask(self, tick: int, views: dict, run: list[str], deadline_s: float) -> tuple[str, Any]:
        assert self.host is not None
        agents = {name: record.entry.agent_id for name, record in self.traits.items()}
        # A tick the busy machine kept from finishing (a result lost through nobody's fault) is
        # run again: a shadow must equal a paced run that kept its pace.
        reply = self.host.tick(
            tick, views, run, deadline_s, agent_of=agents, complete=True, lost_retries=LOST_TICK_RETRIES
        )
        if not reply.ok:
            self.missed_ticks += 1  # as live: the tick runs on instinct and the host is replaced
            self.host_failed()
            return HOST_MISSED, None
        if any(r.get("lost") for r in reply.results.values()):
            raise RuntimeError(f"tick {tick} of the {self.name} side could not finish {LOST_TICK_RETRIES + 1} times")
        self._account(tick, reply.results)
        return HOST_OK, reply.intents

    def _account(self, tick: int, results: dict) -> None:
        """As the live engine judges a trait's results (``sandbox.host_client.account``); a trait
        it would quarantine leaves this side's world."""
        for name in sorted(results):
            record, result = self.traits.get(name), results[name]
            if record is None or not isinstance(result, dict):
                continue
            why = account(record, result)
            if record.first_error is None and record.last_error is not None:
                record.first_error = record.last_error[:300]
            if why is not None:
                self._quarantine(record, name, tick, why[:500])

    def _quarantine(self, record: TraitRecord, name: str, tick: int, why: str) -> None:
        record.quarantined_at, record.quarantine_reason = tick, why
        self.world.remove_trait(name)  # what the quarantine's trait-set change does to the world

    def summary(self, ticks: int) -> dict[str, Any]:
        return {
            **self.run.summary(ticks),
            "traits": {name: record.summary() for name, record in sorted(self.traits.items())},
            "unloadable": dict(sorted(self.unloadable.items())),
            "missed_ticks": self.missed_ticks,
        }


def fork(store: SnapshotStore, meta: Any, live: list[str]) -> World:
    """A world from the snapshot with exactly the ``live`` traits: traits its Molbots carry that
    are not live now leave it, as their rollback or quarantine did to the live world."""
    world = load_world(store, meta)
    carried = {name for e in world.entities.values() for name in e.traits}
    for name in sorted((carried | set(world.available_traits)) - set(live)):
        world.remove_trait(name)
    world.set_available_traits(live)
    return world


def seed_carriers(world: World, trait: str) -> int:
    """Give a new trait to a share of the Molbots, evenly spread by id (the same ones for the same
    fork), even past their limit of traits (a world with many live traits fills every Molbot's);
    how many got it."""
    ids = sorted(world.entities)
    n = min(len(ids), max(MIN_SEEDED, math.ceil(len(ids) * SEEDED_SHARE)))
    give(world, trait, [ids[i * len(ids) // n] for i in range(n)])
    return n


def give(world: World, trait: str, ids: list[int]) -> None:
    """``trait`` to each of ``ids`` that lacks it, even past their limit of traits."""
    for i in ids:
        e = world.entities[i]
        if trait not in e.traits:
            e.traits = (*e.traits, trait)


def carriers(world: World, trait: str) -> int:
    return sum(1 for e in world.entities.values() if trait in e.traits)


def host_factory(settings: Settings, client: docker.DockerClient, owner: str) -> Callable[[str], HostClient]:
    """Trait hosts for the copies of a fork, each named ``<owner>-<side>``: the live engine's
    limits with a quarter of its CPU weight (the live world's traits come first)."""
    tag = image.ensure(client)
    limits = dataclasses.replace(IsolationLimits.for_engine(settings), cpu_shares=BESIDE_CPU_SHARES)
    deadline_s = settings.sandbox.tick_deadline_s

    def new_host(side: str) -> HostClient:
        host = TraitHostContainer(client, tag, limits, f"{owner}-{side}", private_socket=settings.sandbox.host_socket)
        try:
            host.say_hello(hello_message(settings, deadline_s * WORKERS_SHARE, idle=True), HOST_START_DEADLINE_S)
        except BaseException:
            host.close()
            raise
        return HostClient(host)

    return new_host


def idle_thread() -> None:
    """This thread in the idle scheduling class: whatever the live world's engine or trait host
    wakes takes its CPU at once (a low priority alone did not keep the forks off the live world:
    docs/evolution.md)."""
    os.sched_setscheduler(threading.get_native_id(), os.SCHED_IDLE, os.sched_param(0))


async def beside_the_world(work: Callable[[Callable[[str], None], threading.Event], T], name: str) -> T:
    """``work(progress, stop)`` in a thread of its own in the idle scheduling class (Linux sets
    it per thread: the live world's engine comes first), heartbeating its latest progress; a
    cancelled activity sets ``stop``."""
    progress = ["starting"]
    stop = threading.Event()

    def run() -> T:
        idle_thread()
        return work(progress.append, stop)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix=name) as thread:
        running = asyncio.get_running_loop().run_in_executor(thread, run)
        try:
            while True:
                done, _ = await asyncio.wait([running], timeout=5)
                if done:
                    return running.result()
                activity.heartbeat(progress[-1])
        except asyncio.CancelledError:
            stop.set()
            raise


def run_trait_shadow(
    request: TraitShadowRequest,
    settings: Settings,
    client: docker.DockerClient,
    live: list[registry.RegistryEntry],
    ticks: int,
    progress: Callable[[str], None] = lambda _: None,
    stop: threading.Event | None = None,
) -> dict[str, Any]:
    """The report of a held mutation's shadow (see the module doc). Raises ReplayError when
    there is no snapshot to fork from, RuntimeError when the trait hosts keep failing."""
    if ticks < 1:
        raise ReplayError("a shadow runs at least one tick")
    journal_dir = settings.journal_dir
    store = SnapshotStore(journal_dir / "snapshots")
    meta, _ = pick_snapshot(store, JournalReader(journal_dir / "records"), 0)
    candidate_entry = registry.RegistryEntry(
        trait_name=request.trait_name,
        version=0,  # not a registry version yet
        mutation_id=request.mutation_id,
        class_name=request.class_name,
        code=request.code,
        code_hash=request.code_hash,
        agent_id=request.agent_id,
    )
    baseline_traits = {e.trait_name: e for e in live}
    candidate_traits = {**baseline_traits, request.trait_name: candidate_entry}
    replaces = baseline_traits.get(request.trait_name)
    deadline_s = settings.sandbox.tick_deadline_s
    new_host = host_factory(settings, client, f"shadow-{request.mutation_id}")
    sides = [
        Side(
            name,
            Run(fork(store, meta, sorted(entries))),
            {n: TraitRecord(entry=e) for n, e in sorted(entries.items())},
            new_host,
        )
        for name, entries in (("baseline", baseline_traits), ("candidate", candidate_traits))
    ]
    baseline, candidate = sides
    seeded = seed_carriers(candidate.world, request.trait_name) if replaces is None else 0
    carried = [carriers(candidate.world, request.trait_name)]
    try:
        for side in sides:
            side.start_host()
        if request.trait_name in candidate.unloadable:
            raise RuntimeError(f"the trait did not load: {candidate.unloadable[request.trait_name]}")
        for done in range(ticks):
            if stop is not None and stop.is_set():
                raise ShadowStopped()
            for side in sides:
                side.tick(deadline_s)
            carried.append(carriers(candidate.world, request.trait_name))
            if (done + 1) % PROGRESS_EVERY == 0:
                progress(f"tick {done + 1}/{ticks}")
    finally:
        for side in sides:
            side.close()
    b, c = baseline.summary(ticks), candidate.summary(ticks)
    c["carriers"] = {"seeded": seeded, "start": carried[0], "max": max(carried), "end": carried[-1]}
    return {
        "version": REPORT_VERSION,
        "kind": "trait",
        "snapshot": meta.name,
        "epoch": meta.epoch,
        "from_tick": meta.tick,
        "ticks": ticks,
        "trait": {
            "name": request.trait_name,
            "mutation_id": request.mutation_id,
            "replaces_version": replaces.version if replaces is not None else None,
        },
        "baseline": b,
        "candidate": c,
        "differences": differences(b, c),
    }


class TraitShadowActivities:
    def __init__(self, settings: Settings, sessions: async_sessionmaker, client: docker.DockerClient) -> None:
        self._settings = settings
        self._sessions = sessions
        self._client = client

    @activity.defn(name=names.SHADOW_MUTATION)
    async def shadow_mutation(self, request: TraitShadowRequest) -> TraitShadowOutcome:
        """The shadow report of a held mutation, or why none could be made (no journal or
        snapshot to fork from): never a verdict on the trait. Infrastructure failures raise."""
        async with self._sessions() as session:
            rows = (await session.execute(live_versions())).all()
            ticks = (
                await manifests.current(await session.connection(), self._settings)
            ).manifest.governance.shadow_ticks
        # Not a number a trait can count to: up to half as long again, drawn for each shadow.
        ticks += secrets.randbelow(ticks // 2 + 1)
        live = [registry.entry_from_row(version, mutation) for version, mutation in rows]

        def shadow(progress: Callable[[str], None], stop: threading.Event) -> dict[str, Any]:
            return run_trait_shadow(request, self._settings, self._client, live, ticks, progress, stop)

        try:
            report = await beside_the_world(shadow, "trait-shadow")
        except ReplayError as exc:
            return TraitShadowOutcome(not_run=str(exc))
        return TraitShadowOutcome(report=report, report_hash=report_hash(report))
