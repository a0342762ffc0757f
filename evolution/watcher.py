"""The Watcher (logic-flow.md 2.2-2.3): it follows
``ch:telemetry``, reads the last 5 WorldSnapshots of the running world, applies the five anomaly
rules (:func:`evolution.world_metrics.detect_anomalies`), picks the worst by severity and, unless
the cooldown or the circuit breaker holds it back,

1. writes the WorldReport to ``evo:trigger:{trigger_id}`` (hash, TTL 600 s),
2. starts a TaskWorkflow for external agents (:func:`evolution.tasks.start_workflow`, the same as
   ``POST /api/agents/tasks``), retried in the background while Temporal is unreachable,
3. starts the trigger's EvolutionCycleWorkflow (workflows/evolution.py: Architect → Coder →
   mutation; unless GENESIS_EVOLUTION_CYCLES_ENABLED=false), retried the same way — unless
   ``GENESIS_WATCHER_MAX_RUNNING_CYCLES`` cycles are running already (a cycle runs until its
   trait's verdict, so the built-in operator proposes no faster than traits are judged),
4. publishes ``anomaly_detected`` on the Evolution Feed (evolution/feed.py).

Cooldown and circuit breaker are one Lua script, so two Watchers never both pass the gate:

- cooldown: ``watcher:cooldown:{type}`` lives ``GENESIS_WATCHER_COOLDOWN_S`` after a trigger of
  that anomaly type; ``critical`` ignores it (seed 2.4);
- circuit breaker: ``watcher:trigger_counter`` counts the triggers of a fixed 60 s window; the
  6th within it sets ``watcher:circuit_breaker`` (TTL 300 s), announces
  ``circuit_breaker_activated`` on ``ch:feed`` and nothing triggers until it expires.

An operator's forced trigger (``POST /api/evolution/trigger``) passes the same cooldown but not
the circuit breaker, which is the Watcher's own: forced triggers are counted apart
(``watcher:forced_counter``, at most ``GENESIS_FORCED_TRIGGER_LIMIT`` per
``GENESIS_FORCED_TRIGGER_WINDOW_S``; over it they are refused, nothing is paused), so no number
of them keeps the Watcher from triggering.

Task severities are critical / high / low: the seed's ``medium`` (overpopulation, low
diversity) becomes a ``high`` task. Redis or Temporal being down is logged and retried; it never
ends the loop."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis.asyncio as aioredis

from evolution import cycles, feed, tasks, world_metrics
from evolution.world_metrics import Anomaly
from genesis import redis_keys as keys
from genesis.config import Settings
from genesis.dto import AgentTask, TaskSeverity
from genesis.redis_keys import Channels
from genesis.workflow_api import TASK_SIGNAL_RESOLVE, evolution_workflow_id, task_workflow_id

log = logging.getLogger("genesis.watcher")

# A Watcher's task ends (resolved) once this many snapshots in a row no longer show its problem:
# one could be a lull between two bad snapshots.
RESOLVE_AFTER_SNAPSHOTS = 2
OPEN_TASKS_READ = 500
# The seed's four severities onto the three of tasks (open-mutation-api.md).
TASK_SEVERITY = {"critical": "critical", "high": "high", "medium": "high", "low": "low"}
ANOMALY_TYPES = (
    "starvation",
    "overcrowding",
    "environmental",
    "overpopulation",
    "energy_crisis",
    "low_diversity",
    "stagnation",
)
# A forced trigger of a type no rule found: the seed's severity and area of that type.
DEFAULT_ANOMALY = {
    "starvation": Anomaly("starvation", "high", "traits"),
    "overcrowding": Anomaly("overcrowding", "high", "traits"),
    "environmental": Anomaly("environmental", "high", "traits"),
    "overpopulation": Anomaly("overpopulation", "medium", "physics"),
    "energy_crisis": Anomaly("energy_crisis", "high", "traits"),
    "low_diversity": Anomaly("low_diversity", "medium", "traits"),
    "stagnation": Anomaly("stagnation", "low", "environment"),
}
DESCRIPTION = {
    "starvation": "Mass extinction, mostly by starvation: entities need better ways to find and eat food.",
    "overcrowding": "Mass extinction, mostly by collisions: entities need to keep their distance.",
    "environmental": "Mass extinction, mostly by old age: lineages die out faster than they reproduce.",
    "overpopulation": "The population is far above the world's capacity and still growing.",
    "energy_crisis": "Average energy is low and falling fast: entities need to gather energy better.",
    "low_diversity": "Few traits are carried by a large population: the world needs new behaviours.",
    "stagnation": "Nothing has changed for five snapshots and no mutation went live in 10 minutes.",
}

# KEYS: cooldown, breaker, counter. ARGV: bypass_cooldown (0/1), cooldown_ms, limit, window_s, pause_s.
# -> 'cooldown' | 'paused' | 'tripped' | 'go'
_GATE_LUA = """
if ARGV[1] == '0' and redis.call('EXISTS', KEYS[1]) == 1 then return 'cooldown' end
if redis.call('EXISTS', KEYS[2]) == 1 then return 'paused' end
local n = redis.call('INCR', KEYS[3])
if n == 1 then redis.call('EXPIRE', KEYS[3], tonumber(ARGV[4])) end
if n > tonumber(ARGV[3]) then
  redis.call('SET', KEYS[2], '1', 'EX', tonumber(ARGV[5]))
  redis.call('DEL', KEYS[3])
  return 'tripped'
end
if tonumber(ARGV[2]) > 0 then redis.call('SET', KEYS[1], '1', 'PX', tonumber(ARGV[2])) end
return 'go'
"""

# A forced trigger. KEYS: cooldown, forced counter. ARGV: bypass_cooldown (0/1), cooldown_ms, limit,
# window_s. -> {'cooldown' | 'limited' | 'go', seconds until the window ends}
_FORCED_GATE_LUA = """
if ARGV[1] == '0' and redis.call('EXISTS', KEYS[1]) == 1 then return {'cooldown', 0} end
local n = redis.call('INCR', KEYS[2])
if n == 1 then redis.call('EXPIRE', KEYS[2], tonumber(ARGV[4])) end
if n > tonumber(ARGV[3]) then
  redis.call('DECR', KEYS[2])
  return {'limited', redis.call('TTL', KEYS[2])}
end
if tonumber(ARGV[2]) > 0 then redis.call('SET', KEYS[1], '1', 'PX', tonumber(ARGV[2])) end
return {'go', 0}
"""

GO, COOLDOWN, PAUSED, TRIPPED, LIMITED = "go", "cooldown", "paused", "tripped", "limited"
NO_ANOMALY, NO_SNAPSHOT, UNCHANGED = "no_anomaly", "no_snapshot", "unchanged"
TEMPORAL_RETRY_MAX_S = 10.0
# A cycle record still marked running after this long is taken for one whose workflow was lost,
# and no longer holds new cycles back (a cycle ends with its trait's verdict, minutes at most).
RUNNING_CYCLE_HORIZON_S = 3600.0
RECONNECT_MAX_S = 10.0


def cooldown_key(anomaly_type: str) -> str:
    return f"watcher:cooldown:{anomaly_type}"


@dataclass(frozen=True)
class Outcome:
    """What one analysis did: ``go`` (triggered), ``cooldown``, ``paused``, ``tripped`` (this
    trigger opened the circuit breaker), ``limited`` (a forced trigger over its own limit; retry
    after ``retry_after_s``), ``no_anomaly``, ``no_snapshot`` or ``unchanged`` (no snapshot since
    the last analysis; not kept in ``outcomes``)."""

    status: str
    anomaly: Anomaly | None = None
    trigger_id: str | None = None
    task_id: str | None = None
    tick: int | None = None
    retry_after_s: int | None = None
    cycles_running: int | None = None  # a trigger that started no cycle: the cycles already running


def worst(anomalies: Sequence[Anomaly]) -> Anomaly | None:
    """The most severe anomaly (the first found among equals: the rules' order)."""
    best = None
    for anomaly in anomalies:
        if best is None or world_metrics.SEVERITY_ORDER[anomaly.severity] > world_metrics.SEVERITY_ORDER[best.severity]:
            best = anomaly
    return best


def deltas(history: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The seed's TelemetryDeltas of the newest two snapshots (newest first); {} with fewer."""
    if len(history) < 2:
        return {}
    curr, prev = history[0], history[1]
    n, p = int(curr.get("entity_count", 0)), int(prev.get("entity_count", 0))
    return {
        "population_change": round((n - p) / max(p, 1), 4),
        "energy_trend": round(float(curr.get("avg_energy", 0.0)) - float(prev.get("avg_energy", 0.0)), 4),
        "death_rate": round(int(curr.get("deaths_last_period", 0)) / max(n, 1), 4),
        "birth_rate": round(int(curr.get("births_last_period", 0)) / max(n, 1), 4),
        "resource_trend": round(float(curr.get("resource_density", 0.0)) - float(prev.get("resource_density", 0.0)), 4),
        "trait_diversity": int(curr.get("trait_diversity", 0)),
    }


def summarize(history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    fields = (
        "tick",
        "entity_count",
        "avg_energy",
        "births_last_period",
        "deaths_last_period",
        "resource_density",
        "trait_diversity",
    )
    return [{f: s.get(f) for f in fields} for s in history]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


class Watcher:
    def __init__(
        self,
        settings: Settings,
        redis: aioredis.Redis,
        temporal: Callable[[], Awaitable[Any]],
        sessions: Any = None,
    ) -> None:
        """``temporal`` returns a connected client (called for each start, so it may reconnect);
        ``sessions`` is a SQLAlchemy sessionmaker for rule 5 (None: stagnation stays silent)."""
        self.settings = settings
        self.redis = redis
        self._temporal = temporal
        self._sessions = sessions
        self._starts: set[asyncio.Task] = set()
        self._last_head: world_metrics.SnapshotHead | None = None
        self._clear_counts: dict[str, int] = {}  # open task -> snapshots in a row without its problem
        self.outcomes: deque[Outcome] = deque(maxlen=100)  # the latest, for logs and tests

    # -- analysis ---------------------------------------------------------------------------

    async def history(self) -> list[dict[str, Any]]:
        """The last 5 snapshots of the running world, newest first."""
        return await world_metrics.recent_snapshots(self.redis, self.settings.engine.snapshot_interval)

    async def analyze(self) -> Outcome:
        """COLLECTING → ANALYZING → TRIGGERING → PUBLISHING (seed 2.2) over the latest snapshots.
        A snapshot already analyzed is not analyzed again (``unchanged``): Redis pub/sub channels
        are shared by all databases of a server, so events may come from another world."""
        heads = await world_metrics.recent_heads(self.redis, self.settings.engine.snapshot_interval)
        if heads and heads[0] == self._last_head:
            return Outcome(UNCHANGED, tick=heads[0].tick)
        history = await world_metrics.load_snapshots(self.redis, heads) if heads else []
        if not history:
            return self._record(Outcome(NO_SNAPSHOT))
        self._last_head = heads[0]
        recently = True
        if self._sessions is not None and world_metrics.stagnating(history):
            recently = await world_metrics.mutation_applied_since(
                self._sessions, time.time() - world_metrics.STAGNATION_QUIET_S
            )
        found = world_metrics.detect_anomalies(
            history, max_entities=self.settings.engine.max_population, mutation_applied_recently=recently
        )
        await self.resolve_cleared({a.type for a in found}, int(history[0].get("tick", 0)))
        anomaly = worst(found)
        if anomaly is None:
            log.debug("tick %s: the world is stable", history[0].get("tick"))
            return self._record(Outcome(NO_ANOMALY, tick=history[0].get("tick")))
        return await self.trigger(history, anomaly)

    async def force(self, anomaly_type: str | None = None, severity: str | None = None) -> Outcome:
        """An operator's trigger from the latest snapshot: ``anomaly_type`` as given (with the
        severity the rules found for it, else the seed's), or the worst the rules find. It passes
        the cooldown and a limit of its own (not the Watcher's circuit breaker)."""
        history = await self.history()
        if not history:
            return Outcome(NO_SNAPSHOT)
        found = world_metrics.detect_anomalies(
            history, max_entities=self.settings.engine.max_population, mutation_applied_recently=True
        )
        if anomaly_type is None:
            anomaly = worst(found)
            if anomaly is None:
                return Outcome(NO_ANOMALY, tick=history[0].get("tick"))
        else:
            anomaly = next((a for a in found if a.type == anomaly_type), DEFAULT_ANOMALY[anomaly_type])
        if severity is not None:
            anomaly = Anomaly(anomaly.type, severity, anomaly.area)
        return await self.trigger(history, anomaly, forced=True)

    # -- resolving ---------------------------------------------------------------------------

    async def resolve_cleared(self, shown: set[str], tick: int) -> list[str]:
        """End the Watcher's open tasks whose problem the last ``RESOLVE_AFTER_SNAPSHOTS`` snapshots
        analyzed no longer show (signal ``resolve``, with who and why). Operators' tasks are theirs
        to end. The task ids signalled."""
        entries = await tasks.queue_entries(self.redis, OPEN_TASKS_READ)
        open_tasks = [
            t for t, _ in await tasks.live_tasks(self.redis, [i for _, i in entries]) if t.source == "watcher"
        ]
        self._clear_counts = {
            t.task_id: self._clear_counts.get(t.task_id, 0) + 1 for t in open_tasks if t.problem_type not in shown
        }
        cleared = [t for t in open_tasks if self._clear_counts.get(t.task_id, 0) >= RESOLVE_AFTER_SNAPSHOTS]
        for task in cleared:
            reason = (
                f"resolved by the Watcher: {RESOLVE_AFTER_SNAPSHOTS} snapshots in a row, the last at tick {tick}, "
                f"no longer show {task.problem_type}"
            )
            try:
                client = await self._temporal()
                await client.get_workflow_handle(task_workflow_id(task.task_id)).signal(TASK_SIGNAL_RESOLVE, reason)
            except Exception as exc:  # its workflow ended meanwhile, or Temporal is away: the next snapshot retries
                log.info("could not resolve %s: %s", task.task_id, exc)
                continue
            self._clear_counts.pop(task.task_id, None)
            log.info("%s (%s) %s", task.task_id, task.problem_type, reason)
            await self._feed(
                "task_resolved",
                f"Task {task.task_id} ({task.problem_type}) closed: {reason}.",
                workflow_id=task_workflow_id(task.task_id),
                task_id=task.task_id,
                problem_type=task.problem_type,
                tick=tick,
            )
        return [t.task_id for t in cleared if t.task_id not in self._clear_counts]

    # -- triggering -------------------------------------------------------------------------

    async def gate(self, anomaly: Anomaly) -> str:
        """Cooldown and circuit breaker, atomically: ``go``, ``cooldown``, ``paused`` or ``tripped``."""
        s = self.settings
        result = await self.redis.eval(
            _GATE_LUA,
            3,
            cooldown_key(anomaly.type),
            keys.WATCHER_CIRCUIT_BREAKER,
            keys.WATCHER_TRIGGER_COUNTER,
            "1" if anomaly.severity == "critical" else "0",
            int(s.watcher.cooldown_s * 1000),
            s.watcher.trigger_limit,
            s.watcher.trigger_window_s,
            s.watcher.pause_s,
        )
        return _text(result)

    async def forced_gate(self, anomaly: Anomaly) -> tuple[str, int]:
        """Cooldown and the forced triggers' own limit, atomically: (``go`` | ``cooldown`` |
        ``limited``, seconds until the limit's window ends)."""
        s = self.settings
        verdict, retry_after = await self.redis.eval(
            _FORCED_GATE_LUA,
            2,
            cooldown_key(anomaly.type),
            keys.WATCHER_FORCED_COUNTER,
            "1" if anomaly.severity == "critical" else "0",
            int(s.watcher.cooldown_s * 1000),
            s.forced_trigger_limit,
            s.forced_trigger_window_s,
        )
        return _text(verdict), max(1, int(retry_after))

    async def trigger(self, history: Sequence[Mapping[str, Any]], anomaly: Anomaly, *, forced: bool = False) -> Outcome:
        curr = history[0]
        tick = int(curr.get("tick", 0))
        if forced:
            verdict, retry_after = await self.forced_gate(anomaly)
            if verdict == LIMITED:
                log.warning(
                    "forced %s trigger refused: over %d forced triggers in %d s",
                    anomaly.type,
                    self.settings.forced_trigger_limit,
                    self.settings.forced_trigger_window_s,
                )
                return self._record(Outcome(LIMITED, anomaly, tick=tick, retry_after_s=retry_after))
        else:
            verdict = await self.gate(anomaly)
        if verdict == COOLDOWN:
            log.info("tick %s: %s (%s) found, cooldown active: skipped", tick, anomaly.type, anomaly.severity)
            return self._record(Outcome(COOLDOWN, anomaly, tick=tick))
        if verdict == PAUSED:
            log.info("tick %s: %s (%s) found, circuit breaker open: skipped", tick, anomaly.type, anomaly.severity)
            return self._record(Outcome(PAUSED, anomaly, tick=tick))
        if verdict == TRIPPED:
            s = self.settings
            log.warning(
                "circuit breaker activated: >%d triggers in %d s; paused for %d s",
                s.watcher.trigger_limit,
                s.watcher.trigger_window_s,
                s.watcher.pause_s,
            )
            await self._feed(
                "circuit_breaker_activated",
                f"Too many triggers (more than {s.watcher.trigger_limit} in {s.watcher.trigger_window_s} s). "
                f"Watcher paused for {s.watcher.pause_s // 60} minutes.",
                problem_type=anomaly.type,
                severity=anomaly.severity,
                paused_for_sec=s.watcher.pause_s,
            )
            return self._record(Outcome(TRIPPED, anomaly, tick=tick))

        trigger_id = f"trg_{uuid.uuid4().hex[:12]}"
        task = self.task_for(trigger_id, anomaly, curr)
        report = await self.world_report(trigger_id, anomaly, history, task, forced)
        key = keys.evolution_trigger(trigger_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            # redis' stubs type `mapping` as Mapping[FieldT, ...]: its invariant key refuses dict[str, str]
            pipe.hset(key, mapping=report)  # type: ignore[arg-type]
            pipe.expire(key, self.settings.watcher.report_ttl_s)
            await pipe.execute()
        self._start_task(task)
        cycle = self.settings.evolution_cycles_enabled
        running = await self.cycles_running() if cycle and not forced else 0
        limit = self.settings.watcher.max_running_cycles
        held_back = running >= limit
        if cycle and not held_back:
            self._start_cycle(trigger_id, task.expires_at, anomaly.type)
        if not cycle:
            cycle_note = "."
        elif held_back:
            cycle_note = f"; no evolution cycle started: {running} still running (at most {limit} at once)."
        else:
            cycle_note = "; evolution cycle started."
        await self._feed(
            "anomaly_detected",
            f"Anomaly: {anomaly.type} (severity: {anomaly.severity}) | population: {int(curr.get('entity_count', 0))}"
            f" | avg energy: {float(curr.get('avg_energy', 0.0)):.1f}"
            f" | Task {task.task_id} published for external agents" + cycle_note,
            trigger_id=trigger_id,
            task_id=task.task_id,
            problem_type=anomaly.type,
            severity=anomaly.severity,
            task_severity=task.severity.value,
            tick=tick,
            forced=forced,
            workflow_id=evolution_workflow_id(trigger_id) if cycle and not held_back else None,
        )
        log.info(
            "tick %s: %s (%s) -> trigger %s, task %s%s",
            tick,
            anomaly.type,
            anomaly.severity,
            trigger_id,
            task.task_id,
            f", no cycle ({running} running)" if cycle and held_back else "",
        )
        outcome = Outcome(GO, anomaly, trigger_id, task.task_id, tick, cycles_running=running if held_back else None)
        return self._record(outcome)

    async def cycles_running(self) -> int:
        """Evolution cycles running now (0 when Postgres cannot tell: a cycle is then started,
        and its own records fail loudly if Postgres is really gone)."""
        if self._sessions is None:
            return 0
        since = datetime.fromtimestamp(time.time() - RUNNING_CYCLE_HORIZON_S, UTC)
        try:
            return await cycles.count_running(self._sessions, since)
        except Exception as exc:  # Postgres down
            log.warning("could not count the running cycles (%s: %s)", type(exc).__name__, exc)
            return 0

    def task_for(self, trigger_id: str, anomaly: Anomaly, curr: Mapping[str, Any]) -> AgentTask:
        severity = TASK_SEVERITY[anomaly.severity]
        return AgentTask(
            task_id=f"task_{trigger_id.removeprefix('trg_')}",
            expires_at=round(time.time() + self.settings.task.ttl_s(severity), 3),
            source="watcher",
            problem_type=anomaly.type,
            severity=TaskSeverity(severity),
            description=f"{DESCRIPTION.get(anomaly.type, anomaly.type)} (Watcher severity: {anomaly.severity})",
            suggested_area=anomaly.area,
            world_context={
                "tick": int(curr.get("tick", 0)),
                "entity_count": int(curr.get("entity_count", 0)),
                "avg_energy": float(curr.get("avg_energy", 0.0)),
                "deaths_last_period": int(curr.get("deaths_last_period", 0)),
                "trait_diversity": int(curr.get("trait_diversity", 0)),
                "trigger_id": trigger_id,
            },
            constraints=list(tasks.TASK_CONSTRAINTS),
        )

    async def world_report(
        self,
        trigger_id: str,
        anomaly: Anomaly,
        history: Sequence[Mapping[str, Any]],
        task: AgentTask,
        forced: bool,
    ) -> dict[str, str]:
        """The seed's WorldReport as a flat hash (JSON for the nested values)."""
        curr = history[0]
        active = sorted(_text(k) for k in await self.redis.hkeys(keys.REGISTRY_TRAITS))
        report = {
            "trigger_id": trigger_id,
            "tick": int(curr.get("tick", 0)),
            "snapshot_key": keys.world_snapshot(int(curr.get("tick", 0))),
            "problem_type": anomaly.type,
            "severity": anomaly.severity,
            "suggested_area": anomaly.area,
            "task_id": task.task_id,
            "task_severity": task.severity.value,
            "forced": "1" if forced else "0",
            "created_at": round(time.time(), 3),
            "snapshot": _dumps(dict(curr)),
            "deltas": _dumps(deltas(history)),
            "history_summary": _dumps(summarize(history)),
            "active_traits": _dumps(active),
            "death_breakdown": _dumps({c: int(curr.get(f"death_{c}", 0)) for c in world_metrics.DEATH_CAUSES}),
        }
        return {k: str(v) for k, v in report.items()}

    def _start_task(self, task: AgentTask) -> None:
        """Start the task's TaskWorkflow in the background, retrying while Temporal is
        unreachable until the task would have expired."""

        async def start(client) -> None:
            await tasks.start_workflow(client, self.settings.task_queue, task)

        self._in_background(start, f"the TaskWorkflow of {task.task_id}", task.expires_at)

    def _start_cycle(self, trigger_id: str, give_up_at: float, problem_type: str | None = None) -> None:
        """Start the trigger's EvolutionCycleWorkflow (Architect → Coder → mutation) in the
        background, retried like the task's start."""

        async def start(client) -> None:
            await cycles.start_cycle(client, self.settings.task_queue, trigger_id, problem_type=problem_type)

        self._in_background(start, f"the evolution cycle of {trigger_id}", give_up_at)

    def _in_background(self, start: Callable[[Any], Awaitable[None]], what: str, give_up_at: float) -> None:
        job = asyncio.create_task(self._start_with_retries(start, what, give_up_at), name=f"start {what}")
        self._starts.add(job)
        job.add_done_callback(self._starts.discard)

    async def _start_with_retries(self, start: Callable[[Any], Awaitable[None]], what: str, give_up_at: float) -> None:
        from temporalio.exceptions import WorkflowAlreadyStartedError

        delay = 0.5
        while True:
            try:
                await start(await self._temporal())
                return
            except WorkflowAlreadyStartedError:  # an earlier attempt got through
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if time.time() + delay >= give_up_at:
                    log.error("%s was never started (Temporal: %s); giving up", what, exc)
                    return
                log.warning("could not start %s (%s: %s); retrying in %.1f s", what, type(exc).__name__, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, TEMPORAL_RETRY_MAX_S)

    async def drain(self, timeout: float = 30.0) -> None:
        """Wait for the background workflow starts (tests, shutdown)."""
        if self._starts:
            await asyncio.wait(list(self._starts), timeout=timeout)

    async def _feed(self, action: str, message: str, **fields: Any) -> None:
        await feed.publish(self.redis, "watcher", action, message, **fields)

    def _record(self, outcome: Outcome) -> Outcome:
        self.outcomes.append(outcome)
        return outcome

    # -- the loop ----------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event | None = None, ready: asyncio.Event | None = None) -> None:
        """IDLE: wait for ``ch:telemetry``; analyze on each snapshot event. Redis failures are
        logged and the subscription is made again with a backoff; nothing ends the loop but
        ``stop`` (or cancellation)."""
        stop = stop or asyncio.Event()
        backoff = 0.5
        while not stop.is_set():
            pubsub = self.redis.pubsub()
            try:
                await pubsub.subscribe(Channels.TELEMETRY)
                log.info("watching %s", Channels.TELEMETRY)
                if ready is not None:
                    ready.set()
                backoff = 0.5
                while not stop.is_set():
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                    if message is None:
                        continue
                    try:
                        await self.analyze()
                    except asyncio.CancelledError:
                        raise
                    except Exception as exc:  # one bad snapshot or a Redis blip: the next event tries again
                        log.warning("analysis failed (%s: %s)", type(exc).__name__, exc)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning(
                    "lost %s (%s: %s); resubscribing in %.1f s", Channels.TELEMETRY, type(exc).__name__, exc, backoff
                )
                try:
                    await asyncio.wait_for(stop.wait(), backoff)
                except TimeoutError:
                    pass
                backoff = min(backoff * 2, RECONNECT_MAX_S)
            finally:
                try:
                    await pubsub.aclose()
                except Exception:
                    pass
