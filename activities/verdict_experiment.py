"""A trait's verdict as an experiment beside the live world (``genesis.verdicts`` says what is
measured and how it is decided).

``plan_verdict`` pins what every replicate runs: the latest kept snapshot of the world's current
epoch and, by name and version, the traits of each copy — the control runs the traits live now
without the candidate (with the version it replaced, if any), the treated copy runs them with it.
``run_verdict_replicate`` runs one replicate: both copies forked from the snapshot, the
replicate's seed set in both, its units drawn from the Molbots alive at the fork and given the
trait in the treated copy (in both copies, for a replacement: old version against new), then the
horizon's ticks in lockstep, each copy's traits in a trait-host container of its own as the
shadow runs them (``activities.trait_shadow``). Both run on the verdict task queue, so workers on
more machines add verdict capacity; a replicate is a pure function of its request for
deterministic traits, which is what makes a verdict's report hash checkable.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker
from sqlalchemy import select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import names
from activities.trait_shadow import (
    ShadowStopped,
    Side,
    TraitRecord,
    beside_the_world,
    fork,
    give,
    host_factory,
    idle_thread,
)
from engine.core.replay import ReplayError
from engine.core.shadow import Run, pick_snapshot
from engine.core.world import World
from genesis.config import Settings
from genesis.db.models import Mutation, TraitVersion
from genesis.verdicts import (
    CopyOutcome,
    ExperimentPlan,
    GroupOutcome,
    PlanOutcome,
    PlanRequest,
    ReplicateOutcome,
    ReplicateRequest,
    Tally,
    TraitPin,
    replicate_effects,
    replicate_seed,
    report,
)
from journal.reader import JournalReader
from journal.snapshots import SnapshotStore
from pipeline import registry
from pipeline.live import live_versions
from sandbox.host_client import HostClient

log = logging.getLogger("genesis.verdicts")

PROGRESS_EVERY = 100  # ticks
SAMPLE_EVERY = 10  # ticks between two readings of the watched Molbots' fitness
TraitKey = tuple[str, int]  # (name, version)


class PlanChanged(Exception):
    """A pinned trait version or snapshot is gone, or its code is not what the plan pinned."""


def pin_of(entry: registry.RegistryEntry) -> TraitPin:
    return TraitPin(trait_name=entry.trait_name, version=entry.version, code_hash=entry.code_hash)


def plan(
    request: PlanRequest, live: list[registry.RegistryEntry], previous: registry.RegistryEntry | None, journal_dir: Path
) -> PlanOutcome:
    pins = {e.trait_name: pin_of(e) for e in live}
    mine = pins.get(request.trait_name)
    if mine is None or mine.version != request.trait_version:
        return PlanOutcome(not_run=f"v{request.trait_version} of {request.trait_name} is no longer live")
    control = {n: p for n, p in pins.items() if n != request.trait_name}
    if previous is not None:
        control[previous.trait_name] = pin_of(previous)
    store = SnapshotStore(journal_dir / "snapshots")
    try:
        meta, _ = pick_snapshot(store, JournalReader(journal_dir / "records"), 0)
    except ReplayError as exc:
        return PlanOutcome(not_run=str(exc))
    return PlanOutcome(
        plan=ExperimentPlan(
            mutation_id=request.mutation_id,
            trait_name=request.trait_name,
            snapshot=meta.name,
            epoch=meta.epoch,
            from_tick=meta.tick,
            control=sorted(control.values(), key=lambda p: p.trait_name),
            treated=sorted(pins.values(), key=lambda p: p.trait_name),
            settings=request.settings,
        )
    )


def draw_units(world: World, share: float, seed: int) -> list[int]:
    """The Molbots alive at the fork that get the trait: a random ``share`` of them (at least one)."""
    ids = sorted(world.entities)
    if not ids:
        raise PlanChanged("the snapshot holds no Molbot to experiment on")
    count = min(len(ids), max(1, round(len(ids) * share)))
    return sorted(random.Random(seed).sample(ids, count))


class Copy:
    """One copy of a replicate: its side (world, host, traits) and what its Molbots did. A
    watched Molbot's fitness is read every ``SAMPLE_EVERY`` ticks — its energy (0 once dead)
    plus ``cost`` for each of its offspring so far — and averaged over the horizon: a birth
    moves energy from parent to child without lowering the parent's fitness, and the average is
    far steadier than one reading at the end."""

    def __init__(self, side: Side, watched: set[int], cost: float) -> None:
        self.side = side
        self.cost = cost
        self.offspring = dict.fromkeys(watched, 0)
        self.fitness_sum = dict.fromkeys(watched, 0.0)
        self.births = 0
        self.ticks = 0
        self.samples = 0

    def tick(self, deadline_s: float) -> None:
        report = self.side.tick(deadline_s)
        self.ticks += 1
        offspring = self.offspring
        if report.births:
            entities = self.side.world.entities
            for child in report.births:
                parent = entities[child].parent_id
                if parent in offspring:
                    offspring[parent] += 1
            self.births += len(report.births)
        if self.ticks % SAMPLE_EVERY == 0:
            entities, fitness, cost = self.side.world.entities, self.fitness_sum, self.cost
            for i, children in offspring.items():
                e = entities.get(i)
                fitness[i] += (e.energy if e is not None else 0.0) + cost * children
            self.samples += 1

    def tally(self, ids: list[int]) -> Tally:
        tally = Tally()
        entities = self.side.world.entities
        for i in ids:
            e = entities.get(i)
            tally.alive += e is not None
            tally.energy += e.energy if e is not None else 0.0
            tally.offspring += self.offspring[i]
            tally.fitness += self.fitness_sum[i] / max(self.samples, 1)
        tally.energy, tally.fitness = round(tally.energy, 6), round(tally.fitness, 6)
        return tally

    def outcome(self) -> CopyOutcome:
        side = self.side
        return CopyOutcome(
            population=side.world.population,
            population_mean=round(side.run.population_sum / max(self.ticks, 1), 6),
            deaths=dict(sorted(side.run.deaths.items())),
            births=self.births,
            restarts=side.restarts,
            quarantined={n: r.quarantined_at for n, r in sorted(side.traits.items()) if r.quarantined_at is not None},
        )


def run_replicate(
    request: ReplicateRequest,
    entries: dict[TraitKey, registry.RegistryEntry],
    settings: Settings,
    new_host: Callable[[str], HostClient],
    progress: Callable[[str], None] = lambda _: None,
    stop: threading.Event | None = None,
) -> ReplicateOutcome:
    """One replicate of the plan (see the module doc). ``entries``: the pinned trait versions."""
    plan_, index = request.plan, request.index
    store = SnapshotStore(settings.journal_dir / "snapshots")
    meta = store.kept_named(plan_.snapshot)
    if meta is None:
        raise PlanChanged(f"snapshot {plan_.snapshot} is no longer kept")
    seed = replicate_seed(plan_, index)
    sides = []
    for name, pins in (("control", plan_.control), ("treated", plan_.treated)):
        traits = {p.trait_name: TraitRecord(entry=entries[(p.trait_name, p.version)]) for p in pins}
        world = fork(store, meta, sorted(traits))
        world.seed = seed
        sides.append(Side(name, Run(world), traits, new_host))
    control, treated = sides
    trait = plan_.trait_name
    units = draw_units(treated.world, plan_.settings.unit_share, seed)
    replacing = any(p.trait_name == trait for p in plan_.control)
    give(treated.world, trait, units)
    if replacing:  # old version against new, on the same Molbots
        units = sorted({*units, *(i for i, e in treated.world.entities.items() if trait in e.traits)})
        give(control.world, trait, units)
    watched = set(treated.world.entities)  # every Molbot alive at the fork
    others = sorted(watched - set(units))
    cost = control.world.params.reproduction_cost
    copies = [Copy(control, watched, cost), Copy(treated, watched, cost)]
    horizon = plan_.settings.horizon_ticks
    deadline_s = settings.sandbox.tick_deadline_s

    def run(copy: Copy) -> None:
        for done in range(horizon):
            if stop is not None and stop.is_set():
                raise ShadowStopped()
            copy.tick(deadline_s)
            if copy.side.name == "treated" and (done + 1) % PROGRESS_EVERY == 0:
                progress(f"replicate {index}: tick {done + 1}/{horizon}")

    try:
        # The copies share nothing: each starts its host and runs in an idle-class thread of its own,
        # so one copy's world steps while the other's trait host computes.
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="verdict-copy", initializer=idle_thread) as pool:
            started = time.monotonic()
            for starting in [pool.submit(side.start_host) for side in sides]:
                starting.result()
            ready_s = time.monotonic() - started
            for side in sides:
                if side.unloadable:
                    raise PlanChanged(f"the {side.name} copy could not load {sorted(side.unloadable)}")
            for running in [pool.submit(run, c) for c in copies]:
                running.result()
        log.info(
            "replicate %d: hosts ready in %.2f s, %d ticks in %.2f s",
            index,
            ready_s,
            horizon,
            time.monotonic() - started - ready_s,
        )
    finally:
        for side in sides:
            side.close()
    c, t = copies
    return ReplicateOutcome(
        index=index,
        seed=seed,
        ticks=horizon,
        units=GroupOutcome(count=len(units), control=c.tally(units), treated=t.tally(units)),
        others=GroupOutcome(count=len(others), control=c.tally(others), treated=t.tally(others)),
        control=c.outcome(),
        treated=t.outcome(),
    )


async def recompute(
    recorded: dict, settings: Settings, sessions: async_sessionmaker, client: docker.DockerClient
) -> dict:
    """A verdict's report computed again from its recorded plan: every replicate run anew, in this
    process's threads. For deterministic traits its ``report_hash`` equals the recorded one while
    the plan's snapshot is kept."""
    plan_ = ExperimentPlan.model_validate(recorded["plan"])
    pins = [(p.trait_name, p.version) for p in (*plan_.control, *plan_.treated)]
    async with sessions() as session:
        entries = await VerdictActivities.entries(session, pins)
    new_host = host_factory(settings, client, f"verdict-{plan_.mutation_id}-again")
    outcomes = [
        await asyncio.to_thread(run_replicate, ReplicateRequest(plan=plan_, index=i), entries, settings, new_host)
        for i in range(int(recorded["replicates"]))
    ]
    return report(plan_, outcomes)


class VerdictActivities:
    def __init__(self, settings: Settings, sessions: async_sessionmaker, client: docker.DockerClient) -> None:
        self._settings = settings
        self._sessions = sessions
        self._client = client

    @activity.defn(name=names.PLAN_VERDICT)
    async def plan_verdict(self, request: PlanRequest) -> PlanOutcome:
        """The plan of a live trait's experiment, or why none can run (the trait left the live
        set, or there is no snapshot of the world to fork)."""
        async with self._sessions() as session:
            rows = (await session.execute(live_versions())).all()
            previous = None
            if request.previous_version is not None:
                found = (await self.entries(session, [(request.trait_name, request.previous_version)])).values()
                previous = next(iter(found), None)
        live = [registry.entry_from_row(version, mutation) for version, mutation in rows]
        return plan(request, live, previous, self._settings.journal_dir)

    @activity.defn(name=names.RUN_VERDICT_REPLICATE)
    async def run_verdict_replicate(self, request: ReplicateRequest) -> ReplicateOutcome:
        """One replicate's outcome. A plan whose snapshot or trait versions are gone fails for
        good (non-retryable); infrastructure failures raise and are retried."""
        pins = {(p.trait_name, p.version): p for p in (*request.plan.control, *request.plan.treated)}
        async with self._sessions() as session:
            entries = await self.entries(session, list(pins))
        for key, pin in pins.items():
            entry = entries.get(key)
            if entry is None or entry.code_hash != pin.code_hash:
                raise ApplicationError(
                    f"v{pin.version} of {pin.trait_name} is not the version the plan pinned", non_retryable=True
                )
        owner = f"verdict-{request.plan.mutation_id}-{request.index}"

        def replicate(progress: Callable[[str], None], stop: threading.Event) -> ReplicateOutcome:
            new_host = host_factory(self._settings, self._client, owner)
            return run_replicate(request, entries, self._settings, new_host, progress, stop)

        started = time.monotonic()
        try:
            outcome = await beside_the_world(replicate, "verdict")
        except (PlanChanged, ReplayError) as exc:
            raise ApplicationError(str(exc), non_retryable=True) from exc
        activity.logger.info(
            "verdict replicate %d of %s: %.1f s, carriers' fitness %+.1f%%",
            request.index,
            request.plan.mutation_id,
            time.monotonic() - started,
            100 * replicate_effects(outcome)["fitness"],
        )
        return outcome

    @staticmethod
    async def entries(session: AsyncSession, keys: list[tuple[str, int]]) -> dict[TraitKey, registry.RegistryEntry]:
        if not keys:
            return {}
        rows = (
            await session.execute(
                select(TraitVersion, Mutation)
                .outerjoin(Mutation, Mutation.mutation_id == TraitVersion.mutation_id)
                .where(tuple_(TraitVersion.trait_name, TraitVersion.version).in_(keys))
            )
        ).all()
        return {(v.trait_name, v.version): registry.entry_from_row(v, m) for v, m in rows}
