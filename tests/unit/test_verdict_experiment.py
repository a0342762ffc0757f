"""The verdict's decision from its replicates (genesis/verdicts.py): the interval against the
margin, the world's guard, the budget, and a report hash that depends on nothing but its inputs."""

from __future__ import annotations

import pytest
from scipy import stats

from genesis import verdicts
from genesis.verdicts import (
    CopyOutcome,
    ExperimentPlan,
    ExperimentSettings,
    GroupOutcome,
    ReplicateOutcome,
    Tally,
    decide,
    report,
)

SETTINGS = ExperimentSettings(min_replicates=4, batch=2, max_replicates=8, margin=0.05)


def outcome(index: int, carriers: float, others: float = 0.0, population: float = 0.0) -> ReplicateOutcome:
    """A replicate whose carriers' fitness changed by ``carriers`` (relative), the others' by
    ``others`` and the mean population by ``population``."""

    def group(change: float) -> GroupOutcome:
        return GroupOutcome(count=50, control=Tally(fitness=1000.0), treated=Tally(fitness=1000.0 * (1 + change)))

    return ReplicateOutcome(
        index=index,
        seed=index,
        ticks=600,
        units=group(carriers),
        others=group(others),
        control=CopyOutcome(population=100, population_mean=100.0, deaths={}, births=0),
        treated=CopyOutcome(population=100, population_mean=100.0 * (1 + population), deaths={}, births=0),
    )


def test_the_t_table_is_students():
    for df in range(1, len(verdicts.T_975) + 1):
        assert verdicts.t_975(df) == pytest.approx(stats.t.ppf(0.975, df), abs=1e-4)
    assert verdicts.t_975(1000) == pytest.approx(stats.norm.ppf(0.975), abs=1e-4)
    with pytest.raises(ValueError):
        verdicts.t_975(0)


def test_an_interval_below_the_margin_is_negative_and_says_by_how_much():
    verdict, reason, estimates = decide(SETTINGS, [outcome(i, -0.8 + 0.01 * i) for i in range(4)])
    assert verdict == "negative"
    assert estimates["fitness"].high < -0.05
    assert reason.startswith("its carriers' fitness changed by -78.5% (95 % interval")


def test_an_interval_above_the_margin_is_positive_unless_the_world_pays_for_it():
    helpful = [outcome(i, 0.3 + 0.01 * i, others=-0.3) for i in range(4)]
    assert decide(SETTINGS, helpful)[0] == "positive"  # the others lose food to it: competition, not harm
    crowding = [outcome(i, 0.3 + 0.01 * i, population=-0.2 + 0.01 * i) for i in range(4)]
    verdict, reason, _ = decide(SETTINGS, crowding)
    assert verdict == "negative" and "it harms the world" in reason


def test_an_interval_inside_the_margin_is_neutral():
    assert decide(SETTINGS, [outcome(i, 0.0) for i in range(4)])[0] == "neutral"
    assert decide(SETTINGS, [outcome(i, 0.01 * (-1) ** i) for i in range(4)])[0] == "neutral"


def test_an_undecided_interval_asks_for_more_until_the_budget_is_spent():
    noisy = [outcome(i, 0.2 * (-1) ** i) for i in range(8)]
    assert decide(SETTINGS, noisy[:4])[0] is None
    assert decide(SETTINGS, noisy[:6])[0] is None
    verdict, reason, _ = decide(SETTINGS, noisy)
    assert verdict == "inconclusive" and "after 8 replicates" in reason
    assert decide(SETTINGS, noisy[:1]) == (None, "fewer than two replicates", {})


def test_the_report_hash_depends_only_on_the_plan_and_the_outcomes():
    plan = ExperimentPlan(
        mutation_id="mut_abcdef",
        trait_name="t",
        snapshot="snap",
        epoch=0,
        from_tick=60,
        control=[],
        treated=[verdicts.TraitPin(trait_name="t", version=1, code_hash="0" * 64)],
        settings=SETTINGS,
    )
    outcomes = [outcome(i, -0.5 - 0.01 * i) for i in range(4)]
    first, second = report(plan, outcomes), report(plan, list(reversed(outcomes)))
    assert first == second and first["verdict"] == "negative" and first["ticks"] == 4 * 2 * 600
    assert report(plan, outcomes[:3])["report_hash"] != first["report_hash"]
    assert verdicts.replicate_seed(plan, 0) != verdicts.replicate_seed(plan, 1)
