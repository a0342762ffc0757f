"""The built-in evolution operator: variants pass the gatekeeper at a measured rate, a seed gives
the same variant again, and every variant says where it came from."""

from __future__ import annotations

import pytest

from evolution import operator
from gatekeeper import validate
from tests import traits


def live_parents() -> dict[str, str]:
    """Two live traits with good fitness: a seed trait grown once, and the seed example."""
    grown = operator.vary("grown_seed", 11, anomaly="energy_crisis")
    return {"grown_seed": grown.code, "energy_hoarder": traits.SEED_EXAMPLE}


@pytest.mark.parametrize("anomaly", sorted(operator.SEEDS))
def test_every_seed_trait_passes_the_gatekeeper(anomaly):
    variant = operator.vary(f"seed_{anomaly}", 0, anomaly=anomaly, operators=1)
    result = validate(variant.trait_name, variant.code)
    assert result.ok, (anomaly, result.failure_code, result.validation_log[-1], variant.code)
    assert result.class_name == variant.class_name


def test_at_least_eighty_percent_of_variants_pass_the_gatekeeper():
    anomalies = sorted(operator.SEEDS)
    variants = [
        operator.vary(
            f"variant_{seed}",
            seed,
            anomaly=anomalies[seed % len(anomalies)],
            parents=live_parents() if seed % 2 else None,
            operators=1 + seed % 3,
        )
        for seed in range(300)
    ]
    passed = sum(validate(v.trait_name, v.code).ok for v in variants)
    assert passed / len(variants) >= 0.8, f"{passed} of {len(variants)} passed"
    assert len({v.code for v in variants}) > 250  # variation, not copies


def test_a_seed_gives_the_same_variant_again():
    parents = live_parents()
    first = operator.vary("again", 1234, anomaly="starvation", parents=parents, operators=3)
    second = operator.vary("again", 1234, anomaly="starvation", parents=parents, operators=3)
    assert first == second
    assert operator.vary("again", 1235, anomaly="starvation", parents=parents, operators=3) != first


def test_a_variant_carries_its_lineage():
    seeded = operator.vary("from_seed", 5, anomaly="overcrowding", operators=2)
    assert seeded.parents == ["seed:overcrowding"] and len(seeded.operators) == 2 and seeded.seed == 5
    recombined = [operator.vary(f"mix_{s}", s, parents=live_parents(), operators=3) for s in range(40)]
    mixed = [v for v in recombined if any(op.startswith("recombine:") for op in v.operators)]
    assert mixed, "no recombination in 40 seeds"
    for variant in mixed:
        assert set(variant.parents) == {"grown_seed", "energy_hoarder"}
        assert validate(variant.trait_name, variant.code).ok


def test_a_variant_names_its_live_parents_and_its_operators_without_details():
    seeded = operator.vary("from_seed", 5, anomaly="overcrowding", operators=2)
    assert seeded.trait_parents == [] and seeded.seed_trait == "overcrowding"
    assert seeded.operator_names[0] == "seed" and len(seeded.operator_names) == 3
    assert set(seeded.operator_names[1:]) <= {"perturb", "insert"}  # no second parent to recombine
    for s in range(40):
        variant = operator.vary(f"mix_{s}", s, parents=live_parents(), operators=3)
        assert variant.seed_trait is None and variant.trait_parents == variant.parents
        assert variant.operator_names == [step.split(":")[0] for step in variant.operators]
        assert set(variant.operator_names) <= set(operator.OPERATORS)


def test_perturb_leaves_indices_alone():
    """``food[1]`` is the resource's y: scaled, it would index past the pair and raise."""
    starvation = operator.SEEDS["starvation"]
    assert "food[1]" in starvation
    perturbed = [operator.vary(f"forage_{s}", s, anomaly="starvation", operators=3) for s in range(60)]
    assert any("perturb" in v.operator_names for v in perturbed)
    for variant in perturbed:
        assert "food[0], food[1]" in variant.code, variant.code


def test_a_parent_without_an_execute_method_is_refused():
    with pytest.raises(operator.NotATrait):
        operator.vary("orphan", 1, parents={"broken": "class Broken:\n    pass\n"})


def test_a_parent_s_imports_come_with_its_body():
    wanderer = (
        "import random\n\nclass BaseTrait:\n    pass\n\nclass WandererTrait(BaseTrait):\n"
        "    async def execute(self, entity) -> None:\n"
        "        entity.direction = entity.direction + random.random() - 0.5\n"
    )
    parents = {"wanderer": wanderer, "energy_hoarder": traits.SEED_EXAMPLE}
    variants = [operator.vary(f"heir_{s}", s, parents=parents, operators=2) for s in range(30)]
    with_wanderer = [v for v in variants if "wanderer" in v.parents]
    assert with_wanderer
    for variant in with_wanderer:
        assert "import random" in variant.code
        result = validate(variant.trait_name, variant.code)
        assert result.ok, (result.failure_code, result.validation_log[-1], variant.code)


def test_the_operator_is_the_default_when_no_model_is_configured(monkeypatch):
    for name in ("GENESIS_LLM_PROVIDER", "GENESIS_LLM_URL", "GENESIS_LLM_MODEL"):
        monkeypatch.delenv(name, raising=False)
    from genesis.config import Settings

    assert Settings().llm.provider == operator.PROVIDER


def test_mixed_in_the_operator_takes_about_its_share_of_cycles_and_always_the_same_ones():
    triggers = [f"trg_{n:012x}" for n in range(2000)]
    taken = [t for t in triggers if operator.takes_cycle(t, 0.25)]
    assert 0.2 < len(taken) / len(triggers) < 0.3
    assert taken == [t for t in triggers if operator.takes_cycle(t, 0.25)]
    assert not any(operator.takes_cycle(t, 0.0) for t in triggers)
    assert all(operator.takes_cycle(t, 1.0) for t in triggers)


def test_every_cycle_of_a_schedule_plans_a_trait_of_its_own():
    from genesis.dto import CycleContext, CycleKind

    def planned(trigger_id: str) -> str:
        context = CycleContext(
            trigger_id=trigger_id,
            workflow_id=f"evolution-{trigger_id}",
            kind=CycleKind.periodic_improvement,
            problem_type="periodic_improvement",
            severity="low",
        )
        name = operator.plan(context).trait_name
        assert name is not None and validate(name, operator.vary(name, 1, anomaly="stagnation").code).ok
        return name

    runs = [f"sch_periodic_1a2b-2026-11-26T21:42:{second:02d}Z" for second in range(0, 60, 10)]
    assert len({planned(run) for run in runs}) == len(runs)
    assert planned("trg_0123456789ab") == "periodic_improvement_0123456789ab"


def test_a_parent_is_a_live_trait_whose_carriers_did_well():
    did_well = {"carriers_after": 12, "carrier_avg_energy": 70.0, "non_carrier_avg_energy": 50.0}
    assert operator.fit_parent("positive", did_well)
    assert operator.fit_parent("neutral", did_well)
    assert not operator.fit_parent("negative", did_well)
    assert not operator.fit_parent("positive", {**did_well, "carrier_avg_energy": 40.0})  # carriers did worse
    assert not operator.fit_parent("positive", {**did_well, "carriers_after": 1})  # too few to tell
    assert not operator.fit_parent("inconclusive", did_well)  # too few carriers during the window to judge it
    assert not operator.fit_parent("positive", None)
