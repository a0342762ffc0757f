"""A trait's fitness verdict needs enough carriers: with too few Molbots carrying it during its
window, the world's change is not its doing and the verdict is ``inconclusive``, with a reason."""

from __future__ import annotations

from genesis.config import Settings
from genesis.effects import INCONCLUSIVE, CarrierMinimum, WorldSample, compute_effects, trait_verdict

MINIMUM = CarrierMinimum(count=5, share=0.02)


def window(
    population: tuple[int, int],
    energy: tuple[float, float],
    carriers: tuple[int, int],
    births: int = 0,
    gained: int = 0,
):
    def report(tick: int, count: int, avg: float, carried: int, born: int, gains: int) -> WorldSample:
        stats = {"carriers": carried, "avg_energy": avg, "births": born, "deaths": {}, "gained": gains}
        return WorldSample(tick=tick, entity_count=count, avg_energy=avg, trait_stats={"t": stats})

    before = report(300, population[0], energy[0], carriers[0], 4, 7)
    after = report(600, population[1], energy[1], carriers[1], 4 + births, 7 + gained)
    return compute_effects("t", before, after), population[0]


def test_no_carriers_is_inconclusive_whatever_the_world_did():
    for change in ((180, 200), (180, 90), (180, 180)):  # the world grew, collapsed, stayed
        effects, population = window(change, (50.0, 50.0), (0, 0))
        judged, fitness = trait_verdict(effects, population, -0.10, MINIMUM)
        assert fitness == INCONCLUSIVE
        assert judged.carriers_seen == 0 and judged.carriers_needed == 5
        assert judged.verdict_reason.startswith("too few carriers to judge: 0 Molbots carried it during the 300-tick")
        assert "a verdict needs at least 5" in judged.verdict_reason


def test_one_carrier_among_180_is_not_a_positive_verdict():
    effects, population = window((180, 200), (50.0, 55.0), (1, 1))
    assert effects.fitness_delta >= 0.02  # the world did well, but not because of this trait
    _, fitness = trait_verdict(effects, population, -0.10, MINIMUM)
    assert fitness == INCONCLUSIVE


def test_enough_carriers_judge_as_before():
    cases = {
        "positive": ((100, 112), (50.0, 58.0)),
        "neutral": ((100, 100), (50.0, 50.0)),
        "negative": ((100, 60), (50.0, 30.0)),
    }
    for expected, (population, energy) in cases.items():
        effects, start = window(population, energy, (10, 12))
        judged, fitness = trait_verdict(effects, start, -0.10, MINIMUM)
        assert fitness == expected, (expected, judged)
        assert judged.carriers_seen == 10 and f"{judged.fitness_delta:+.3f}" in judged.verdict_reason


def test_carriers_born_or_gaining_it_during_the_window_count():
    # None at either end: three were born to carriers and three gained it, then all six died.
    effects, population = window((100, 112), (50.0, 58.0), (0, 0), births=3, gained=3)
    judged, fitness = trait_verdict(effects, population, -0.10, MINIMUM)
    assert judged.carriers_seen == 6 and fitness == "positive"


def test_a_larger_world_needs_more_carriers():
    assert [MINIMUM.needed(population) for population in (0, 100, 250, 1000)] == [5, 5, 5, 20]
    effects, population = window((1000, 1100), (50.0, 55.0), (12, 12))
    judged, fitness = trait_verdict(effects, population, -0.10, MINIMUM)
    assert fitness == INCONCLUSIVE and judged.carriers_needed == 20


def test_the_minimum_is_a_documented_setting():
    observation = Settings().observation
    assert (observation.min_carriers, observation.min_carrier_share) == (MINIMUM.count, MINIMUM.share)
    fields = type(observation).model_fields
    assert "inconclusive" in (fields["min_carriers"].description or "")
