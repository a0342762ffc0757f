"""Entity API v1: what a trait may read, write and call on ``entity``.

Defined once here and used by the gatekeeper (attribute whitelist), the world core (which
checks and applies intents), the trait host (which builds the entity proxy from
``as_wire()``) and ``GET /api/agents/context/sandbox-api``.

Bump ``SANDBOX_RULES_VERSION`` in ``genesis.rules`` whenever anything here changes.
"""

from __future__ import annotations

import math
from typing import Any

API_VERSION = "1"

# World-wide bounds that intents are checked against.
MAX_SPEED = 4.0
MIN_CONSUMPTION_RATE = 0.5
MAX_CONSUMPTION_RATE = 1.5
MAX_STATE_LENGTH = 32

# name -> (type name, description). Every readable attribute is plain data in the entity view.
READABLE_ATTRS: dict[str, tuple[str, str]] = {
    "id": ("int", "unique entity id"),
    "x": ("float", "position, 0 <= x < world_width"),
    "y": ("float", "position, 0 <= y < world_height"),
    "energy": ("float", "current energy; gained only by eating"),
    "max_energy": ("float", "energy cap"),
    "speed": ("float", f"distance per tick, 0..{MAX_SPEED}"),
    "direction": ("float", "heading in radians, -pi..pi"),
    "age": ("int", "ticks lived"),
    "max_age": ("int", "age at which the entity dies"),
    "state": ("str", f"free-form label, at most {MAX_STATE_LENGTH} characters"),
    "traits": ("list[str]", "names of the traits this entity carries"),
    "energy_consumption_rate": (
        "float",
        f"metabolism multiplier, {MIN_CONSUMPTION_RATE}..{MAX_CONSUMPTION_RATE}; it also scales the speed cap",
    ),
    "generation": ("int", "0 for the first population, parent's + 1 for newborns"),
    "neighbors": ("int", "other entities within sensing range"),
    "world_width": ("float", "width of the world"),
    "world_height": ("float", "height of the world"),
}

# name -> (type, low, high). Numeric writes are clamped to [low, high]; a value of the wrong
# type (or NaN/inf) is rejected. ``direction`` wraps into -pi..pi.
WRITABLE_ATTRS: dict[str, tuple[str, float | None, float | None]] = {
    "speed": ("float", 0.0, MAX_SPEED),
    "direction": ("float", -math.pi, math.pi),
    "energy_consumption_rate": ("float", MIN_CONSUMPTION_RATE, MAX_CONSUMPTION_RATE),
    "state": ("str", None, None),
}

# name -> (signature, description). Methods are synchronous: never ``await`` them.
METHODS: dict[str, tuple[str, str]] = {
    "move": ("move(dx: float, dy: float) -> None", "move this tick along (dx, dy) at the current speed"),
    "move_towards": ("move_towards(x: float, y: float) -> None", "move this tick towards a point at the current speed"),
    "eat": (
        "eat() -> None",
        "eat the nearest resource within reach this tick (entities also eat by instinct when hungry)",
    ),
    "nearest_resource": (
        "nearest_resource() -> tuple[float, float, float] | None",
        "(dx, dy, distance) to the nearest sensed resource, or None",
    ),
}

# Intents are what the trait host sends back: plain lists, checked by the world.
INTENT_KINDS = ("set", "move", "move_towards", "eat")


def allowed_entity_names() -> frozenset[str]:
    """Every ``entity.<name>`` a trait may mention (readable attributes and methods)."""
    return frozenset(READABLE_ATTRS) | frozenset(METHODS)


def as_wire() -> dict[str, Any]:
    """The API in the plain form the trait host receives at start-up."""
    return {
        "api_version": API_VERSION,
        "readable": sorted(READABLE_ATTRS),
        "writable": {
            name: {"type": kind, "min": low, "max": high} for name, (kind, low, high) in WRITABLE_ATTRS.items()
        },
        "methods": sorted(METHODS),
        "max_state_length": MAX_STATE_LENGTH,
    }
