"""Effects of a mutation over its observation window, and the fitness verdict. Pure functions:
the MutationWorkflow calls them on the snapshots the engine reported."""

from __future__ import annotations

import math
from dataclasses import dataclass
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
    # Molbots that carried the trait at some time in the window: its carriers at the start, the
    # newborns of carriers (they inherit it) and the newborns that gained it.
    carriers_seen: int = 0
    # Set with a trait's verdict (trait_verdict): the carriers a verdict needed, and why the
    # verdict is what it is.
    carriers_needed: int | None = None
    verdict_reason: str | None = None


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
        carriers_seen=int(carriers_b.get("carriers", 0))
        + max(0, cumulative(carriers_a, "births") - cumulative(carriers_b, "births"))
        + max(0, cumulative(carriers_a, "gained") - cumulative(carriers_b, "gained")),
    )


POSITIVE_THRESHOLD = 0.02
INCONCLUSIVE = "inconclusive"


def verdict(effects: Effects, negative_threshold: float, positive_threshold: float = POSITIVE_THRESHOLD) -> str:
    """The verdict on the world's change alone (a world-parameter change is judged by it)."""
    if effects.fitness_delta <= negative_threshold:
        return "negative"
    if effects.fitness_delta >= positive_threshold:
        return "positive"
    return "neutral"


@dataclass(frozen=True)
class CarrierMinimum:
    """How many Molbots must carry a trait during its window for a verdict: ``count``, and at
    least ``share`` of the population at the window's start."""

    count: int
    share: float

    def needed(self, population: int) -> int:
        return max(self.count, math.ceil(self.share * max(population, 0)))


def trait_verdict(
    effects: Effects, population: int, negative_threshold: float, minimum: CarrierMinimum
) -> tuple[Effects, str]:
    """A trait's verdict: the world's change decides it, but only when enough Molbots carried the
    trait for that change to be its doing. With fewer it is ``inconclusive`` (the trait is kept:
    nothing shows it did harm, nor good). Returns the effects with the carriers needed and the
    reason, and the verdict. ``population``: the world's at the window's start."""
    needed = minimum.needed(population)
    seen = effects.carriers_seen
    carried = f"{seen} Molbot{'' if seen == 1 else 's'} carried it during the {effects.window_ticks}-tick window"
    if seen < needed:
        fitness = INCONCLUSIVE
        reason = (
            f"too few carriers to judge: {carried}, a verdict needs at least {needed} "
            f"(the world's fitness change of {effects.fitness_delta:+.3f} is not its doing)"
        )
    else:
        fitness = verdict(effects, negative_threshold)
        bound = {
            "positive": f"at or above +{POSITIVE_THRESHOLD:.3f}",
            "negative": f"at or below the rollback threshold {negative_threshold:+.3f}",
            "neutral": f"between the rollback threshold {negative_threshold:+.3f} and +{POSITIVE_THRESHOLD:.3f}",
        }[fitness]
        reason = f"the world's fitness change {effects.fitness_delta:+.3f} is {bound}; {carried}"
    return effects.model_copy(update={"carriers_needed": needed, "verdict_reason": reason}), fitness
