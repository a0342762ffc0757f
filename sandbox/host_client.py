"""The one trusted client of the trait host (sandbox/traithost/).

Every caller that runs traits — the live engine (engine/process/live_traits.py), a mutation's sandbox
test (activities/sandbox.py), a held mutation's shadow (activities/trait_shadow.py) — speaks to
its host through :class:`HostClient`: the same requests in the same wire form (views as raw
bytes in the request's attachment), the same reply checks, deadlines and policy for a lost
result, and the same judgement of each trait's results (:func:`account`, :func:`drift`). A
tick's answer is a :class:`TickReply`: the intents (only for carriers of the agent whose worker
sent them), each trait's result, and the outcome.

The host runs untrusted code, so nothing in its reply is trusted: a reply that does not decode is
an outcome (``refused``), never an exception of the caller's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from genesis.dto import SandboxProfile
from genesis.trait_wire import Carriers, IntentColumns, MalformedIntents, decode_intent_groups
from sandbox.container import HostCrashed, HostDeadlineExceeded, TraitHostContainer

# What became of a tick's request (the journal's words for it, engine/core/inputs.py HOST_*).
OK, MISSED, REFUSED = "ok", "missed", "refused"

# The host's workers get this share of the tick's deadline: the rest is the supervisor's, to
# merge and answer in time even when its container is short of CPU.
WORKERS_SHARE = 0.6
HOST_START_DEADLINE_S = 20.0
LOAD_DEADLINE_S = 5.0  # a load forks a process and runs the trait's module body (the host caps its CPU)
UNLOAD_DEADLINE_S = 2.0

STRIKES_TO_QUARANTINE = 3  # consecutive ticks with a timeout or an exception

DRIFT_WINDOW_CALLS = 500  # calls (and DRIFT_WINDOW_TICKS ticks) between comparisons with the profile
DRIFT_WINDOW_TICKS = 60
DRIFT_CPU_FACTOR, DRIFT_CPU_MARGIN_US = 10.0, 200.0  # live CPU per call beyond both is a departure
DRIFT_ERRORS_MIN, DRIFT_ERRORS_FACTOR = 0.2, 5.0  # errors per call beyond both
DRIFT_INTENTS_FACTOR, DRIFT_INTENTS_MARGIN = 3.0, 2.0  # intents per call beyond both


def host_agent(agent_id: str, trait_name: str) -> str:
    """The agent a trait's worker belongs to in the host: its owner, or the trait alone."""
    return agent_id or f"trait:{trait_name}"


# -- judging a trait's results ---------------------------------------------------------------


@dataclass
class Window:
    """A trait's live behaviour over the ticks since its last comparison with its sandbox profile."""

    ticks: int = 0
    calls: int = 0
    total_us: float = 0.0
    errors: int = 0
    intents: int = 0


@dataclass
class TraitAccount:
    """What a caller knows of one trait's results: its counts, its strikes, whether it is a
    suspect (it runs alone, across host restarts), and its behaviour against its profile."""

    profile: SandboxProfile | None = None
    suspect: bool = False  # killed once while it ran beside its mates, or departed from its profile
    strikes: int = 0
    calls: int = 0
    errors: int = 0
    timeouts: int = 0
    lost: int = 0  # ticks it did not run through nobody's fault
    throttled: int = 0  # ticks it sat out because its agent was over its share of the traits' CPU
    total_us: float = 0.0
    last_error: str | None = None
    window: Window = field(default_factory=Window)


def account(state: TraitAccount, result: dict) -> str | None:
    """Count a trait's result for one tick into ``state``; why it must be quarantined now, or
    None. Only evidence about the trait itself counts against it: its own errors and CPU
    overruns, ``STRIKES_TO_QUARANTINE`` ticks in a row, a kill confirmed while it ran alone, or
    its agent's lasting overuse of CPU naming it as the heaviest. A first kill (its process ran
    other traits too) only makes it a suspect, which the host runs alone from then on; a result
    "lost" or "throttled" counts for nothing. (Every caller judges alike.)"""
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


def drift(state: TraitAccount) -> str | None:
    """How ``state``'s live behaviour departs sharply from its sandbox profile (its CPU per call,
    its errors per call, the intents it makes per call), or None; judged once a window of calls is
    full, which then starts again. A trait that behaved in its test and changes once live (gated
    on a count of calls, an age, a date) shows here, however long its test ran."""
    profile, w = state.profile, state.window
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


# -- the client --------------------------------------------------------------------------------


def no_intents() -> IntentColumns:
    ints = np.empty(0, dtype=np.int64)
    return IntentColumns(ints, np.empty(0, dtype=np.uint32), ints, np.empty(0), np.empty(0), [], {}, {})


@dataclass
class TickReply:
    """The host's answer to one tick. ``outcome``: OK, MISSED (no answer in time, or the host
    died: it has been killed) or REFUSED (an unusable reply); only with OK are there intents and
    results. ``loads``: the outcomes of background loads that ended since the last tick."""

    outcome: str
    why: str = ""
    intents: IntentColumns = field(default_factory=no_intents)
    results: dict[str, dict] = field(default_factory=dict)
    loads: dict[str, dict] = field(default_factory=dict)
    lost_retries: int = 0  # times the tick was sent again because a result was lost
    elapsed_s: float = 0.0  # the request's wall time, without the caller's ``while_waiting`` work
    late: bool = False  # OK, but past the deadline (within the caller's grace)
    failure: HostDeadlineExceeded | HostCrashed | None = None  # with MISSED: how the host failed

    @property
    def ok(self) -> bool:
        return self.outcome == OK


class HostClient:
    """The trusted side of one trait-host container (the container itself: ``host``)."""

    def __init__(self, host: TraitHostContainer):
        self.host = host

    @property
    def id(self) -> str:
        return self.host.id

    def close(self) -> None:
        self.host.close()

    def load(
        self,
        trait: str,
        source: str,
        class_name: str,
        agent: str = "",
        *,
        suspect: bool = False,
        background: bool = False,
        deadline_s: float = LOAD_DEADLINE_S,
    ) -> str | None:
        """Give a trait to the host (a ``suspect`` to a worker of its own); why it failed to load,
        or None. With ``background`` the host answers at once and the outcome comes with a later
        tick (``TickReply.loads``). A host that fails raises HostDeadlineExceeded or HostCrashed."""
        reply = self.host.request(
            {
                "op": "load",
                "trait": trait,
                "source": source,
                "class_name": class_name,
                "agent": host_agent(agent, trait),
                "suspect": suspect,
                "background": background,
            },
            deadline_s,
        )
        return None if reply.get("ok") else str(reply.get("error"))[:500]

    def unload(self, trait: str) -> None:
        self.host.request({"op": "unload", "trait": trait}, UNLOAD_DEADLINE_S)

    def stats(self) -> dict[str, Any]:
        return self.host.request({"op": "stats"}, LOAD_DEADLINE_S)

    def tick(
        self,
        tick: int,
        views: Mapping[str, Any],
        run: list[str],
        deadline_s: float,
        *,
        agent_of: Mapping[str, str] | None = None,
        complete: bool = False,
        count_blocks: bool = False,
        lost_retries: int = 0,
        while_waiting: Callable[[], None] | None = None,
        grace_s: float = 0.0,
    ) -> TickReply:
        """Run ``run`` on the carriers of ``views`` (``World.trait_views(run, raw=True)``).

        ``deadline_s``: the host is killed past it (the workers get ``WORKERS_SHARE`` of it).
        ``agent_of``: trait -> its owner; an intent for an entity that carries no trait of the
        agent whose worker sent it is dropped (``intents.foreign`` counts them). ``complete``:
        every trait runs (a worker being started is waited for; nobody is throttled), as a run
        that must equal a paced one needs. The lost-result policy: a tick with a result lost
        through nobody's fault is sent again up to ``lost_retries`` times (then it stands, its
        lost results counted by the caller). ``while_waiting`` runs once, while the host works.
        ``grace_s``: a reply that comes past the deadline but within this is used (``late``):
        the host was slowed, not stuck, and killing it would cost far more ticks than it lost."""
        message = {
            "op": "views",
            "tick": tick,
            **views,
            "run": run,
            "deadline_ms": deadline_s * WORKERS_SHARE * 1000,
            "complete": complete,
            "count_blocks": count_blocks,
        }
        owners = {name: host_agent(agent_of.get(name, ""), name) for name in run} if agent_of is not None else None
        retries = 0
        while True:
            began = time.perf_counter()
            waited = 0.0

            def waiting(work: Callable[[], None] | None = while_waiting if retries == 0 else None) -> None:
                nonlocal waited
                if work is not None:
                    started = time.perf_counter()
                    work()
                    waited = time.perf_counter() - started

            try:
                reply = self.host.request(message, deadline_s, waiting, grace_s)
            except (HostDeadlineExceeded, HostCrashed) as exc:
                return TickReply(MISSED, str(exc), lost_retries=retries, failure=exc)
            elapsed = time.perf_counter() - began - waited
            answer = self._decode(reply, views, owners)
            answer.lost_retries, answer.elapsed_s, answer.late = retries, elapsed, elapsed > deadline_s
            lost = answer.ok and any(r.get("lost") and not r.get("throttled") for r in answer.results.values())
            if not lost or retries >= lost_retries:
                return answer
            retries += 1

    @staticmethod
    def _decode(reply: dict[str, Any], views: Mapping[str, Any], owners: Mapping[str, str] | None) -> TickReply:
        try:
            if not reply.get("ok"):
                raise MalformedIntents(f"the host refused the tick: {reply.get('error')}")
            attachment = reply.get("attachment")
            intents = decode_intent_groups(
                reply.get("intent_groups"),
                attachment if isinstance(attachment, bytes) else None,
                reply.get("group_agents") if owners is not None else None,
                Carriers.of(views, owners) if owners is not None else None,
            )
            results = reply.get("results")
            if not isinstance(results, dict) or not all(isinstance(r, dict) for r in results.values()):
                raise MalformedIntents("results must be an object of objects")
            loads = reply.get("loads", {})
            if not isinstance(loads, dict):
                raise MalformedIntents("loads must be an object")
        except MalformedIntents as exc:
            return TickReply(REFUSED, f"unusable reply: {exc}")
        return TickReply(OK, "", intents, results, loads)
