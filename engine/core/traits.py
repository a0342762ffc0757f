"""The engine's view of trait execution: a :class:`TraitRunner` turns the entity views of a tick
into intents. The live implementation (a trait-host container fed once per tick) lives elsewhere;
:class:`NoTraits` is the runner of a world without live traits."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from genesis.trait_wire import IntentColumns

__all__ = ["BatchTraitRunner", "Intents", "NoTraits", "TraitRunner", "ViewsTraitRunner"]

# What a runner returns for one tick and ``World.step`` applies: ``{entity_id: [intent, ...]}``
# merged in trait-name order, or the trait host's decoded columns.
Intents = Mapping[int, Sequence[Sequence[Any]]] | IntentColumns


class _Runner(Protocol):
    def active_traits(self) -> list[str]:
        """Traits loaded and not quarantined (cheap: called every tick)."""
        ...

    async def refresh(self) -> None:
        """Pick up registry changes; called about once a second, between ticks."""
        ...

    async def close(self) -> None: ...


class BatchTraitRunner(_Runner, Protocol):
    async def run_tick(self, tick: int, batches: dict[str, list[dict]]) -> Intents:
        """Run every trait of ``batches`` (trait name -> carrier views, from
        ``World.trait_batches``) once for ``tick``; return the intents per entity id. Must
        return within the tick budget; must not raise for a trait's fault (quarantine it
        instead)."""
        ...


@runtime_checkable
class ViewsTraitRunner(_Runner, Protocol):
    async def run_tick_views(self, tick: int, views: dict, while_waiting: Callable[[], None] | None = None) -> Intents:
        """The compact form of ``run_tick``: ``World.trait_views(active_traits, raw=True)``
        (each carrier's view once, the trait host's "views" request) instead of per-trait
        batches. ``while_waiting``: the last tick's telemetry and ``World.prepare_step``, to be
        called once the request is out (only if it is sent)."""
        ...


# The engine uses the compact form when the runner has it.
TraitRunner = BatchTraitRunner | ViewsTraitRunner


class NoTraits:
    """No live traits: the world runs on instinct alone."""

    async def run_tick(self, tick: int, batches: dict[str, list[dict]]) -> Intents:
        return {}

    def active_traits(self) -> list[str]:
        return []

    async def refresh(self) -> None:
        return None

    async def close(self) -> None:
        return None
