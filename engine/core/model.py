"""What a world is made of: its parameters, its Molbots and resources, the all-time counters and
the report of one tick. Plain data; the rules that change it live in ``engine.core.world``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from genesis.world_config import EngineSettings

DEATH_CAUSES = ("starvation", "age", "collision")


@dataclass(frozen=True)
class WorldParams:
    width: float = 800.0
    height: float = 600.0
    initial_population: int = 40
    initial_resources: int = 60
    max_resources: int = 120
    resource_energy: float = 25.0
    resource_spawn_chance: float = 0.5  # chance per tick that one resource appears (below max)
    max_energy: float = 100.0
    initial_energy: float = 60.0
    initial_speed_min: float = 1.0
    initial_speed_max: float = 2.0
    wander_turn: float = 0.3  # max random turn (radians) per tick of instinctive wandering
    base_metabolism: float = 0.05  # energy per tick, times energy_consumption_rate
    move_cost: float = 0.02  # energy per distance unit moved
    max_age: int = 3000  # ticks
    max_age_jitter: float = 0.2  # each entity's max_age is max_age * (1 +- jitter)
    maturity_age: int = 300
    reproduction_threshold: float = 85.0
    reproduction_cost: float = 40.0  # paid by the parent
    birth_energy_fraction: float = 0.75  # the newborn starts with this part of the cost
    eat_radius: float = 6.0
    sense_radius: float = 80.0  # also the grid cell size
    collision_radius: float = 2.0
    collision_damage: float = 5.0  # per colliding pair per tick, to both
    hunger_fraction: float = 0.7  # instinct eats only below this fraction of max_energy
    min_population: int = 0  # if > 0, fresh entities are spawned to keep at least this many
    max_population: int = 1000  # births stop at this population
    max_traits_per_entity: int = 5
    max_intents_per_entity: int = 32  # the excess of an entity's intents in a tick is dropped
    trait_gain_chance: float = 0.25  # chance that a newborn gains one new available trait
    dna_mutation: float = 0.05  # standard deviation of the per-gene noise at birth
    temperature: float = 20.0  # environment knob reported in telemetry (no physics use yet)

    def __post_init__(self) -> None:
        for name in ("width", "height", "sense_radius"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")
        for f in fields(self):
            v = getattr(self, f.name)
            if type(v) is bool or type(v) not in (int, float) or not math.isfinite(v):
                raise ValueError(f"{f.name} must be a finite number")
            if v < 0:
                raise ValueError(f"{f.name} must be >= 0")
            if f.type == "int" and type(v) is not int:
                raise ValueError(f"{f.name} must be an int")
        if self.initial_speed_min > self.initial_speed_max:
            raise ValueError("initial_speed_min must be <= initial_speed_max")
        if not 0.0 <= self.max_age_jitter < 1.0:
            raise ValueError("max_age_jitter must be in [0, 1)")
        if self.max_age < 1:
            raise ValueError("max_age must be >= 1")
        if not 0.0 <= self.trait_gain_chance <= 1.0:
            raise ValueError("trait_gain_chance must be in [0, 1]")


def world_params(engine: EngineSettings) -> WorldParams:
    """The parameters of the world an engine with these settings starts (``GENESIS_ENGINE_*``)."""
    return WorldParams(
        width=float(engine.world_width),
        height=float(engine.world_height),
        initial_population=engine.initial_population,
        min_population=engine.min_population,
        max_population=engine.max_population,
        initial_resources=engine.initial_resources,
        max_resources=engine.max_resources,
        resource_spawn_chance=float(engine.resource_spawn_chance),
        trait_gain_chance=float(engine.trait_gain_chance),
    )


@dataclass(slots=True)
class Entity:
    id: int
    x: float
    y: float
    energy: float
    max_energy: float
    speed: float
    direction: float
    age: int
    max_age: int
    state: str = ""
    traits: tuple[str, ...] = ()
    energy_consumption_rate: float = 1.0
    generation: int = 0
    parent_id: int | None = None
    dna: tuple[float, ...] = ()


@dataclass(slots=True)
class Resource:
    id: int
    x: float
    y: float
    energy: float


@dataclass
class Counters:
    """Totals since the world began (they survive a snapshot); ``World.stats`` reports them."""

    deaths: dict[str, int] = field(default_factory=lambda: {cause: 0 for cause in DEATH_CAUSES})
    births: int = 0
    respawns: int = 0  # fresh entities spawned by the population floor
    collisions: int = 0  # colliding pairs
    rejected: dict[str, int] = field(default_factory=dict)  # rejected intents by reason
    trait_births: dict[str, int] = field(default_factory=dict)  # births by carriers of the trait
    trait_deaths: dict[str, dict[str, int]] = field(default_factory=dict)  # deaths of carriers, by cause
    trait_gains: dict[str, int] = field(default_factory=dict)  # newborns that gained the trait


@dataclass
class TickReport:
    tick: int  # the tick that was simulated (World.tick before it advanced)
    births: list[int] = field(default_factory=list)  # ids of newborns (parent via parent_id)
    deaths: list[tuple[int, str]] = field(default_factory=list)  # (entity_id, cause)
    rejected_intents: list[tuple[int, str]] = field(default_factory=list)  # (entity_id, reason)
    respawned: list[int] = field(default_factory=list)  # fresh entities from min_population
    gained: list[tuple[int, str]] = field(default_factory=list)  # (newborn id, new trait)
    round: Any = None  # a settled round's outcomes (engine.core.round_rules.Settled), when one settled
