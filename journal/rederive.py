"""An audit export checked against the journal itself, not the database it was read from: every
audit event is derived again from the journal's records (``journal.audit.events_of``, the same
pure function the projection runs) and compared with the exported one; and the events the export's
filter selects in its range are all there.

The projection fills in the agent of an event that names only a mutation from the event that
brought the mutation live, when it has seen that event already; so an exported ``agent_id`` is
right when the record names it, or, for one that does not, when it is null or the agent that
brought the mutation live."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .audit import AuditEvent, events_of
from .reader import JournalReader, archived_records

FIELDS = ("epoch", "tick", "kind", "mutation_id", "trait_name", "cause", "summary")
# Filters an export's completeness is checked for (an agent filter depends on the projection's
# fill-in, above: events of it are checked one by one, not for being all there).
COMPLETENESS_FILTERS = {"kinds", "from_seq", "to_seq", "from_tick", "to_tick", "epoch", "mutation_id", "trait_name"}


@dataclass
class Rederived:
    events: dict[tuple[int, int], AuditEvent] = field(default_factory=dict)
    arrivals: dict[str, str] = field(default_factory=dict)  # mutation id -> the agent that brought it live
    last_seq: int = -1


def rederive(journal_dir: Path, to_seq: int | None = None, archive_dir: Path | None = None) -> Rederived:
    """Every audit event of the journal's records up to ``to_seq`` (those retention retired read
    from ``archive_dir``)."""
    out = Rederived()
    params: dict[str, Any] | None = None
    for record in JournalReader(journal_dir / "records", archived_records(archive_dir)).records(0, to_seq):
        for event in events_of(record, params):
            out.events[(event.seq, event.index)] = event
            if event.kind == "trait.arrived" and event.agent_id and event.mutation_id:
                out.arrivals.setdefault(event.mutation_id, event.agent_id)
        if isinstance(record.inputs.get("params"), dict):
            params = record.inputs["params"]
        out.last_seq = record.header.seq
    return out


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def differences(exported: dict[str, Any], derived: AuditEvent | None, arrivals: dict[str, str]) -> list[str]:
    where = f"event {exported.get('seq')}/{exported.get('index')}"
    if derived is None:
        return [f"{where} ({exported.get('kind')}) is not in the journal"]
    found = [
        f"{where}: its {name} is not the journal's"
        for name in FIELDS
        if not _same(exported.get(name), getattr(derived, name))
    ]
    agent = exported.get("agent_id")
    if derived.agent_id is not None:
        agent_ok = agent == derived.agent_id
    else:
        agent_ok = agent is None or agent == arrivals.get(derived.mutation_id or "")
    if not agent_ok:
        found.append(f"{where}: its agent_id is not the journal's")
    return found


def _selected(event: AuditEvent, f: dict[str, Any]) -> bool:
    checks = (
        ("kinds", lambda v: event.kind in v),
        ("from_seq", lambda v: event.seq >= v),
        ("to_seq", lambda v: event.seq <= v),
        ("from_tick", lambda v: event.tick >= v),
        ("to_tick", lambda v: event.tick <= v),
        ("epoch", lambda v: event.epoch == v),
        ("mutation_id", lambda v: event.mutation_id == v),
        ("trait_name", lambda v: event.trait_name == v),
    )
    return all(test(f[name]) for name, test in checks if name in f)


def check(
    events: list[dict[str, Any]],
    manifest: dict[str, Any],
    journal_dir: Path,
    sample: int | None,
    seed: int,
    archive_dir: Path | None = None,
) -> dict[str, Any]:
    """``events`` (an export's, with its ``manifest``) against the journal in ``journal_dir``: all
    of them, or a ``sample`` drawn with ``seed``; and, for an export that was not cut short and
    whose filter allows it, that none the journal holds in its range is missing."""
    projected = manifest.get("projected_seq")
    derived = rederive(journal_dir, projected if isinstance(projected, int) else None, archive_dir)
    chosen: Iterable[dict[str, Any]] = events
    if sample is not None and sample < len(events):
        chosen = random.Random(seed).sample(events, sample)
    problems: list[str] = []
    checked = 0
    for exported in chosen:
        checked += 1
        key = (exported.get("seq"), exported.get("index"))
        problems += differences(exported, derived.events.get(key), derived.arrivals)  # type: ignore[arg-type]
    missing: list[str] = []
    f = manifest.get("filter") or {}
    first, last = manifest.get("first_seq"), manifest.get("last_seq")
    complete = not manifest.get("truncated") and set(f) <= COMPLETENESS_FILTERS and events
    if complete and isinstance(first, int) and isinstance(last, int):
        have = {(e.get("seq"), e.get("index")) for e in events}
        for key, event in derived.events.items():
            if first <= event.seq <= last and _selected(event, f) and key not in have:
                missing.append(f"event {event.seq}/{event.index} ({event.kind}) is in the journal, not in the export")
    return {
        "checked": checked,
        "of": len(events),
        "sample_seed": seed if sample is not None and sample < len(events) else None,
        "journal_records": derived.last_seq + 1,
        "completeness_checked": bool(complete and isinstance(first, int) and isinstance(last, int)),
        "problems": problems + missing,
    }
