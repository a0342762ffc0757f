"""The world simulation: a pure, deterministic core (``engine.world``) and, later, its process."""

from .world import DEATH_CAUSES, REJECT_REASONS, Entity, Resource, TickReport, World, WorldParams

__all__ = ["DEATH_CAUSES", "REJECT_REASONS", "Entity", "Resource", "TickReport", "World", "WorldParams"]
