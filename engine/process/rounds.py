"""The engine's rounds of agents' actions: ``accepting -> executing -> settled``.

A round accepts submissions for the manifest's ``rounds.ticks`` ticks (the API admits them into
Postgres, rounds/records.py). When the world reaches its closing tick the keeper closes it (no
submission can be accepted after that) and opens the next, then settles the closed one while the
next accepts:

1. members of its submitters that have no body get one (a journaled tick input);
2. each submission's code runs once in the **action host** — a trait-host container of its own,
   so that agents' code never holds up the live traits' ticks — in a fresh process per
   submission, against a proxy of its member and what the member sees; timeouts, memory, syntax
   errors and a missing entry point come back as structured errors;
3. the recorded actions of every submission that ran go to the engine, which applies them at its
   next tick (``engine.core.round_rules``, journaled with that tick: replay runs no agent code);
4. every submission's fate — applied with each action's outcome, or rejected with its reason —
   is recorded, and the round gets a signed receipt (``round.settled``) listing them all.

A round that an engine left unsettled (it stopped) is settled at the next start with every
accepted submission rejected, saying so.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from audit import receipts
from engine.core.round_rules import RoundInputs, Settled, Submission, member_state
from genesis import signing
from genesis.config import Settings
from governance.records import manifests
from rounds import records
from sandbox.container import HostCrashed, HostDeadlineExceeded, IsolationLimits, TraitHostContainer, hello_message

from .loop import Engine

log = logging.getLogger("genesis.engine.rounds")

POLL_S = 0.05
STOPPED = "the engine stopped before the round settled; submit again"


class ActionHost:
    """A trait-host container that runs agents' round actions (started when first needed, again
    after it failed). Blocking: called through ``asyncio.to_thread``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._host: TraitHostContainer | None = None

    def run(self, items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        rounds = self.settings.rounds
        if self._host is None:
            import docker

            from sandbox import image

            client = docker.from_env()
            host = TraitHostContainer(
                client,
                image.ensure(client),
                IsolationLimits.for_engine(self.settings),
                f"actions-{id(self):x}",
                private_socket=self.settings.engine.trait_host_socket,
            )
            try:
                host.say_hello(hello_message(self.settings, rounds.action_deadline_ms / 1000.0), 20.0)
            except BaseException:
                host.close()
                raise
            self._host = host
        request = {
            "op": "act",
            "items": items,
            "cpu_ms": rounds.action_cpu_ms,
            "deadline_ms": rounds.action_deadline_ms,
            "parallel": rounds.action_parallel,
        }
        try:
            reply = self._host.request(request, rounds.action_deadline_ms / 1000.0 + 10.0)
        except (HostCrashed, HostDeadlineExceeded):
            self.close()
            raise
        if not reply.get("ok") or not isinstance(reply.get("results"), dict):
            raise HostCrashed(f"the action host refused the round: {str(reply.get('error'))[:200]}")
        return reply["results"]

    def close(self) -> None:
        if self._host is not None:
            self._host.close()
            self._host = None


class RoundKeeper:
    def __init__(self, settings: Settings, engine: Engine, database: AsyncEngine, keyring: signing.Keyring) -> None:
        self.settings = settings
        self.engine = engine
        self.database = database
        self.sessions = async_sessionmaker(database, expire_on_commit=False)
        self.signer = receipts.Signer(self.sessions, keyring)
        self.host = ActionHost(settings)

    # -- the loop ------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        settling: asyncio.Task | None = None
        try:
            while not stop.is_set():
                try:
                    await self.settle_leftovers()
                    current = await self.open(self.engine.world.tick)
                    break
                except Exception as exc:  # Postgres away: try again
                    log.warning("rounds cannot start yet: %s", exc)
                    await _sleep(stop, 2.0)
            else:
                return
            while not stop.is_set():
                round_id, closes_tick = current
                if not await self._wait_for_tick(closes_tick, stop):
                    return  # left accepting: settled (rejected) at the next start
                try:
                    async with self.database.begin() as conn:
                        await records.close_round(conn, round_id)
                        # the next round starts where this one closed (or, after a rollback took
                        # the world back, where the world is now), in the same transaction: no
                        # moment without an accepting round
                        current = await self._open_in(conn, min(closes_tick, self.engine.world.tick))
                except Exception as exc:
                    log.warning("round %d could not be closed: %s; trying again", round_id, exc)
                    await _sleep(stop, 1.0)
                    continue
                if settling is not None:
                    await settling
                settling = asyncio.create_task(self.settle(round_id))
        finally:
            if settling is not None:
                await settling
            await asyncio.to_thread(self.host.close)

    def _epoch(self) -> int:
        return self.engine.journal.epoch if self.engine.journal is not None else 0

    async def _wait_for_tick(self, tick: int, stop: asyncio.Event) -> bool:
        """Until the world reaches ``tick`` (or a rollback starts a new epoch: the round closes
        then, instead of waiting for the world to live those ticks again); False when stopping."""
        epoch = self._epoch()
        while self.engine.world.tick < tick and self._epoch() == epoch:
            if stop.is_set():
                return False
            await asyncio.sleep(POLL_S)
        return True

    async def open(self, opens_tick: int) -> tuple[int, int]:
        async with self.database.begin() as conn:
            return await self._open_in(conn, opens_tick)

    async def _open_in(self, conn, opens_tick: int) -> tuple[int, int]:
        rules = (await manifests.current(conn, self.settings)).manifest
        closes = opens_tick + rules.rounds.ticks
        left_s = max(0, closes - self.engine.world.tick) / self.settings.engine.tick_rate
        deadline = datetime.now(UTC) + timedelta(seconds=left_s)
        round_id = await records.open_round(conn, self._epoch(), opens_tick, closes, deadline)
        log.debug("round %d accepting until tick %d", round_id, closes)
        return round_id, closes

    # -- settling ------------------------------------------------------------------------------

    async def settle(self, round_id: int) -> None:
        try:
            await self._settle(round_id)
        except asyncio.CancelledError:  # the engine stopped first: the next start settles it
            log.warning("round %d is left unsettled: the engine stopped", round_id)
        except Exception:
            log.exception("round %d could not be settled; its submissions are rejected", round_id)
            try:
                await self._reject_all(round_id, "the round could not be settled; submit again")
            except Exception as exc:
                log.warning("round %d stays unsettled until the next start: %s", round_id, exc)

    async def _settle(self, round_id: int) -> None:
        async with self.database.connect() as conn:
            subs = await records.accepted(conn, round_id)
            mail = await records.inbox(conn, round_id) if subs else {}
        if not subs:
            await self._record(round_id, None, {}, {"submissions": 0})
            return
        world = self.engine.world
        embody = sorted({s.member_id for s in subs if world.members.get(s.member_id) not in world.entities})
        if embody:  # bodies first, so that every submission sees its member
            await self.engine.settle_round(RoundInputs(round_id, embody=embody))
        world = self.engine.world
        items, states = [], {}
        for s in subs:
            state = member_state(world, s.member_id, round_id, inbox=mail.get(s.member_id))
            states[s.id] = state
            if state is not None:
                items.append({"id": s.id, "agent": s.agent_id, "code": s.code, "state": state})
        started = time.monotonic()
        ran = await asyncio.to_thread(self.host.run, fair(items)) if items else {}
        log.info("round %d: %d submissions ran in %.2f s", round_id, len(items), time.monotonic() - started)
        results: dict[str, dict[str, Any]] = {}
        submissions = []
        for s in subs:
            outcome = ran.get(s.id)
            if states[s.id] is None:
                results[s.id] = _rejected("no_body", "the member has no body")
            elif not isinstance(outcome, dict):
                results[s.id] = _rejected("killed", "the action host gave no result for it")
            elif not outcome.get("ok"):
                results[s.id] = _rejected(str(outcome.get("error"))[:32], str(outcome.get("detail", ""))[:500])
            else:
                submissions.append(Submission(s.id, s.agent_id, s.member_id, outcome["actions"]))
        tick, settled = await self.engine.settle_round(RoundInputs(round_id, submissions=submissions))
        for sub in submissions:
            results[sub.id] = {
                "status": records.APPLIED,
                "error": None,
                "detail": None,
                "outcomes": settled.outcomes.get(sub.id, []),
            }
        summary = {
            "submissions": len(subs),
            "applied": len(submissions),
            "rejected": len(subs) - len(submissions),
            "embodied": embody,
        }
        await self._record(round_id, tick, results, summary, subs, settled)

    async def _record(
        self,
        round_id: int,
        tick: int | None,
        results: dict[str, dict[str, Any]],
        summary: dict[str, Any],
        subs: list | None = None,
        settled: Settled | None = None,
    ) -> None:
        keyring = await self.signer.ready()  # its public keys published before its first receipt
        async with self.sessions() as session, session.begin():
            receipt = None
            if subs:
                listed = [
                    {
                        "id": s.id,
                        "agent_id": s.agent_id,
                        "member_id": s.member_id,
                        "hash": s.body_hash,
                        "status": results[s.id]["status"],
                        **(
                            {"actions": results[s.id]["outcomes"]}
                            if results[s.id]["status"] == records.APPLIED
                            else {"error": results[s.id]["error"], "reason": results[s.id]["detail"]}
                        ),
                    }
                    for s in subs
                ]
                body = {"round_id": round_id, "settled_tick": tick, "summary": summary, "submissions": listed}
                receipt = await receipts.issue(
                    session, keyring, "round.settled", f"round:{round_id}", {"round_id": round_id}, body
                )
            conn = await session.connection()
            await records.settle_round(
                conn, round_id, tick, results, summary, receipt["id"] if receipt is not None else None
            )

    async def _reject_all(self, round_id: int, why: str) -> None:
        async with self.database.begin() as conn:
            await records.close_round(conn, round_id)
            subs = await records.accepted(conn, round_id)
        results = {s.id: _rejected("not_settled", why) for s in subs}
        await self._record(round_id, None, results, {"submissions": len(subs), "applied": 0}, subs)

    async def settle_leftovers(self) -> None:
        async with self.database.connect() as conn:
            left = await records.unsettled(conn)
        for row in left:
            log.warning("round %d was left %s by an engine that stopped; settling it", row.round_id, row.state)
            await self._reject_all(row.round_id, STOPPED)


def fair(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The order submissions run in: each agent's first, then each agent's second, ...; so an
    agent whose code uses its whole budget delays nobody's first submission (they are applied in
    agent order whatever order they ran in)."""
    by_agent: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        by_agent.setdefault(item["agent"], []).append(item)
    queues = [by_agent[a] for a in sorted(by_agent)]
    out: list[dict[str, Any]] = []
    for i in range(max((len(q) for q in queues), default=0)):
        out.extend(q[i] for q in queues if i < len(q))
    return out


def _rejected(error: str, detail: str) -> dict[str, Any]:
    return {"status": records.REJECTED, "error": error, "detail": detail, "outcomes": None}


async def _sleep(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        pass
