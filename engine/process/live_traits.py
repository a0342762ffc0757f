"""Live traits: the activated traits run in one long-lived trait-host container per engine.

The engine process never imports or executes trait code. Each tick it sends plain entity views
to the host and gets intents back (the world checks them). Inside the host each agent's traits
run in a process of their own (sandbox/traithost/), which enforces their limits and says
which trait was at fault. A trait that raises or overruns repeatedly, or that is stopped from
outside while it ran alone, is quarantined; what that means beyond this process (the Postgres
record, the mutation's rollback, the feed) is engine/process/quarantine.py's job. A reply late by less
than one more deadline is used (``LATE_TICKS_TO_RESTART``); a host that misses that or dies is
killed and restarted with the live traits reloaded, blaming no trait, while the world keeps
ticking.

In fast-forward (``engine_fast_forward``) wall-clock limits must not decide a tick's intents, or
a fast-forward run would differ from a paced one that never missed its deadline: the host gets
``engine_fast_forward_trait_deadline_ms`` per tick (its workers' share of it too), and a tick
that finds the host being restarted waits for it instead of running without traits. The traits'
CPU limits, which do not depend on pacing, still apply.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import docker
import redis.asyncio as aioredis

from genesis.config import Settings
from pipeline import registry
from sandbox import image
from sandbox.container import (
    HostCrashed,
    HostDeadlineExceeded,
    IsolationLimits,
    TraitHostContainer,
    container_memory_bytes,
    hello_message,
    remove_abandoned_trait_hosts,
)
from sandbox.host_client import (
    HOST_START_DEADLINE_S,
    MISSED,
    OK,
    WORKERS_SHARE,
    HostClient,
    TraitAccount,
    account,
    drift,
)

if TYPE_CHECKING:
    from engine.core.traits import Intents

    from .quarantine import QuarantineReporter

log = logging.getLogger("genesis.engine.traits")


def host_owner(pid: int | None = None) -> str:
    """The engine's host container is named after the engine process: genesis-sbx-engine-<pid>-…"""
    return f"engine-{pid if pid is not None else os.getpid()}"


KILL_BLAME_TICKS = 10  # a host failure this many ticks after a worker's kill is charged to the killed trait
# A reply up to one more deadline late is used: the supervisor answers for its workers within
# its own deadline, so a late reply is a machine too busy for a moment, and a restart would cost
# ~2 s of ticks without traits. A host late this many ticks in a row is replaced all the same.
LATE_TICKS_TO_RESTART = 3
HOST_SAMPLE_S = 5.0  # how often the host's memory and processes are sampled for the metrics


@dataclass
class TraitState(TraitAccount):
    """A live trait: its registry entry and what the engine knows of its results."""

    entry: registry.RegistryEntry = field(kw_only=True)

    @classmethod
    def of(cls, entry: registry.RegistryEntry) -> TraitState:
        return cls(entry=entry, profile=entry.profile)


@dataclass
class HostStats:
    restarts: int = 0
    deadline_misses: int = 0
    skipped_ticks: int = 0  # ticks whose traits did not run because the host was (re)starting
    late_ticks: int = 0  # replies past the deadline, within its grace: used, the tick was slow
    lost_results: int = 0  # a trait's tick lost through nobody's fault (its process was killed for another's)
    throttled_results: int = 0  # a trait's tick sat out: its agent was over its share of the traits' CPU
    suspects: int = 0  # traits moved to a process of their own after a kill while they ran
    drift_suspects: int = 0  # ... or because they departed sharply from their sandbox profile
    foreign_intents: int = 0  # intents refused: their entity carried no trait of the sending agent
    quarantined: list[str] = field(default_factory=list)
    restarts_caused: dict[str, int] = field(default_factory=dict)  # trait -> host restarts charged to it
    host_memory_bytes: int = 0  # the host container's anonymous memory, sampled by refresh()
    host_processes: int = 0  # its worker processes, sampled by refresh()


class HostTraitRunner:
    """TraitRunner backed by a trait-host container (see engine/core/traits.py for the protocol)."""

    def __init__(
        self,
        settings: Settings,
        redis: aioredis.Redis,
        client: docker.DockerClient | None = None,
        quarantine: QuarantineReporter | None = None,
    ):
        self._settings = settings
        self._reporter = quarantine  # None: a quarantine stays in this process (benchmarks)
        self._redis = redis
        self._client = client or docker.from_env()
        self._host: HostClient | None = None
        self._traits: dict[str, TraitState] = {}
        self._quarantined: dict[str, str] = {}  # trait -> mutation_id of the quarantined version
        self._registry_version = -1
        # One request at a time on the host's socket; a tick that finds it busy (a trait being
        # loaded: a fork and a module body, milliseconds) waits for it.
        self._host_lock = asyncio.Lock()
        self._restart_task: asyncio.Task | None = None
        self._last_kill: tuple[str, int] | None = None  # (trait, tick) of the last kill of a worker
        self._late_in_a_row = 0
        self._tick = 0
        self._background: set[asyncio.Task] = set()
        self._next_sample = 0.0
        self.stats = HostStats()
        # what became of the last tick's request (engine/core/inputs.py HOST_*, and why), for the journal
        self.last_outcome: tuple[str, str] = ("idle", "")
        self.fast_forward = settings.engine.fast_forward
        deadline_ms = (
            settings.engine.fast_forward_trait_deadline_ms if self.fast_forward else settings.engine.trait_deadline_ms
        )
        self.deadline_s = deadline_ms / 1000.0

    # -- TraitRunner protocol ----------------------------------------------------------------
    def active_traits(self) -> list[str]:
        return sorted(self._traits)

    async def refresh(self) -> None:
        """Pick up registry changes: load new versions, unload removed ones (and, every few
        seconds, sample the host's memory and processes for the metrics)."""
        if time.monotonic() >= self._next_sample:
            self._next_sample = time.monotonic() + HOST_SAMPLE_S
            await self._sample_host()
        version = await registry.read_version(self._redis)
        if version == self._registry_version:
            return
        entries = await registry.read_entries(self._redis)
        try:
            async with self._host_lock:
                await self._apply(entries)
        except Exception as exc:  # Docker unavailable, image build failed: try again next refresh
            log.warning("could not apply registry v%d: %s", version, exc)
            return
        self._registry_version = version

    def quarantined(self) -> dict[str, str]:
        """Trait -> the mutation id of its quarantined version."""
        return dict(self._quarantined)

    def agent_ids(self) -> dict[str, str]:
        """Live trait -> the agent whose version is running."""
        return {name: state.entry.agent_id for name, state in self._traits.items()}

    def mutation_ids(self) -> dict[str, str]:
        """Live trait -> the mutation whose version is running (for observation reports)."""
        return {name: state.entry.mutation_id for name, state in self._traits.items()}

    async def _apply(self, entries: dict[str, registry.RegistryEntry]) -> None:
        """Unload the traits that left the registry, load the new ones. A replacement is one step:
        the host loads the new version in the old one's place, and the engine sees the name with
        its new version at once, never without it (its carriers keep it: ``replaced``)."""
        for name in [n for n in self._traits if n not in entries]:
            await asyncio.to_thread(self._unload, name)
        for name, entry in sorted(entries.items()):
            running = self._traits.get(name)
            if running is not None and running.entry.mutation_id == entry.mutation_id:
                continue
            held = self._quarantined.get(name) == entry.mutation_id or (
                self._reporter is not None and self._reporter.holds(entry.mutation_id)
            )
            if held:
                if running is not None:  # the registry no longer runs the old version either
                    await asyncio.to_thread(self._unload, name)
                continue
            error = await asyncio.to_thread(self._load, entry)
            if error is not None and running is not None:  # the host let the old version go for it
                self._traits.pop(name, None)
            if error is not None:  # it loaded in its sandbox test: here it is the trait's doing
                await self._record_quarantine(entry, f"it failed to load in the live host: {error}")

    async def run_tick_views(self, tick: int, views: dict, while_waiting: Callable[[], None] | None = None) -> Intents:
        """The compact form of ``run_tick`` (``World.trait_views``): each carrier's view
        crosses to the host once, however many traits it carries; the host merges the intents.
        ``while_waiting``: work that runs once the request is sent, while the host computes
        (``World.prepare_step``), only if the request is sent."""
        self.last_outcome = ("idle", "")
        self._tick = tick
        run = [name for name in views["run"] if name in self._traits]
        if not run or not views["count"]:
            return {}
        if self._host is None:  # (re)starting a container takes ~0.5 s: not on the tick path
            self._restart_soon()
            if self.fast_forward and self._restart_task is not None:  # ... unless ticks cost no wall time
                await asyncio.wait([self._restart_task])
            if self._host is None:
                self.stats.skipped_ticks += 1
                self.last_outcome = ("skipped", "the trait host is starting")
                return {}
        async with self._host_lock:  # a trait being loaded: the tick waits (a few ms) for it
            if self._host is None:
                self.stats.skipped_ticks += 1
                self.last_outcome = ("skipped", "the trait host is starting")
                return {}
            # In the loop's own thread: the tick waits for this reply anyway, and handing the call
            # to a worker thread cost ~0.7-1 ms of CPU per tick (500 entities: ~10% of it). The
            # loop is held at most twice deadline_s (the host is killed then); other tasks run between
            # ticks. The host exists here, so no container is started. Fast-forward: every trait
            # runs every tick (a worker being started is waited for, as the host itself is;
            # nobody is throttled), as in a paced world that kept its pace.
            reply = self._host.tick(
                tick,
                views,
                run,
                self.deadline_s,
                agent_of=self.agent_ids(),
                complete=self.fast_forward,
                while_waiting=while_waiting,
                grace_s=self.deadline_s,
            )
            # A failed host is dropped under the lock: nothing else may be using it meanwhile.
            if reply.outcome == MISSED:
                self.last_outcome = (MISSED, reply.why)
                await self._host_failed(reply.failure or HostCrashed(reply.why))
                return {}
            if reply.outcome != OK:
                # The supervisor never runs trait code and checks its workers' replies, so garbage
                # here is the host's own failure: it is replaced, no trait is blamed (unless a kill
                # just preceded it), and this tick runs on instinct.
                self.last_outcome = (reply.outcome, reply.why)
                await self._host_failed(HostCrashed(reply.why))
                return {}
            self._late_in_a_row = self._late_in_a_row + 1 if reply.late else 0
            self.stats.late_ticks += reply.late
            if self._late_in_a_row >= LATE_TICKS_TO_RESTART:  # this tick's reply still counts
                self._late_in_a_row = 0
                late = f"trait host answered past its deadline on {LATE_TICKS_TO_RESTART} ticks in a row"
                await self._host_failed(HostDeadlineExceeded(late))
        intents, results = reply.intents, reply.results
        self.last_outcome = (OK, "")
        for name, outcome in sorted(reply.loads.items()):
            state = self._traits.get(name)
            if state is not None and isinstance(outcome, dict) and outcome.get("ok") is not True:
                # it loaded in its sandbox test: here it is the trait's doing
                await self._quarantine(name, f"it failed to load in the live host: {str(outcome.get('error'))[:500]}")
        if intents.foreign:
            self.stats.foreign_intents += intents.foreign
            log.warning("refused %d intent(s) for entities carrying no trait of their agent", intents.foreign)
        for name in sorted(results):
            await self._account(name, results[name])
        return intents

    async def close(self) -> None:
        if self._background:
            await asyncio.wait(self._background, timeout=10)
        if self._restart_task is not None:
            await asyncio.wait([self._restart_task], timeout=30)
        if self._host is not None:
            await asyncio.to_thread(self._host.close)
            self._host = None

    def trait_timings(self) -> dict[str, dict]:
        return {
            name: {
                "calls": s.calls,
                "errors": s.errors,
                "timeouts": s.timeouts,
                "lost": s.lost,
                "throttled": s.throttled,
                "mean_us": round(s.total_us / s.calls, 2) if s.calls else 0.0,
                "last_error": s.last_error,
            }
            for name, s in self._traits.items()
        }

    # -- host management (blocking Docker I/O: called through asyncio.to_thread) ---------------
    def _ensure_host(self) -> HostClient:
        if self._host is None:
            tag = image.ensure(self._client)
            remove_abandoned_trait_hosts(self._client)  # e.g. the host of an engine that was killed
            host = TraitHostContainer(
                self._client,
                tag,
                IsolationLimits.for_engine(self._settings),
                host_owner(),
                private_socket=self._settings.engine.trait_host_socket,
            )
            try:
                host.say_hello(hello_message(self._settings, self.deadline_s * WORKERS_SHARE), HOST_START_DEADLINE_S)
            except BaseException:
                host.close()
                raise
            self._host = HostClient(host)
            for state in self._traits.values():  # after a restart: reload what was live, suspects alone
                self._send_load(state.entry, state.suspect, background=True)
        return self._host

    def _send_load(self, entry: registry.RegistryEntry, suspect: bool = False, background: bool = False) -> str | None:
        """Give ``entry`` to the host; why it failed to load, or None. A new trait's load is
        waited for (one trait's module body and instance, within the host's load CPU limit), so
        that it runs from the next tick on in a paced world as in fast-forward; after a restart
        every live trait is given back in the ``background`` (the outcome comes with a tick's
        reply, ``loads``), so no reload of any agent's traits ever holds up a tick."""
        assert self._host is not None
        return self._host.load(
            entry.trait_name,
            entry.code,
            entry.class_name,
            entry.agent_id,
            suspect=suspect,
            background=background,
        )

    def _load(self, entry: registry.RegistryEntry) -> str | None:
        """Load a trait into the host; why it failed to load, or None. (A host that fails
        raises: the registry is applied again at the next refresh.)"""
        self._ensure_host()
        error = self._send_load(entry)
        if error is None:
            self._traits[entry.trait_name] = TraitState.of(entry)
            log.info(
                "loaded trait %s v%d (%s)",
                entry.trait_name,
                entry.version,
                entry.mutation_id,
                extra={"mutation_id": entry.mutation_id, "trait_name": entry.trait_name},
            )
            return None
        return error

    async def host_memory_bytes(self) -> int | None:
        """The host container's anonymous memory now (its cgroup), or None without a host."""
        host = self._host
        if host is None:
            return None
        return await asyncio.to_thread(container_memory_bytes, self._client, host.id)

    async def _sample_host(self) -> None:
        used = await self.host_memory_bytes()
        if used is not None:
            self.stats.host_memory_bytes = used
        stats = await self.host_stats()
        if stats is not None and isinstance(stats.get("workers"), list):
            self.stats.host_processes = len(stats["workers"])

    async def host_stats(self) -> dict | None:
        """The host's processes and their memory (``stats``), or None without a host."""
        async with self._host_lock:
            if self._host is None:
                return None
            try:
                return await asyncio.to_thread(self._host.stats)
            except (HostDeadlineExceeded, HostCrashed) as exc:
                await self._host_failed(exc)
                return None

    def _unload(self, name: str) -> None:
        self._traits.pop(name, None)
        if self._host is not None:
            try:
                self._host.unload(name)
            except (HostDeadlineExceeded, HostCrashed):
                self._drop_host()
        log.info("unloaded trait %s", name)

    def _drop_host(self) -> None:
        if self._host is not None:
            self._host.close()
            self._host = None

    # -- failures ------------------------------------------------------------------------------
    async def _account(self, name: str, result: dict) -> None:
        """A trait's result for one tick (``account``): quarantined when it must be."""
        state = self._traits.get(name)
        if state is None or not isinstance(result, dict):
            return
        if result.get("killed"):
            self._last_kill = (name, self._tick)
        why = account(state, result)
        if result.get("throttled"):
            self.stats.throttled_results += 1
        elif result.get("lost"):
            self.stats.lost_results += 1
        elif result.get("killed") and not result.get("confirmed"):
            self.stats.suspects += 1
            log.warning("trait %s is a suspect and runs alone now: %s", name, state.last_error)
        if why is not None:
            await self._quarantine(name, why)
            return
        departed = drift(state)
        if departed is not None and not state.suspect:
            state.suspect = True
            self.stats.drift_suspects += 1
            log.warning("trait %s is a suspect and runs alone now: %s", name, departed)
            self._isolate_later(state.entry)

    async def _host_failed(self, exc: Exception) -> None:
        """Drop the host (a new one starts in the background, and reloads every live trait,
        suspects alone). The supervisor runs no trait code and answers for its workers within
        its own deadline, so a host failure is the host's own or the machine's, with one
        exception: one that follows a kill of a worker within ``KILL_BLAME_TICKS`` ticks is
        charged to the trait that was killed (a second strike against a suspect: quarantined)."""
        hung = isinstance(exc, HostDeadlineExceeded)
        self.stats.deadline_misses += hung
        self.stats.restarts += 1
        culprit = None
        if self._last_kill is not None and self._tick - self._last_kill[1] <= KILL_BLAME_TICKS:
            culprit = self._last_kill[0]
            self._last_kill = None
        if culprit is not None and culprit in self._traits:
            self.stats.restarts_caused[culprit] = self.stats.restarts_caused.get(culprit, 0) + 1
            log.warning("trait host failed (%s) right after %s was killed; restarting it", exc, culprit)
            await self._quarantine(culprit, f"the trait host failed right after it was stopped from outside: {exc}")
        else:
            log.warning("trait host failed (%s); restarting it", exc)
        await asyncio.to_thread(self._drop_host)

    def _isolate_later(self, entry: registry.RegistryEntry) -> None:
        """Move a live trait into a worker of its own (its agent's worker is forked again
        without it), in the background: a suspect that behaves stays there."""

        async def isolate() -> None:
            async with self._host_lock:
                if self._host is None or entry.trait_name not in self._traits:
                    return  # a restarted host loads it alone anyway
                try:
                    await asyncio.to_thread(self._send_load, entry, True, True)
                except (HostDeadlineExceeded, HostCrashed) as exc:
                    await self._host_failed(exc)

        task = asyncio.create_task(isolate())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _unload_later(self, name: str) -> None:
        async def unload() -> None:
            async with self._host_lock:
                await asyncio.to_thread(self._unload, name)

        task = asyncio.create_task(unload())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _restart_soon(self) -> None:
        if self._restart_task is not None and not self._restart_task.done():
            return

        async def restart() -> None:
            try:
                async with self._host_lock:
                    await asyncio.to_thread(self._ensure_host)
                log.info("trait host restarted with %d trait(s)", len(self._traits))
            except Exception as exc:
                log.warning("could not restart the trait host: %s", exc)

        self._restart_task = asyncio.create_task(restart())

    async def _quarantine(self, name: str, why: str) -> None:
        state = self._traits.get(name)
        if state is None:
            return
        self._traits.pop(name, None)
        self._unload_later(name)  # its process goes (the host lock may be held here)
        await self._record_quarantine(state.entry, why)

    async def _record_quarantine(self, entry: registry.RegistryEntry, why: str) -> None:
        self._quarantined[entry.trait_name] = entry.mutation_id
        self.stats.quarantined.append(entry.trait_name)
        log.warning("quarantined trait %s: %s", entry.trait_name, why)
        if self._reporter is not None:  # returns at once: recorded, announced, rolled back in the background
            await self._reporter.report(entry, why)
