"""A trait's verdict as a controlled experiment: the plan, one replicate's outcome, and the
decision from the replicates' interval. Pure (no I/O): the MutationWorkflow decides with it, and
``activities.verdict_experiment`` runs the replicates it plans.

A replicate is a pair of forks of the live world from one snapshot with one seed: the
**control** runs the traits live without the candidate (with the version it replaces, if any),
the **treated** copy also runs the candidate, on a random share of the Molbots (its *units*,
the same Molbots in both copies). After the horizon each unit's **fitness** is read in both
copies: the energy it holds (0 once dead) plus the energy it spent on offspring
(``reproduction_cost`` for each birth). A replicate's effect is the units' relative change,
treated against control; the Molbots that did not get the trait (the *others*) are read the same
way, so a trait that helps its carriers at the others' cost is seen. Replicates are independent
(each draws its own seed and units), so their effects give a Student's t interval, and the
verdict is read from the interval against the equivalence margin.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from genesis import canonical

REPORT_VERSION = 1
POSITIVE, NEGATIVE, NEUTRAL, INCONCLUSIVE = "positive", "negative", "neutral", "inconclusive"

# Two-sided Student's t quantiles (0.975) by degrees of freedom: a 95 % interval. Data, checked
# against scipy in tests/unit/test_verdict_experiment.py; past the table the normal quantile is close enough.
T_975 = (
    12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
    2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
    2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
)  # fmt: skip
Z_975 = 1.9600


def t_975(df: int) -> float:
    if df < 1:
        raise ValueError("an interval needs at least two replicates")
    return T_975[df - 1] if df <= len(T_975) else Z_975


@dataclass(frozen=True)
class LedgerRule:
    """When the live ledger (engine/core/ledger.py) judges a kept trait harmful after its verdict."""

    window: int = 10  # the newest effects the interval is read from
    min_snapshots: int = 5  # effects needed before the ledger judges
    min_carriers: int = 5  # carriers matched with a non-carrier of their age band for an effect to count
    margin: float = 0.2  # a late verdict: the interval lies wholly below -margin


class ExperimentSettings(BaseModel):
    """How a trait's experiment runs and decides (``GENESIS_VERDICT_*``; workflows read no
    configuration, so it travels in MutationInput)."""

    horizon_ticks: int = Field(default=400, ge=10)
    unit_share: float = Field(default=0.5, gt=0, lt=1)
    min_replicates: int = Field(default=3, ge=2)
    batch: int = Field(default=2, ge=1)
    max_replicates: int = Field(default=9, ge=2)
    margin: float = Field(default=0.05, gt=0)


class TraitPin(BaseModel):
    """One trait version a fork runs: the code is read by (name, version) and checked by hash."""

    trait_name: str
    version: int
    code_hash: str


class ExperimentPlan(BaseModel):
    """Everything a replicate needs to be run again with the same result: the snapshot it forks,
    the trait versions of each copy, and the settings."""

    mutation_id: str
    trait_name: str
    snapshot: str
    epoch: int
    from_tick: int
    control: list[TraitPin]
    treated: list[TraitPin]
    settings: ExperimentSettings


class PlanRequest(BaseModel):
    mutation_id: str
    trait_name: str
    trait_version: int  # the candidate's live version
    previous_version: int | None = None  # the version it replaced: the control runs it
    settings: ExperimentSettings


class PlanOutcome(BaseModel):
    plan: ExperimentPlan | None = None
    not_run: str | None = None  # why no experiment can run (no journal or snapshot to fork from)


class ReplicateRequest(BaseModel):
    plan: ExperimentPlan
    index: int


class Tally(BaseModel):
    """What a group of Molbots did in one copy over the horizon (sums over the group)."""

    fitness: float = 0.0
    alive: int = 0
    energy: float = 0.0
    offspring: int = 0


class GroupOutcome(BaseModel):
    count: int
    control: Tally
    treated: Tally


class CopyOutcome(BaseModel):
    """One copy of the world at the horizon."""

    population: int  # at the horizon
    population_mean: float  # over the horizon
    deaths: dict[str, int]  # by cause
    births: int
    restarts: int = 0  # its trait host failed and started again (a tick ran on instinct)
    quarantined: dict[str, int] = Field(default_factory=dict)  # trait -> tick it left the copy


class ReplicateOutcome(BaseModel):
    index: int
    seed: int
    ticks: int
    units: GroupOutcome  # the Molbots given the trait in the treated copy
    others: GroupOutcome  # the rest of the Molbots alive at the fork
    control: CopyOutcome
    treated: CopyOutcome


class Estimate(BaseModel):
    mean: float
    low: float
    high: float


def relative(treated: float, control: float) -> float:
    return (treated - control) / max(control, 1.0)


def replicate_effects(o: ReplicateOutcome) -> dict[str, float]:
    """One replicate's effects: relative fitness of units and others, and the plain differences."""
    u, n = o.units, max(o.units.count, 1)
    effects = {
        "fitness": relative(u.treated.fitness, u.control.fitness),
        "survival": (u.treated.alive - u.control.alive) / n,
        "energy": (u.treated.energy - u.control.energy) / n,
        "offspring": (u.treated.offspring - u.control.offspring) / n,
        "population": relative(o.treated.population_mean, o.control.population_mean),
        "starvation": float(o.treated.deaths.get("starvation", 0) - o.control.deaths.get("starvation", 0)),
    }
    if o.others.count:
        effects["others_fitness"] = relative(o.others.treated.fitness, o.others.control.fitness)
    return effects


def estimate(values: list[float]) -> Estimate:
    mean = statistics.fmean(values)
    half = t_975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return Estimate(mean=round(mean, 6), low=round(mean - half, 6), high=round(mean + half, 6))


def _pct(e: Estimate) -> str:
    return f"{e.mean:+.1%} (95 % interval {e.low:+.1%} … {e.high:+.1%})"


Decision = tuple[str | None, str, dict[str, Estimate]]


def decide(settings: ExperimentSettings, outcomes: list[ReplicateOutcome]) -> Decision:
    """The verdict the replicates so far support, its reason in plain words, and the estimates.
    The verdict is None while more replicates may decide it; ``inconclusive`` once the budget
    (``max_replicates``) is spent without a decisive interval."""
    per = [replicate_effects(o) for o in sorted(outcomes, key=lambda o: o.index)]
    if len(per) < 2:
        return None, "fewer than two replicates", {}
    names = sorted({k for effects in per for k in effects})
    estimates = {k: estimate([e[k] for e in per if k in e]) for k in names if sum(k in e for e in per) >= 2}
    m = settings.margin
    fitness, population = estimates["fitness"], estimates["population"]
    units = f"its carriers' fitness changed by {_pct(fitness)}"
    if fitness.high < -m:
        return NEGATIVE, f"{units}: below -{m:.0%}, harmful", estimates
    if population.high < -m:
        return NEGATIVE, f"the world's population changed by {_pct(population)}: it harms the world", estimates
    world_ok = population.low >= -m
    if fitness.low > m and world_ok:
        return POSITIVE, f"{units}: above +{m:.0%}, helpful", estimates
    if -m <= fitness.low and fitness.high <= m and world_ok:
        return NEUTRAL, f"{units}: within ±{m:.0%}, no effect that matters", estimates
    if len(per) >= settings.max_replicates:
        return INCONCLUSIVE, f"{units}: not decisive after {len(per)} replicates (the budget)", estimates
    return None, f"{units}: not decisive yet", estimates


def report(plan: ExperimentPlan, outcomes: list[ReplicateOutcome]) -> dict[str, Any]:
    """The verdict's report (with its hash): the same plan and outcomes give the same bytes."""
    outcomes = sorted(outcomes, key=lambda o: o.index)
    verdict, reason, estimates = decide(plan.settings, outcomes)
    body = {
        "version": REPORT_VERSION,
        "verdict": verdict or INCONCLUSIVE,
        "reason": reason,
        "effects": {k: e.model_dump() for k, e in estimates.items()},
        "replicates": len(outcomes),
        "ticks": sum(2 * o.ticks for o in outcomes),
        "margin": plan.settings.margin,
        "plan": plan.model_dump(),
        "outcomes": [o.model_dump() for o in outcomes],
    }
    return {**body, "report_hash": report_hash(body)}


def report_hash(body: dict[str, Any]) -> str:
    return hashlib.sha256(canonical.encode({k: v for k, v in body.items() if k != "report_hash"})).hexdigest()


def replicate_seed(plan: ExperimentPlan, index: int) -> int:
    """The seed of a replicate's two copies (and of its draw of units): the same for the same
    plan and index, independent between replicates."""
    digest = hashlib.sha256(f"verdict:{plan.mutation_id}:{plan.snapshot}:{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1
