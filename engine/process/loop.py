"""The engine process: the world core in a fixed-timestep asyncio loop.

Each tick: sync the active traits -> (only if a trait is active) build the carriers' views and
run the traits -> ``World.step`` -> every ``engine_snapshot_interval`` ticks a WorldSnapshot ->
every ``engine_frame_interval`` ticks a viewer frame (while someone subscribes); these two are
built at the start of the next tick, while the trait host computes its intents (the world does
not change until that tick's step), or before its step if no host request is made. The tick's work
is measured against the budget ``1 / engine_tick_rate``; a tick that exceeded it is an overrun
(counted, logged). The loop then sleeps until the next tick is due; when behind it does not
sleep (it only yields to the event loop) — it never runs several ticks at once to catch up, and
a lag over ``MAX_LAG_S`` is forgiven rather than made up for.

About once a second, outside the budget: the status for the API (``engine:status``,
``engine:params``, ``engine:entities``, ``ws:tick``) and ``TraitRunner.refresh``.
Deterministic: the world is seeded from ``engine_seed``; the wall clock never enters a tick.

Fast-forward (``engine_fast_forward``): no budget and no sleeping — after each tick the loop only
yields to the event loop, so the telemetry writer, the status and the refreshes still run. What
follows ticks stays on ticks (snapshots and their hooks); what a viewer or an operator watches
stays on the wall clock: viewer frames at most at the paced frame rate, the status and refreshes
about once a second. Snapshot hooks (the observing workflows' signals) would otherwise fall
ever further behind: the loop waits for them so that at most two snapshots' worth run at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from functools import partial
from typing import TYPE_CHECKING, Any

from engine.core.inputs import HOST_ERROR, HOST_OK, TickInputs, TraitSetChange, apply_changes, step
from engine.core.ledger import TraitLedger
from engine.core.model import world_params
from engine.core.replay import ReplayError
from engine.core.round_rules import RoundInputs
from engine.core.traits import BatchTraitRunner, Intents, NoTraits, TraitRunner, ViewsTraitRunner
from engine.core.world import World, WorldParams
from genesis.config import Settings

from .metrics import TICK_SECONDS
from .telemetry import PeriodCounters, TelemetrySink, build_frame, build_snapshot, entity_list, to_row

if TYPE_CHECKING:
    from .journaling import WorldJournal

log = logging.getLogger("genesis.engine")

MAX_LAG_S = 0.25  # further behind schedule than this: reset the schedule instead of rushing
STATUS_INTERVAL_S = 1.0
OVERRUN_LOG_INTERVAL_S = 10.0
HOOK_TIMEOUT_S = 60.0  # a snapshot hook still running after this is cancelled (and logged)
HOOK_SNAPSHOTS_IN_FLIGHT = 2  # fast-forward: snapshots whose hooks may run at once


class Engine:
    def __init__(
        self,
        settings: Settings,
        runner: TraitRunner | None = None,
        *,
        world: World | None = None,
        journal: WorldJournal | None = None,
        sink: TelemetrySink | None = None,
        clock: Callable[[], float] = time.perf_counter,
        wall: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.settings = settings
        self.world = world if world is not None else World(world_params(settings.engine), seed=settings.engine.seed)
        # The journal every tick's inputs go to (None: nothing is recorded). Each tick's record is
        # appended once its state hash is known, with the last tick's telemetry (_flush_telemetry).
        self.journal = journal
        self._journal_pending: list[TickInputs] = []
        self._journal_failure: BaseException | None = None
        self._pending_params: WorldParams | None = None
        self._requested_params: WorldParams | None = None  # the last parameters asked for (kept over rollbacks)
        self._rollback_requests: list[dict[str, Any]] = []
        self._rollback_outcomes: list[tuple[str, dict[str, Any]]] = []
        # settled rounds to apply, one per tick, and who waits for each (engine/process/rounds.py)
        self._round_requests: list[tuple[RoundInputs, asyncio.Future]] = []
        self.runner: TraitRunner = runner if runner is not None else NoTraits()
        # the compact form (each carrier's view once) when the runner has it, resolved once
        self._views_runner: ViewsTraitRunner | None = None
        self._batch_runner: BatchTraitRunner | None = None
        if isinstance(self.runner, ViewsTraitRunner):
            self._views_runner = self.runner
        else:
            self._batch_runner = self.runner
        self.sink = sink if sink is not None else TelemetrySink(settings.redis_url, settings.database_url)
        self.clock = clock
        self.wall = wall
        self.sleep = sleep
        # Called with each WorldSnapshot (a dict) in a background task, never awaited by the
        # loop — e.g. to signal observing workflows. Exceptions are logged.
        self.snapshot_hooks: list[Callable[[dict[str, Any]], Awaitable[None]]] = []
        self._hook_tasks: set[asyncio.Task] = set()
        self.run_id = uuid.uuid4().hex[:16]
        self.fast_forward = settings.engine.fast_forward
        # fast-forward has no budget: a tick takes what it takes, and none is an overrun
        self.budget_s: float | None = None if self.fast_forward else 1.0 / settings.engine.tick_rate
        # fast-forward: viewer frames at most at the rate a paced run sends them (wall clock)
        self._frame_period_s = settings.engine.frame_interval / settings.engine.tick_rate
        self._next_frame_at = 0.0
        self.started_at = wall()
        # the live traits as the world knows them: a world resumed from the journal has some (the
        # runner's set is compared with them); another starts from the runner's
        self.active_traits: tuple[str, ...] = tuple(self.world.available_traits) if journal is not None else ()
        # live trait -> the mutation id whose version runs (as the journal ends, when resumed)
        self.trait_versions: dict[str, str] = dict(journal.versions) if journal is not None else {}
        # every live trait measured at each snapshot (engine/core/ledger.py); selection reads it
        self.ledger = TraitLedger(settings.verdict.ledger_rule())
        # measurements
        self.ticks_run = 0
        self.tick_overruns = 0
        self.trait_errors = 0
        self.lag_resets = 0
        self.work_total_s = 0.0
        self.work_max_s = 0.0
        self.snapshot_total_s = 0.0
        self.snapshots_taken = 0
        self.ticks_per_second = 0.0
        self._period = PeriodCounters(self.world.stats())
        self._period_tick = self.world.tick
        self._period_wall = self.clock()
        self._period_work = (0, 0.0)  # ticks run and their work (s) at the last snapshot
        self._window_ticks = 0
        self._window_work_s = 0.0
        self._window_max_s = 0.0
        self._window_start = self.clock()
        self._window_tick0 = self.world.tick
        self._overruns_logged = 0
        self._overrun_log_at = 0.0
        self._started = False
        self._refresh_task: asyncio.Task | None = None
        self._telemetry: list[Callable[[], None]] = []  # the last tick's snapshot / frame, to build

    # -- one tick -----------------------------------------------------------------------------

    def request_params(self, params: WorldParams) -> None:
        """New world parameters, applied (and journaled) at the start of the next tick."""
        self._pending_params = self._requested_params = params

    def settle_round(self, inputs: RoundInputs) -> asyncio.Future:
        """Apply a settled round at the next tick (journaled with it); the future gives that tick
        and the round's outcomes (``engine.core.round_rules.Settled``) once it is stepped."""
        done: asyncio.Future = asyncio.get_running_loop().create_future()
        self._round_requests.append((inputs, done))
        return done

    def journal_events(self, kind: str, bodies: list[dict[str, Any]]) -> list[int]:
        """Append records that note events (receipts carried in from Postgres) between two ticks,
        after the last tick's record; their sequence numbers."""
        journal = self.journal
        if journal is None:
            return []
        self._flush_journal()
        return [journal.append_event(kind, self.world, body).seq for body in bodies]

    # -- rollbacks ------------------------------------------------------------------------------

    def request_rollback(self, request: dict[str, Any]) -> None:
        """A rollback to a kept snapshot (engine/process/rollbacks.py), applied before the next tick."""
        self._rollback_requests.append(request)

    def take_rollback_outcomes(self) -> list[tuple[str, dict[str, Any]]]:
        outcomes, self._rollback_outcomes = self._rollback_outcomes, []
        return outcomes

    def _apply_rollbacks(self) -> None:
        requests, self._rollback_requests = self._rollback_requests, []
        for request in requests:
            request_id = str(request.get("request_id"))
            try:
                outcome = self.apply_rollback(request)
            except ReplayError as exc:
                log.warning("rollback %s refused: %s", request_id, exc)
                outcome = {"status": "refused", "reason": str(exc)}
            self._rollback_outcomes.append((request_id, {"request_id": request_id, **outcome}))

    def apply_rollback(self, request: dict[str, Any]) -> dict[str, Any]:
        """Go back to a kept snapshot as a new epoch (``WorldJournal.rollback``); ReplayError says
        why not. Between two ticks: the last tick's record is appended first."""
        journal = self.journal
        if journal is None:
            raise ReplayError("the journal is off (GENESIS_JOURNAL_ENABLED=false): there is nothing to go back to")
        self._flush_telemetry()
        journal.wait_for_snapshot()
        target = journal.rollback_target(
            snapshot=request.get("snapshot"), tick=request.get("tick"), mutation_id=request.get("mutation_id")
        )
        from_tick, from_epoch = self.world.tick, journal.epoch
        reason = str(request.get("reason") or "requested")[:500]
        summary = {k: request[k] for k in ("request_id", "requested_by", "mutation_id") if request.get(k) is not None}
        world = journal.rollback(self.world, target, reason, summary)
        self._replace_world(world, dict(target.traits))
        head = journal.head
        assert head is not None
        log.warning(
            "world rolled back from tick %d (epoch %d) to snapshot %s at tick %d: epoch %d (%s)",
            from_tick,
            from_epoch,
            target.name,
            world.tick,
            head.epoch,
            reason,
        )
        return {
            "status": "applied",
            "epoch": head.epoch,
            "from_tick": from_tick,
            "from_epoch": from_epoch,
            "to_tick": world.tick,
            "snapshot": target.name,
            "journal_seq": head.seq,
            "state_hash": head.state_hash.hex(),
            "reason": reason,
        }

    def _replace_world(self, world: World, versions: dict[str, str]) -> None:
        """A restored world runs from the next tick: what the engine keeps about the old one goes.
        The live traits and the parameters asked for are journaled again at the next tick where
        they differ from the snapshot's; observers see a new run (their windows start over)."""
        self.world = world
        self.active_traits = tuple(world.available_traits)
        self.trait_versions = versions
        self._pending_params = self._requested_params
        self.run_id = uuid.uuid4().hex[:16]
        self._telemetry = []
        self._period = PeriodCounters(world.stats())
        self._period_tick = self._window_tick0 = world.tick

    def _runner_versions(self, names: tuple[str, ...]) -> dict[str, str]:
        ids = getattr(self.runner, "mutation_ids", None)
        if ids is None:
            return {}
        versions = ids()
        return {name: versions[name] for name in names if name in versions}

    def _collect_changes(self, inputs: TickInputs) -> None:
        """The tick's trait-set and parameter changes, applied to the world and put in ``inputs``."""
        try:
            names = tuple(sorted(set(self.runner.active_traits())))
            versions = self._runner_versions(names)
        except Exception:
            log.exception("trait runner active_traits() failed; keeping %s", list(self.active_traits))
            names, versions = self.active_traits, self.trait_versions
        params, self._pending_params = self._pending_params, None
        if params is not None and params == self.world.params:
            params = None
        change = None
        if names != self.active_traits or versions != self.trait_versions:
            quarantined: dict[str, str] = getattr(self.runner, "quarantined", dict)()
            before = self.trait_versions
            agents: dict[str, str] = getattr(self.runner, "agent_ids", dict)()
            change = TraitSetChange(
                active=list(names),
                versions=versions,
                left={
                    n: "quarantined" if n in quarantined else "deregistered"
                    for n in self.active_traits
                    if n not in names
                },
                replaced={n: before[n] for n in names if before.get(n) and before[n] != versions.get(n)},
                agents={n: agents[n] for n in names if n in agents},
                arrived={n: versions[n] for n in names if versions.get(n) and before.get(n) != versions[n]},
                left_versions={n: before[n] for n in self.active_traits if n not in names and n in before},
            )
        if change is None and params is None:
            return
        self._flush_telemetry()  # the last tick's record, snapshot and frame see the world before this
        inputs.traits, inputs.params = change, params
        apply_changes(self.world, inputs)
        if params is not None:
            log.info("world parameters changed at tick %d", self.world.tick)
        if change is not None:
            if names != self.active_traits:
                log.info("active traits: %s (removed: %s)", list(names), sorted(change.left))
            if self.journal is not None:
                for name, mutation_id in versions.items():
                    if self.trait_versions.get(name) != mutation_id:
                        self.journal.pin(mutation_id)  # its rollback point: the latest snapshot before it
            self.active_traits, self.trait_versions = names, versions

    async def tick_once(self) -> None:
        """One tick's work (traits, step, telemetry hand-off), measured against the budget."""
        started = self.clock()
        if self._rollback_requests:
            self._apply_rollbacks()
        world = self.world
        inputs = TickInputs(tick=world.tick)
        self._collect_changes(inputs)
        settling = None
        if self._round_requests:
            inputs.round, settling = self._round_requests.pop(0)
        intents: Intents = {}
        if self.active_traits:
            try:
                if self._views_runner is not None:  # the compact form: each carrier's view once
                    # raw arrays: the host channel sends them as bytes (sandbox/container.py)
                    views = world.trait_views(self.active_traits, raw=True)
                    if views["count"]:
                        # the last tick's telemetry and step's reading ahead run while the host
                        # computes (on 2 cores, beside it rather than after it)
                        intents = await self._views_runner.run_tick_views(
                            world.tick, views, while_waiting=self._while_waiting
                        )
                        inputs.host, inputs.host_detail = getattr(self.runner, "last_outcome", (HOST_OK, ""))
                elif self._batch_runner is not None:
                    batches = world.trait_batches()
                    batches = {name: batches[name] for name in self.active_traits if name in batches}
                    if batches:
                        intents = await self._batch_runner.run_tick(world.tick, batches)
                        inputs.host = HOST_OK
            except Exception as exc:
                self.trait_errors += 1
                log.exception("trait runner failed at tick %d; the tick runs on instinct", world.tick)
                intents = {}
                inputs.host, inputs.host_detail = HOST_ERROR, f"{type(exc).__name__}: {exc}"
        if self._journal_failure is not None:  # raised while the host computed: fatal
            failure, self._journal_failure = self._journal_failure, None
            raise failure
        self._flush_telemetry()  # whatever did not run while waiting (no host request this tick)
        inputs.intents = intents
        report = step(world, inputs, lazy_write_back=True)  # stored into the entities while the host next computes
        if settling is not None and not settling.done():
            settling.set_result((report.tick, report.round))
        if self.journal is not None:
            self._journal_pending.append(inputs)
        tick = world.tick
        settings = self.settings
        # The snapshot and the viewer frame of this tick are built at the next tick, while the
        # host computes (or before its step, whichever comes first): the world is unchanged
        # until then. run_ticks, close and a change of the live traits build them at once.
        if tick % settings.engine.snapshot_interval == 0:
            self._telemetry.append(partial(self._snapshot, tick))
        if tick % settings.engine.frame_interval == 0 and self.sink.frame_subscribers > 0 and self._frame_due():
            self._telemetry.append(self._frame)
        work = self.clock() - started
        self._account(work)

    def _frame_due(self) -> bool:
        """Paced: every frame tick. Fast-forward: the viewer's frame rate stays the paced one
        (frames describe the world, they never change it), so Redis is not flooded."""
        if not self.fast_forward:
            return True
        now = self.clock()
        if now < self._next_frame_at:
            return False
        self._next_frame_at = now + self._frame_period_s
        return True

    def _while_waiting(self) -> None:
        try:
            self._flush_telemetry()
        except Exception as exc:  # the journal's: re-raised on the tick, not taken for the host's
            self._journal_failure = exc
        self.world.prepare_step()

    def _flush_journal(self) -> None:
        """Append the last tick's record (and take the snapshot that falls due). Raises: the world
        must not run on unrecorded."""
        journal = self.journal
        pending, self._journal_pending = self._journal_pending, []
        if journal is None:
            return
        for inputs in pending:
            journal.append_tick(self.world, inputs)
            if journal.snapshot_due(self.world):
                journal.save_snapshot(self.world, self.trait_versions)

    def _flush_telemetry(self) -> None:
        self._flush_journal()
        pending, self._telemetry = self._telemetry, []
        for build in pending:
            try:
                build()
            except Exception:
                log.exception("telemetry of tick %d failed", self.world.tick)

    def _frame(self) -> None:
        self.sink.publish_frame(build_frame(self.world))

    def _account(self, work: float) -> None:
        TICK_SECONDS.observe(work)
        self.ticks_run += 1
        self.work_total_s += work
        self._window_ticks += 1
        self._window_work_s += work
        if work > self.work_max_s:
            self.work_max_s = work
        if work > self._window_max_s:
            self._window_max_s = work
        if self.budget_s is not None and work > self.budget_s:
            self.tick_overruns += 1
            now = self.clock()
            if now >= self._overrun_log_at:
                log.warning(
                    "tick %d overran its budget: %.2f ms > %.2f ms (%d overruns so far)",
                    self.world.tick,
                    work * 1000,
                    self.budget_s * 1000,
                    self.tick_overruns,
                )
                self._overrun_log_at = now + OVERRUN_LOG_INTERVAL_S

    def _snapshot(self, tick: int) -> None:
        s0 = now = self.clock()
        elapsed = now - self._period_wall
        tps = (tick - self._period_tick) / elapsed if elapsed > 0 else 0.0
        snap, self._period = build_snapshot(
            self.world,
            self._period,
            timestamp=self.wall(),
            tick_overruns=self.tick_overruns,
            ticks_per_second=tps,
            run_id=self.run_id,
        )
        self._period_tick, self._period_wall = tick, now
        ticks, work = self.ticks_run - self._period_work[0], self.work_total_s - self._period_work[1]
        snap["tick_ms"] = round(1000 * work / ticks, 3) if ticks else 0.0  # the period's mean tick work
        snap["live_traits"] = len(self.active_traits)
        self._period_work = (self.ticks_run, self.work_total_s)
        self.ledger.observe(tick, self.world.entities, self.active_traits, self.world.params)
        self.snapshots_taken += 1
        self.sink.submit_snapshot(snap)
        for hook in self.snapshot_hooks:
            task = asyncio.create_task(self._run_hook(hook, snap))
            self._hook_tasks.add(task)
            task.add_done_callback(self._hook_tasks.discard)
        every = self.settings.engine.snapshot_interval * self.settings.engine.postgres_every
        if tick % every == 0:
            self.sink.persist(to_row(snap))
        self.snapshot_total_s += self.clock() - s0

    async def _run_hook(self, hook: Callable[[dict[str, Any]], Awaitable[None]], snap: dict[str, Any]) -> None:
        try:
            await asyncio.wait_for(hook(snap), HOOK_TIMEOUT_S)
        except Exception:
            log.exception("snapshot hook %r failed at tick %s", hook, snap.get("tick"))

    async def _keep_up_with_hooks(self) -> None:
        """Fast-forward: the world does not run ahead of the snapshot hooks (the observing
        workflows' signals) by more than a couple of snapshots. Between ticks, room is kept for
        one more snapshot's hooks (the next tick may start them before this runs again)."""
        most = (HOOK_SNAPSHOTS_IN_FLIGHT - 1) * len(self.snapshot_hooks)
        while self._hook_tasks and len(self._hook_tasks) > most:
            await asyncio.wait(list(self._hook_tasks), return_when=asyncio.FIRST_COMPLETED)

    # -- status (outside the budget) ------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        now = self.clock()
        elapsed = now - self._window_start
        if elapsed > 0 and self._window_ticks:
            self.ticks_per_second = (self.world.tick - self._window_tick0) / elapsed
        w = self.world
        n = len(w.entities)
        avg = sum(e.energy for e in w.entities.values()) / n if n else 0.0
        st = {
            "run_id": self.run_id,
            "tick": w.tick,
            "ticks_per_second": round(self.ticks_per_second, 2),
            "tick_rate": self.settings.engine.tick_rate,
            "mode": "fast_forward" if self.fast_forward else "paced",
            "population": n,
            "avg_energy": round(avg, 4),
            "resource_count": len(w.resources),
            "active_traits": list(self.active_traits),
            "tick_overruns": self.tick_overruns,
            "mean_tick_ms": round(self._window_work_s / self._window_ticks * 1000, 3) if self._window_ticks else 0.0,
            "max_tick_ms": round(self._window_max_s * 1000, 3),
            "snapshots": self.snapshots_taken,
            "seed": w.seed,
            "started_at": round(self.started_at, 3),
            "updated_at": round(self.wall(), 3),
            "telemetry": dict(self.sink.counters),
        }
        if self.journal is not None:
            st["journal"] = self.journal.stats()
        self._window_start, self._window_tick0 = now, w.tick
        self._window_ticks, self._window_work_s, self._window_max_s = 0, 0.0, 0.0
        return st

    def publish_status(self) -> dict[str, Any]:
        st = self.status()
        flat = {k: json.dumps(v) if isinstance(v, (list, dict)) else str(v) for k, v in st.items()}
        params = json.dumps(asdict(self.world.params), separators=(",", ":"))
        ents = json.dumps(entity_list(self.world, self.settings.engine.entities_limit), separators=(",", ":"))
        self.sink.submit_status(flat, params, ents)
        return st

    # -- running --------------------------------------------------------------------------------

    async def start(self) -> None:
        if not self._started:
            self._started = True
            if self.journal is not None:
                self.journal.append_started(self.world, self.run_id)
            self.sink.start()
            try:
                await self.runner.refresh()
            except Exception:
                log.exception("trait runner refresh failed at start")
            self.publish_status()

    async def run_ticks(self, n: int) -> None:
        """Run ``n`` ticks back to back (no pacing) — for tests and benchmarks."""
        await self.start()
        for _ in range(n):
            await self.tick_once()
            await asyncio.sleep(0)  # let the telemetry writer run
        self._flush_telemetry()
        await asyncio.sleep(0)

    async def run(self, stop: asyncio.Event | None = None, max_ticks: int | None = None) -> None:
        """The fixed-timestep loop (or, fast-forward, the unpaced one), until ``stop`` is set (or
        ``max_ticks`` ticks ran)."""
        await self.start()
        period = self.budget_s
        clock = self.clock
        next_due = clock()
        last_status = clock()
        ran = 0
        if period is None:
            log.info(
                "engine running fast-forward (no pacing), seed %d, %d entities, run %s",
                self.world.seed,
                self.world.population,
                self.run_id,
            )
        else:
            log.info(
                "engine running: %.1f ticks/s (budget %.2f ms), seed %d, %d entities, run %s",
                self.settings.engine.tick_rate,
                period * 1000,
                self.world.seed,
                self.world.population,
                self.run_id,
            )
        while not (stop is not None and stop.is_set()) and (max_ticks is None or ran < max_ticks):
            await self.tick_once()
            ran += 1
            now = clock()
            if now - last_status >= STATUS_INTERVAL_S:
                last_status = now
                try:
                    self.publish_status()
                except Exception:
                    log.exception("building the engine status failed")
                self._refresh_in_background()
            if period is None:  # fast-forward: never sleep, only let the other tasks run
                await self._keep_up_with_hooks()
                await self.sleep(0)
                continue
            next_due += period
            delay = next_due - clock()
            if delay > 0:
                await self.sleep(delay)
            else:  # behind: the next tick starts right away (one tick, not a burst)
                if -delay > MAX_LAG_S:
                    self.lag_resets += 1
                    next_due = clock()
                await self.sleep(0)
        self._flush_telemetry()  # the last tick's (no next tick builds it)

    def _refresh_in_background(self) -> None:
        """Registry changes may start a container: never make the ticks wait for that."""
        if self._refresh_task is not None and not self._refresh_task.done():
            return

        async def refresh() -> None:
            try:
                await self.runner.refresh()
            except Exception:
                log.exception("trait runner refresh failed")

        self._refresh_task = asyncio.create_task(refresh())

    def cancel_rounds(self) -> None:
        """Settled rounds that will not be applied (the engine stops): their waiters are told."""
        requests, self._round_requests = self._round_requests, []
        for _, waiting in requests:
            waiting.cancel()

    async def close(self) -> None:
        self.cancel_rounds()
        self._flush_telemetry()
        if self.journal is not None:  # a snapshot of where it stopped: the next start replays nothing
            journal = self.journal
            if not journal.has_snapshot_of(self.world):
                journal.save_snapshot(self.world, self.trait_versions)
            await journal.wait_for_snapshot_async()
        if self._refresh_task is not None:
            await asyncio.wait([self._refresh_task], timeout=30)
        try:
            self.publish_status()
        except Exception:
            pass
        if self._hook_tasks:
            await asyncio.wait(list(self._hook_tasks), timeout=5)
        try:
            await self.runner.close()
        except Exception:
            log.exception("trait runner close failed")
        await self.sink.close()

    def mean_tick_ms(self) -> float:
        return self.work_total_s / self.ticks_run * 1000 if self.ticks_run else 0.0
