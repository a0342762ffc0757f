"""Live traits: the activated traits run in one long-lived trait-host container per engine.

The engine process never imports or executes trait code. Each tick it sends plain entity views
to the host and gets intents back (the world checks them). Inside the host each agent's traits
run in a process of their own (sandbox/trait_host.py), which enforces their limits and says
which trait was at fault. A trait that raises or overruns repeatedly, or that is stopped from
outside while it ran alone, is quarantined; what that means beyond this process (the Postgres
record, the mutation's rollback, the feed) is engine/quarantine.py's job. A host that misses its
deadline or dies is killed and restarted with the live traits reloaded, blaming no trait, while
the world keeps ticking.

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
from genesis.trait_wire import Carriers, MalformedIntents, decode_intent_groups
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

if TYPE_CHECKING:
    from .quarantine import QuarantineReporter
    from .traits import Intents

log = logging.getLogger("genesis.engine.traits")


def host_owner(pid: int | None = None) -> str:
    """The engine's host container is named after the engine process: genesis-sbx-engine-<pid>-…"""
    return f"engine-{pid if pid is not None else os.getpid()}"


def host_agent(entry: registry.RegistryEntry) -> str:
    """The agent a trait's worker belongs to in the host: its owner, or the trait alone."""
    return entry.agent_id or f"trait:{entry.trait_name}"


STRIKES_TO_QUARANTINE = 3  # consecutive ticks with a timeout or an exception
KILL_BLAME_TICKS = 10  # a host failure this many ticks after a worker's kill is charged to the killed trait
# The host's workers get this share of the tick's deadline: the rest is the supervisor's, to
# merge and answer in time even when its container is short of CPU.
WORKERS_SHARE = 0.6
LOAD_DEADLINE_S = 5.0  # a load forks a process and runs the trait's module body (the host caps it at 2 s)
HOST_SAMPLE_S = 5.0  # how often the host's memory and processes are sampled for the metrics


@dataclass
class TraitState:
    entry: registry.RegistryEntry
    suspect: bool = False  # killed once while it ran beside its mates: it runs alone, across host restarts
    strikes: int = 0
    calls: int = 0
    errors: int = 0
    timeouts: int = 0
    lost: int = 0  # ticks it did not run through nobody's fault
    throttled: int = 0  # ticks it sat out because its agent was over its share of the traits' CPU
    total_us: float = 0.0
    last_error: str | None = None
    window: Window = field(default_factory=lambda: Window())  # live behaviour since the last drift check


@dataclass
class Window:
    """A trait's live behaviour over the ticks since its last comparison with its sandbox profile."""

    ticks: int = 0
    calls: int = 0
    total_us: float = 0.0
    errors: int = 0
    intents: int = 0


DRIFT_WINDOW_CALLS = 500  # calls (and DRIFT_WINDOW_TICKS ticks) between comparisons with the profile
DRIFT_WINDOW_TICKS = 60
DRIFT_CPU_FACTOR, DRIFT_CPU_MARGIN_US = 10.0, 200.0  # live CPU per call beyond both is a departure
DRIFT_ERRORS_MIN, DRIFT_ERRORS_FACTOR = 0.2, 5.0  # errors per call beyond both
DRIFT_INTENTS_FACTOR, DRIFT_INTENTS_MARGIN = 3.0, 2.0  # intents per call beyond both


def drift(state: TraitState) -> str | None:
    """How ``state``'s live behaviour departs sharply from its sandbox profile (its CPU per call,
    its errors per call, the intents it makes per call), or None; judged once a window of calls is
    full, which then starts again. A trait that behaved in its test and changes once live (gated
    on a count of calls, an age, a date) shows here, however long its test ran."""
    profile, w = state.entry.profile, state.window
    if profile is None or w.calls < DRIFT_WINDOW_CALLS or w.ticks < DRIFT_WINDOW_TICKS:
        return None
    state.window = Window()
    us, errors, intents = w.total_us / w.calls, w.errors / w.calls, w.intents / w.calls
    if us > max(DRIFT_CPU_FACTOR * profile.call_us_mean, profile.call_us_mean + DRIFT_CPU_MARGIN_US):
        return f"its calls cost {us:.0f} us of CPU each live against {profile.call_us_mean:.1f} us in its sandbox test"
    if errors >= DRIFT_ERRORS_MIN and errors > DRIFT_ERRORS_FACTOR * profile.errors_per_call + 0.05:
        return f"{errors:.0%} of its calls fail live against {profile.errors_per_call:.0%} in its sandbox test"
    if intents > DRIFT_INTENTS_FACTOR * profile.intents_per_call + DRIFT_INTENTS_MARGIN:
        return f"it makes {intents:.1f} intents a call live against {profile.intents_per_call:.1f} in its sandbox test"
    return None


def account(state: TraitState, result: dict) -> str | None:
    """Count a trait's result for one tick into ``state``; why it must be quarantined now, or
    None. Only evidence about the trait itself counts against it: its own errors and CPU
    overruns, ``STRIKES_TO_QUARANTINE`` ticks in a row, or a kill confirmed while it ran alone. A
    first kill (its process ran other traits too) only makes it a suspect, which the host runs
    alone from then on; a result "lost" through nobody's fault counts for nothing. (The live
    engine and a held mutation's shadow judge alike.)"""
    state.calls += result.get("calls", 0)
    state.total_us += result.get("total_us", 0.0)
    if result.get("throttled"):
        state.throttled += 1
        return None
    if result.get("over_share"):  # the host names its agent's heaviest trait after a long overuse
        state.last_error = str(result["over_share"])[:500]
        return state.last_error
    if result.get("lost"):
        state.lost += 1
        return None
    if result.get("killed"):
        state.last_error = f"stopped from outside its process: {result['killed']}"
        if result.get("confirmed"):
            return f"{state.last_error} (confirmed while it ran alone)"
        state.suspect = True
        return None
    errors, timeouts = result.get("error_count", len(result.get("errors", []))), len(result.get("timeouts", []))
    state.errors += errors
    state.timeouts += timeouts
    window = state.window
    window.ticks += 1
    window.calls += result.get("calls", 0)
    window.total_us += result.get("total_us", 0.0)
    window.errors += errors + timeouts
    window.intents += result.get("intents", 0)
    if not (errors or timeouts):
        state.strikes = 0
        return None
    state.strikes += 1
    state.last_error = result["errors"][0]["error"] if result.get("errors") else "exceeded its CPU budget"
    if state.strikes >= STRIKES_TO_QUARANTINE:
        return f"{state.strikes} ticks in a row with errors or timeouts: {state.last_error}"
    return None


@dataclass
class HostStats:
    restarts: int = 0
    deadline_misses: int = 0
    skipped_ticks: int = 0  # ticks whose traits did not run because the host was (re)starting
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
    """TraitRunner backed by a trait-host container (see engine/traits.py for the protocol)."""

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
        self._host: TraitHostContainer | None = None
        self._traits: dict[str, TraitState] = {}
        self._quarantined: dict[str, str] = {}  # trait -> mutation_id of the quarantined version
        self._registry_version = -1
        # One request at a time on the host's socket; a tick that finds it busy (a trait being
        # loaded: a fork and a module body, milliseconds) waits for it.
        self._host_lock = asyncio.Lock()
        self._restart_task: asyncio.Task | None = None
        self._last_kill: tuple[str, int] | None = None  # (trait, tick) of the last kill of a worker
        self._tick = 0
        self._background: set[asyncio.Task] = set()
        self._next_sample = 0.0
        self.stats = HostStats()
        # what became of the last tick's request (engine/inputs.py HOST_*, and why), for the journal
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

    def agent_of(self) -> dict[str, str]:
        """Live trait -> the agent whose worker in the host runs it (as the host names it)."""
        return {name: host_agent(state.entry) for name, state in self._traits.items()}

    def agent_ids(self) -> dict[str, str]:
        """Live trait -> the agent whose version is running."""
        return {name: state.entry.agent_id for name, state in self._traits.items()}

    def mutation_ids(self) -> dict[str, str]:
        """Live trait -> the mutation whose version is running (for observation reports)."""
        return {name: state.entry.mutation_id for name, state in self._traits.items()}

    async def _apply(self, entries: dict[str, registry.RegistryEntry]) -> None:
        for name in [
            n for n in self._traits if n not in entries or entries[n].mutation_id != self._traits[n].entry.mutation_id
        ]:
            await asyncio.to_thread(self._unload, name)
        for name, entry in sorted(entries.items()):
            if name in self._traits or self._quarantined.get(name) == entry.mutation_id:
                continue
            if self._reporter is not None and self._reporter.holds(entry.mutation_id):
                continue
            error = await asyncio.to_thread(self._load, entry)
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
        # The workers get less than the whole deadline: the host answers for them in time.
        message = {
            "op": "views",
            "tick": tick,
            **views,
            "run": run,
            "deadline_ms": self.deadline_s * WORKERS_SHARE * 1000,
            # Fast-forward: every trait runs every tick (a worker being started is waited for, as the
            # host itself is; nobody is throttled), as in a paced world that kept its pace.
            "complete": self.fast_forward,
        }
        async with self._host_lock:  # a trait being loaded: the tick waits (a few ms) for it
            if self._host is None:
                self.stats.skipped_ticks += 1
                self.last_outcome = ("skipped", "the trait host is starting")
                return {}
            try:
                # In the loop's own thread: the tick waits for this reply anyway, and handing the
                # call to a worker thread cost ~0.7-1 ms of CPU per tick (500 entities: ~10% of
                # it). The loop is held at most deadline_s (the host is killed then); other tasks
                # run between ticks. The host exists here, so no container is started.
                reply = self._host.request(message, self.deadline_s, while_waiting)
            except (HostDeadlineExceeded, HostCrashed) as exc:
                self.last_outcome = ("missed", str(exc))
                await self._host_failed(exc)
                return {}
        try:
            if not reply.get("ok"):
                raise MalformedIntents(f"the host refused the tick: {reply.get('error')}")
            attachment = reply.get("attachment")
            intents = decode_intent_groups(
                reply.get("intent_groups"),
                attachment if isinstance(attachment, bytes) else None,
                reply.get("group_agents"),
                Carriers.of(views, self.agent_of()),
            )
            results = reply.get("results")
            if not isinstance(results, dict):
                raise MalformedIntents("results must be an object")
        except MalformedIntents as exc:
            # The supervisor never runs trait code and checks its workers' replies, so garbage
            # here is the host's own failure: it is replaced, no trait is blamed, and this tick
            # runs on instinct.
            self.last_outcome = ("refused", f"unusable reply: {exc}")
            await self._host_failed(HostCrashed(f"unusable reply: {exc}"))
            return {}
        self.last_outcome = ("ok", "")
        loads = reply.get("loads")
        for name, outcome in sorted(loads.items()) if isinstance(loads, dict) else ():
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
    def _ensure_host(self) -> TraitHostContainer:
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
                host.say_hello(hello_message(self._settings, self.deadline_s * WORKERS_SHARE), 20.0)
            except BaseException:
                host.close()
                raise
            self._host = host
            for state in self._traits.values():  # after a restart: reload what was live, suspects alone
                self._send_load(state.entry, state.suspect, background=True)
        return self._host

    def _send_load(self, entry: registry.RegistryEntry, suspect: bool = False, background: bool = False) -> dict:
        """Give ``entry`` to the host. A new trait's load is waited for (one trait's module body
        and instance, within the host's load CPU limit), so that it runs from the next tick on in
        a paced world as in fast-forward; after a restart every live trait is given back in the
        ``background`` (the outcome comes with a tick's reply, ``loads``), so no reload of any
        agent's traits ever holds up a tick."""
        assert self._host is not None
        return self._host.request(
            {
                "op": "load",
                "trait": entry.trait_name,
                "source": entry.code,
                "class_name": entry.class_name,
                "agent": host_agent(entry),
                "suspect": suspect,
                "background": background,
            },
            LOAD_DEADLINE_S,
        )

    def _load(self, entry: registry.RegistryEntry) -> str | None:
        """Load a trait into the host; why it failed to load, or None. (A host that fails
        raises: the registry is applied again at the next refresh.)"""
        self._ensure_host()
        reply = self._send_load(entry)
        if reply.get("ok"):
            self._traits[entry.trait_name] = TraitState(entry)
            log.info(
                "loading trait %s v%d (%s)",
                entry.trait_name,
                entry.version,
                entry.mutation_id,
                extra={"mutation_id": entry.mutation_id, "trait_name": entry.trait_name},
            )
            return None
        return str(reply.get("error"))[:500]

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
                return await asyncio.to_thread(self._host.request, {"op": "stats"}, LOAD_DEADLINE_S)
            except (HostDeadlineExceeded, HostCrashed) as exc:
                await self._host_failed(exc)
                return None

    def _unload(self, name: str) -> None:
        self._traits.pop(name, None)
        if self._host is not None:
            try:
                self._host.request({"op": "unload", "trait": name}, 2.0)
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
