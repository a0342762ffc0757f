"""The live fitness ledger (engine/core/ledger.py): carriers against non-carriers of their age band,
snapshot by snapshot; late verdicts; how long a trait has gone uncarried."""

from __future__ import annotations

import pytest

from engine.core.ledger import TraitLedger, age_band
from engine.core.model import Entity, WorldParams
from genesis.verdicts import LedgerRule

PARAMS = WorldParams()
LIVE = ("bad", "idle", "unused")


def molbot(eid: int, age: int, energy: float, traits: tuple[str, ...] = (), parent: int | None = None) -> Entity:
    return Entity(
        id=eid,
        x=0.0,
        y=0.0,
        energy=energy,
        max_energy=100.0,
        speed=1.0,
        direction=0.0,
        age=age,
        max_age=3000,
        traits=traits,
        parent_id=parent,
    )


def world(tick: int, bad_energy: float) -> dict[int, Entity]:
    """40 adults: 10 carry "bad" (at ``bad_energy``), 10 carry "idle", 20 carry nothing."""
    entities = {}
    for i in range(40):
        traits = ("bad",) if i < 10 else ("idle",) if i < 20 else ()
        energy = bad_energy if i < 10 else 60.0
        entities[i] = molbot(i, 400 + tick, energy, traits)
    return entities


def test_a_harmful_trait_turns_the_ledger_negative_and_a_neutral_one_does_not():
    ledger = TraitLedger(LedgerRule(window=10, min_snapshots=5, min_carriers=5, margin=0.2))
    ledger.observe(0, world(0, 60.0), LIVE, PARAMS)
    for k in range(1, 6):
        ledger.observe(300 * k, world(300 * k, 5.0 + k), LIVE, PARAMS)
    late = {v.trait: v for v in ledger.late_verdicts()}
    assert set(late) == {"bad"}
    assert late["bad"].effect.high < -0.2
    assert late["bad"].reason.startswith("late verdict: its carriers' fitness was -")
    assert "over the last 5 snapshots" in late["bad"].reason
    idle = ledger.records["idle"]  # as well off as the rest: ahead of non-carriers, "bad"'s among them
    assert len(idle.effects) == 5 and all(e > 0 for e in idle.effects)


def test_too_few_snapshots_give_no_late_verdict():
    ledger = TraitLedger(LedgerRule(min_snapshots=5))
    for k in range(5):  # 4 intervals
        ledger.observe(300 * k, world(300 * k, 1.0), LIVE, PARAMS)
    assert ledger.late_verdicts() == []
    assert len(ledger.records["bad"].effects) == 4


def test_children_born_in_the_interval_count_for_their_parent():
    ledger = TraitLedger(LedgerRule(min_carriers=1))
    before = {i: molbot(i, 500, 60.0, ("idle",) if i < 5 else ()) for i in range(10)}
    ledger.observe(0, before, ("idle",), PARAMS)
    after = {i: molbot(i, 800, 60.0, ("idle",) if i < 5 else ()) for i in range(10)}
    for child, parent in ((100, 0), (101, 1), (102, 2), (103, 3), (104, 4)):  # one child per carrier
        after[child] = molbot(child, 120, 30.0, ("idle",), parent=parent)
    ledger.observe(300, after, ("idle",), PARAMS)
    (effect,) = ledger.records["idle"].effects
    mean_all = (5 * (60.0 + PARAMS.reproduction_cost) + 5 * 60.0) / 10
    assert effect == pytest.approx(PARAMS.reproduction_cost / mean_all)


def test_carriers_are_compared_within_their_age_band_only():
    """Newborn carriers with no newborn non-carrier to compare with give no effect: the ledger
    does not read a newborn's low energy as the trait's doing."""
    ledger = TraitLedger(LedgerRule(min_carriers=1))
    young = {i: molbot(i, 10, 30.0, ("idle",)) for i in range(5)}
    old = {i: molbot(i, 1000, 80.0) for i in range(5, 15)}
    ledger.observe(0, young | old, ("idle",), PARAMS)
    ledger.observe(300, young | old, ("idle",), PARAMS)
    assert age_band(10, PARAMS) != age_band(1000, PARAMS)
    assert not ledger.records["idle"].effects


def test_an_uncarried_trait_counts_its_ticks_and_a_carried_one_resets():
    ledger = TraitLedger()
    ledger.observe(1000, world(0, 60.0), LIVE, PARAMS)
    ledger.observe(4000, world(0, 60.0), LIVE, PARAMS)
    assert ledger.records["unused"].uncarried_ticks(4000) == 3000
    assert ledger.records["bad"].uncarried_ticks(4000) == 0
    assert ledger.uncarried(3000) == ["unused"]
    assert ledger.uncarried(3001) == []
    summary = ledger.summary()
    assert summary["traits"]["unused"]["carriers"] == 0
    assert summary["traits"]["bad"]["carriers"] == 10


def test_a_trait_that_leaves_the_live_set_starts_a_new_record_when_it_returns():
    ledger = TraitLedger()
    ledger.observe(0, world(0, 60.0), LIVE, PARAMS)
    ledger.observe(300, world(0, 60.0), ("bad", "idle"), PARAMS)
    assert "unused" not in ledger.records
    ledger.observe(600, world(0, 60.0), LIVE, PARAMS)
    assert ledger.records["unused"].since_tick == 600
