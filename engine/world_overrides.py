"""World parameters changed by evolution cycles (``adjust_params``, genesis/world_params.py).

About once a second the engine reads ``meta:world:params`` and, when the record changed, puts the
allowed overrides on top of its configured WorldParams and hands the result to the engine, which
applies it at the start of its next tick and journals it with that tick's inputs. The workflow
named in the record observes the change: it gets each snapshot like a MutationWorkflow does."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from genesis import world_params
from genesis.redis_keys import WORLD_PARAMS_OVERRIDES

from .world import WorldParams

log = logging.getLogger("genesis.engine.params")
POLL_S = 1.0


class ParamsFollower:
    def __init__(self, base: WorldParams, apply: Callable[[WorldParams], None], redis: aioredis.Redis):
        self.base = base
        self._apply = apply
        self._redis = redis
        self._raw: bytes | str | None = None
        self.overrides: dict[str, float] = {}
        self.observer_workflow: str | None = None

    async def refresh(self) -> bool:
        """Apply the record if it changed; True when the world's parameters changed."""
        raw = await self._redis.get(WORLD_PARAMS_OVERRIDES)
        if raw == self._raw:
            return False
        self._raw = raw
        record = world_params.read_record(raw)
        overrides = world_params.clean_overrides(record.get("overrides"))
        self.observer_workflow = record.get("workflow_id") or None
        if overrides == self.overrides:
            return False
        fields: dict[str, Any] = overrides  # each field's type: clean_overrides makes integer parameters ints
        try:
            params = dataclasses.replace(self.base, **fields)
        except (TypeError, ValueError) as exc:  # a value the world refuses: keep what runs
            log.warning("world parameter overrides %s refused: %s", overrides, exc)
            return False
        self._apply(params)
        log.info("world parameters: %s (base otherwise)", overrides or "none overridden")
        self.overrides = overrides
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
