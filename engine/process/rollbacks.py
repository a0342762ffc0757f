"""Rollbacks of the world to a kept snapshot, asked for from outside the engine (an operator's
``POST /v1/world/rollback``, or the mutation pipeline where a bad trait did harm).

Requests queue in Redis (``world:rollback:requests``); about once a second this follower hands
them to the engine, which applies each between two ticks as a new epoch of its journal
(``Engine.apply_rollback``, ``WorldJournal.rollback``), and writes each outcome under
``world:rollback:{request_id}``: ``applied`` (epoch, from, to, the rollback record's sequence
number) or ``refused`` with the reason. It also keeps ``engine:snapshots`` — the snapshots the
engine keeps, which the API lists — current."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Any

import redis.asyncio as aioredis

from genesis import redis_keys as keys

if TYPE_CHECKING:
    from .loop import Engine

log = logging.getLogger("genesis.engine.rollbacks")
POLL_S = 1.0
MAX_PER_POLL = 10


def snapshot_list(engine: Engine) -> list[dict[str, Any]]:
    journal = engine.journal
    if journal is None:
        return []
    pinned: dict[str, list[str]] = {}
    for mutation_id, name in journal.pins.items():
        pinned.setdefault(name, []).append(mutation_id)
    return [
        {
            "name": m.name,
            "epoch": m.epoch,
            "tick": m.tick,
            "journal_seq": m.journal_seq,
            "state_hash": m.state_hash.hex(),
            "chain_head": m.chain_head.hex(),
            "world_version": m.world_version,
            "traits": m.traits,
            "created_at": round(m.created_at, 3),
            "size": m.size,
            "pinned_for": sorted(pinned.get(m.name, [])),
        }
        for m in journal.store.kept()
    ]


class RollbackFollower:
    def __init__(self, engine: Engine, redis: aioredis.Redis) -> None:
        self.engine = engine
        self._redis = redis
        self._snapshots_seen: tuple | None = None

    async def poll(self) -> None:
        for _ in range(MAX_PER_POLL):
            raw = await self._redis.lpop(keys.WORLD_ROLLBACK_REQUESTS)
            if raw is None:
                break
            try:
                request = json.loads(raw)  # type: ignore[arg-type]
                if not isinstance(request, dict) or not isinstance(request.get("request_id"), str):
                    raise ValueError("not a rollback request")
            except ValueError as exc:
                log.warning("dropped a malformed rollback request: %s", exc)
                continue
            self.engine.request_rollback(request)
        for request_id, outcome in self.engine.take_rollback_outcomes():
            await self._redis.set(
                keys.world_rollback(request_id),
                json.dumps({**outcome, "updated_at": round(time.time(), 3)}),
                ex=keys.WORLD_ROLLBACK_TTL_S,
            )
        journal = self.engine.journal
        if journal is not None:
            seen = (journal.snapshots_saved, tuple(sorted(journal.pins.items())))
            if seen != self._snapshots_seen:  # a snapshot saved or pruned, a rollback point pinned or let go
                self._snapshots_seen = seen
                await self._redis.set(keys.ENGINE_SNAPSHOTS, json.dumps(snapshot_list(self.engine)))

    async def follow(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.poll()
            except Exception as exc:  # Redis away: requests wait in their list
                log.debug("rollback requests: %s", exc)
            try:
                await asyncio.wait_for(stop.wait(), POLL_S)
            except TimeoutError:
                pass
