"""World parameters changed by governance and by evolution cycles (genesis/world_params.py).

About once a second the engine reads the governed parameters of the manifest in force (when it is
given a way to: ``governed``) and ``meta:world:params`` (an evolution cycle's ``adjust_params``)
and, when either changed, puts them on top of its configured WorldParams — the configuration, then
the manifest, then the cycle's overrides — and hands the result to the engine, which applies it at
the start of its next tick and journals it with that tick's inputs. The workflow named in the
record observes the change: it gets each snapshot like a MutationWorkflow does."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis

from engine.core.world import WorldParams
from genesis import world_params
from genesis.redis_keys import WORLD_PARAMS_OVERRIDES

log = logging.getLogger("genesis.engine.params")
POLL_S = 1.0


class ParamsFollower:
    def __init__(
        self,
        base: WorldParams,
        apply: Callable[[WorldParams], None],
        redis: aioredis.Redis,
        governed: Callable[[], Awaitable[dict[str, Any]]] | None = None,
    ):
        self.base = base
        self._apply = apply
        self._redis = redis
        self._governed = governed
        self._raw: bytes | str | None = None
        self.overrides: dict[str, float] = {}  # the evolution cycle's
        self.governed: dict[str, float] = {}  # the manifest's
        self.observer_workflow: str | None = None

    async def refresh(self) -> bool:
        """Apply the manifest's and the record's parameters if they changed; True when the
        world's parameters changed."""
        governed = self.governed
        if self._governed is not None:
            try:
                governed = world_params.clean_overrides(await self._governed())
            except Exception as exc:  # Postgres away: the manifest's parameters stay as they were
                log.debug("could not read the manifest's parameters: %s", exc)
        raw = await self._redis.get(WORLD_PARAMS_OVERRIDES)
        overrides = self.overrides
        if raw != self._raw:
            self._raw = raw
            record = world_params.read_record(raw)
            overrides = world_params.clean_overrides(record.get("overrides"))
            self.observer_workflow = record.get("workflow_id") or None
        if overrides == self.overrides and governed == self.governed:
            return False
        fields: dict[str, Any] = {**governed, **overrides}  # clean_overrides makes integer parameters ints
        try:
            params = dataclasses.replace(self.base, **fields)
        except (TypeError, ValueError) as exc:  # a value the world refuses: keep what runs
            log.warning("world parameters %s refused: %s", fields, exc)
            return False
        self._apply(params)
        log.info("world parameters: manifest %s, cycle %s (configured otherwise)", governed or "-", overrides or "-")
        self.overrides, self.governed = overrides, governed
        return True

    async def follow(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.refresh()
            except Exception as exc:  # Redis away: the world keeps the parameters it has
                log.debug("could not read %s: %s", WORLD_PARAMS_OVERRIDES, exc)
            try:
                await asyncio.wait_for(stop.wait(), POLL_S)
            except TimeoutError:
                pass
