"""The world simulation: a pure, deterministic core (``engine.world`` and the modules it is made
of: ``model``, ``intents``, ``physics``, ``spawning``, ``views``, ``world_state``, ``sensing``,
``spatial``) and its process (``python -m engine``: ``engine.loop``, ``engine.telemetry``,
``engine.traits``)."""

from .world import DEATH_CAUSES, REJECT_REASONS, Entity, Resource, TickReport, World, WorldParams

__all__ = ["DEATH_CAUSES", "REJECT_REASONS", "Entity", "Resource", "TickReport", "World", "WorldParams"]
