"""The live fitness ledger: every live trait measured for as long as it lives, snapshot by snapshot.

A verdict is given once, from forks of the world at activation. The world goes on changing after
it, so the engine keeps measuring. At each telemetry snapshot it takes a *cohort* (every Molbot
alive: its traits and age band); at the next snapshot each member's outcome is its energy then
(0 if it died) plus ``reproduction_cost`` for each of its children born since — the fitness the
verdict experiment uses. For each live trait, its carriers are compared with the non-carriers
of the same age band (a newborn with a newborn, an elder with an elder: traits reach Molbots at
birth, so carriers are younger than the rest), and the carrier-weighted difference over the
cohort's mean outcome is that snapshot's *effect*.

The ledger is observational, not an experiment: carriers descend from their own parents, so a
lineage's luck rides along with its traits. Its rule is therefore stricter than the verdict's:
a trait is judged harmful late only when the interval of its last ``window`` effects (Student's t,
95 %, at least ``min_snapshots`` of them) lies wholly below ``-margin``. It also tells how long
a trait has gone without a carrier (extinction) and ranks the traits by their mean effect (what
makes room when the live set is full).

Pure and cheap: one pass over the Molbots per snapshot, nothing on the tick path; it never
changes the world. Children who are born and die between two snapshots are not counted.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from genesis.verdicts import Estimate, LedgerRule, estimate

from .model import Entity, WorldParams

MAX_BAND = 5  # age bands of maturity_age ticks each; the last holds every older Molbot


def age_band(age: int, params: WorldParams) -> int:
    return min(age // max(params.maturity_age, 1), MAX_BAND)


@dataclass
class TraitRecord:
    """What the ledger knows of one live trait."""

    since_tick: int  # when it (last) joined the live set
    last_carried_tick: int | None = None  # the last snapshot at which a Molbot carried it
    carriers: int = 0  # at the latest snapshot
    effects: deque[float] = field(default_factory=deque)
    matched: deque[int] = field(default_factory=deque)  # carriers behind each effect

    def uncarried_ticks(self, tick: int) -> int:
        """Ticks since a Molbot last carried it (since it went live, if none ever did)."""
        return tick - (self.last_carried_tick if self.last_carried_tick is not None else self.since_tick)

    def estimate(self) -> Estimate | None:
        return estimate(list(self.effects)) if len(self.effects) >= 2 else None


@dataclass(frozen=True)
class LateVerdict:
    trait: str
    reason: str
    effect: Estimate


@dataclass
class _Cohort:
    tick: int
    members: dict[int, tuple[tuple[str, ...], int]]  # id -> (traits, age band)


class TraitLedger:
    def __init__(self, rule: LedgerRule | None = None) -> None:
        self.rule = rule or LedgerRule()
        self.records: dict[str, TraitRecord] = {}
        self._cohort: _Cohort | None = None
        self.tick = 0

    def observe(self, tick: int, entities: dict[int, Entity], live: tuple[str, ...], params: WorldParams) -> None:
        """One snapshot: the effects of the interval that ends here, then the next cohort."""
        self.tick = tick
        for name in list(self.records):
            if name not in live:
                del self.records[name]  # left the live set: a return starts a new record
        for name in live:
            self.records.setdefault(name, TraitRecord(since_tick=tick))
        carriers = dict.fromkeys(live, 0)
        for e in entities.values():
            for name in e.traits:
                if name in carriers:
                    carriers[name] += 1
        for name, n in carriers.items():
            record = self.records[name]
            record.carriers = n
            if n:
                record.last_carried_tick = tick
        if self._cohort is not None and tick > self._cohort.tick:
            self._score(self._cohort, tick, entities, params)
        self._cohort = _Cohort(tick, {e.id: (e.traits, age_band(e.age, params)) for e in entities.values()})

    def _score(self, cohort: _Cohort, tick: int, entities: dict[int, Entity], params: WorldParams) -> None:
        span = tick - cohort.tick
        outcome = {eid: 0.0 for eid in cohort.members}
        for e in entities.values():
            if e.id in outcome:
                outcome[e.id] += e.energy
            if e.parent_id in outcome and e.age < span:  # born since the cohort was taken
                outcome[e.parent_id] += params.reproduction_cost
        mean_all = statistics.fmean(outcome.values()) if outcome else 0.0
        if mean_all <= 0:
            return
        # per band: (sum, count) of everyone, and per trait of its carriers
        band_all: dict[int, list[float]] = {}
        band_trait: dict[tuple[str, int], list[float]] = {}
        for eid, (traits, band) in cohort.members.items():
            value = outcome[eid]
            totals = band_all.setdefault(band, [0.0, 0])
            totals[0] += value
            totals[1] += 1
            for name in traits:
                if name in self.records:
                    t = band_trait.setdefault((name, band), [0.0, 0])
                    t[0] += value
                    t[1] += 1
        weighted: dict[str, list[float]] = {}  # trait -> [sum of n_c * difference, matched carriers]
        for (name, band), (c_sum, c_n) in band_trait.items():
            a_sum, a_n = band_all[band]
            others = a_n - c_n
            if others == 0:
                continue  # no one to compare with in this band
            difference = c_sum / c_n - (a_sum - c_sum) / others
            w = weighted.setdefault(name, [0.0, 0])
            w[0] += c_n * difference
            w[1] += c_n
        rule = self.rule
        for name, (total, matched) in weighted.items():
            if matched < rule.min_carriers:
                continue
            record = self.records[name]
            record.effects.append(total / matched / mean_all)
            record.matched.append(int(matched))
            while len(record.effects) > rule.window:
                record.effects.popleft()
                record.matched.popleft()

    def late_verdicts(self) -> list[LateVerdict]:
        """The live traits whose evidence has turned decisively harmful."""
        rule = self.rule
        found = []
        for name, record in sorted(self.records.items()):
            if len(record.effects) < rule.min_snapshots:
                continue
            e = record.estimate()
            if e is None or e.high >= -rule.margin:
                continue
            reason = (
                f"late verdict: its carriers' fitness was {e.mean:+.1%} against comparable non-carriers' "
                f"(95 % interval {e.low:+.1%} … {e.high:+.1%}) over the last {len(record.effects)} snapshots "
                f"of the live world, {statistics.fmean(record.matched):.0f} carriers each"
            )
            found.append(LateVerdict(name, reason, e))
        return found

    def uncarried(self, ticks: int) -> list[str]:
        """The live traits no Molbot has carried for at least ``ticks`` ticks."""
        return sorted(n for n, r in self.records.items() if r.uncarried_ticks(self.tick) >= ticks)

    def summary(self) -> dict[str, Any]:
        """The ledger as JSON data (``ledger:traits`` in Redis; the API and CLI read it)."""
        traits = {}
        for name, r in sorted(self.records.items()):
            e = r.estimate()
            traits[name] = {
                "carriers": r.carriers,
                "since_tick": r.since_tick,
                "last_carried_tick": r.last_carried_tick,
                "uncarried_ticks": r.uncarried_ticks(self.tick),
                "snapshots": len(r.effects),
                "effect": e.model_dump() if e is not None else None,
            }
        return {"tick": self.tick, "margin": self.rule.margin, "traits": traits}
