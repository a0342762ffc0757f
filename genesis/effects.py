"""Effects of a mutation over its observation window, and the fitness verdict. Pure functions:
the MutationWorkflow calls them on the snapshots the engine reported."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class WorldSample(BaseModel):
    """What the engine reports to observing workflows at each snapshot."""

    tick: int
    run_id: str = ""  # ticks restart from 0 when the engine restarts
    entity_count: int
    avg_energy: float
    period_starvation: int = 0  # starvation deaths since the previous snapshot
    trait_stats: dict[str, dict[str, Any]] = Field(default_factory=dict)


class Effects(BaseModel):
    entity_count_delta: int
    avg_energy_delta: float
    death_starvation_delta: int
    window_ticks: int
    carriers_before: int
    carriers_after: int
    carrier_avg_energy: float | None
    non_carrier_avg_energy: float | None
    carrier_births: int
    carrier_deaths: int
    fitness_delta: float


def _carrier(sample: WorldSample, trait: str) -> dict[str, Any]:
    return sample.trait_stats.get(trait, {})


def compute_effects(trait: str, before: WorldSample, after: WorldSample) -> Effects:
    carriers_b, carriers_a = _carrier(before, trait), _carrier(after, trait)
    n_after = int(carriers_a.get("carriers", 0))
    carrier_energy = carriers_a.get("avg_energy") if n_after else None
    non_carriers = after.entity_count - n_after
    non_carrier_energy = None
    if non_carriers > 0 and carrier_energy is not None:
        total = after.avg_energy * after.entity_count
        non_carrier_energy = (total - carrier_energy * n_after) / non_carriers
    elif non_carriers > 0:
        non_carrier_energy = after.avg_energy

    def cumulative(stats: dict[str, Any], key: str) -> int:
        value = stats.get(key, 0)
        return int(sum(value.values()) if isinstance(value, dict) else value)

    # The verdict weighs world-level changes only. Carriers are newborns (only newborns gain new
    # traits) and start with less energy than adults, so carrier-vs-non-carrier figures are
    # reported for people to read but would bias every verdict against new traits.
    population_change = (after.entity_count - before.entity_count) / max(before.entity_count, 1)
    energy_change = (after.avg_energy - before.avg_energy) / max(before.avg_energy, 1.0)
    starvation_change = (after.period_starvation - before.period_starvation) / max(before.entity_count, 1)
    return Effects(
        entity_count_delta=after.entity_count - before.entity_count,
        avg_energy_delta=round(after.avg_energy - before.avg_energy, 3),
        death_starvation_delta=after.period_starvation - before.period_starvation,
        window_ticks=after.tick - before.tick,
        carriers_before=int(carriers_b.get("carriers", 0)),
        carriers_after=n_after,
        carrier_avg_energy=None if carrier_energy is None else round(carrier_energy, 3),
        non_carrier_avg_energy=None if non_carrier_energy is None else round(non_carrier_energy, 3),
        carrier_births=cumulative(carriers_a, "births") - cumulative(carriers_b, "births"),
        carrier_deaths=cumulative(carriers_a, "deaths") - cumulative(carriers_b, "deaths"),
        fitness_delta=round(0.5 * population_change + 0.3 * energy_change - 0.2 * starvation_change, 4),
    )


def verdict(effects: Effects, negative_threshold: float, positive_threshold: float = 0.02) -> str:
    if effects.fitness_delta <= negative_threshold:
        return "negative"
    if effects.fitness_delta >= positive_threshold:
        return "positive"
    return "neutral"
