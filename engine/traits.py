"""The engine's view of trait execution: a :class:`TraitRunner` turns per-trait entity views into
intents. The live implementation (a trait-host container fed once per tick) lives elsewhere;
:class:`NoTraits` is the runner of a world without live traits."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["NoTraits", "TraitRunner"]


@runtime_checkable
class TraitRunner(Protocol):
    async def run_tick(self, tick: int, batches: dict[str, list[dict]]) -> dict[int, list[list]]:
        """Run every trait of ``batches`` (trait name -> carrier views, from
        ``World.trait_batches``) once for ``tick``; return the intents per entity id, merged in
        trait-name order. Must return within the tick budget; must not raise for a trait's
        fault (quarantine it instead)."""
        ...

    # Optional: ``async def run_tick_views(tick, views, while_waiting=None) -> intents`` taking
    # ``World.trait_views(active_traits, raw=True)`` (each carrier's view once, the trait host's "views"
    # request) instead of per-trait batches; the engine uses it when the runner has it, with
    # ``while_waiting``: the last tick's telemetry and ``World.prepare_step``, to be called once
    # the request is out (only if it is sent).

    def active_traits(self) -> list[str]:
        """Traits loaded and not quarantined (cheap: called every tick)."""
        ...

    async def refresh(self) -> None:
        """Pick up registry changes; called about once a second, between ticks."""
        ...

    async def close(self) -> None: ...


class NoTraits:
    """No live traits: the world runs on instinct alone."""

    async def run_tick(self, tick: int, batches: dict[str, list[dict]]) -> dict[int, list[list]]:
        return {}

    def active_traits(self) -> list[str]:
        return []

    async def refresh(self) -> None:
        return None

    async def close(self) -> None:
        return None
