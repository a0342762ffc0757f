"""The audit events of journal records: what a person looking for "who changed the world, when and
why" wants to find, projected from the records (a pure function: the projection can always be
rebuilt from the journal).

A record yields zero or more events, each with the record's sequence number, epoch and tick, an
index within the record, a kind, the agent, mutation and trait it concerns (where it does), a
cause and a short summary:

- ``world.created`` (seed, parameters) and ``engine.started`` (run, snapshot, replayed records);
- ``world.rollback`` (from and to, the snapshot; the cause is its reason);
- ``trait.arrived`` (a version went live: activated, or replacing another) and ``trait.left``
  (the cause: ``deregistered`` — rolled back or replaced by nothing — or ``quarantined``);
- ``params.changed`` (the parameters that changed);
- ``host.missed``, ``host.skipped``, ``host.refused``, ``host.error``: ticks the trait host did
  not serve (the cause says why);
- ``receipt``: a signed receipt of the mutation pipeline, as the journal carries it;
- ``policy.decision``: a decision of the policy gate (the cause: ``allow`` or ``deny``);
- ``journal.retention``: the engine took up the manifest's retention (the policy before and after;
  each archived or deleted batch of segments then has its ``receipt``).

Plain ticks whose host served them yield nothing: they are in the journal (``GET
/v1/audit/records`` lists records themselves)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .record import JournalRecord

HOST_TROUBLE = ("missed", "skipped", "refused", "error")
EVENT_KINDS = (
    "world.created",
    "engine.started",
    "world.rollback",
    "trait.arrived",
    "trait.left",
    "params.changed",
    *(f"host.{outcome}" for outcome in HOST_TROUBLE),
    "receipt",
    "policy.decision",
    "journal.retention",
)


@dataclass(frozen=True)
class AuditEvent:
    seq: int
    index: int
    epoch: int
    tick: int
    kind: str
    agent_id: str | None = None
    mutation_id: str | None = None
    trait_name: str | None = None
    cause: str | None = None
    summary: dict[str, Any] = field(default_factory=dict)

    def to_data(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "index": self.index,
            "epoch": self.epoch,
            "tick": self.tick,
            "kind": self.kind,
            "agent_id": self.agent_id,
            "mutation_id": self.mutation_id,
            "trait_name": self.trait_name,
            "cause": self.cause,
            "summary": self.summary,
        }


def _str(value: Any) -> str | None:
    return value[:500] if isinstance(value, str) and value else None


def events_of(record: JournalRecord, previous_params: dict[str, Any] | None = None) -> list[AuditEvent]:
    """The audit events of one record (``previous_params``: the parameters before it, to name the
    ones a change changed; None: all are listed)."""
    h, body = record.header, record.inputs
    out: list[AuditEvent] = []

    def add(kind: str, **fields: Any) -> None:
        out.append(AuditEvent(h.seq, len(out), h.epoch, h.tick, kind, **fields))

    if h.kind == "world.created":
        add(
            "world.created",
            cause="created",
            summary={"seed": body.get("seed"), "world_version": body.get("world_version")},
        )
    elif h.kind == "engine.started":
        add(
            "engine.started",
            cause="started",
            summary={k: body.get(k) for k in ("run_id", "snapshot", "replayed_records", "world_version")},
        )
    elif h.kind == "rollback":
        request: dict[str, Any] = body["request"] if isinstance(body.get("request"), dict) else {}
        add(
            "world.rollback",
            mutation_id=_str(request.get("mutation_id")),
            cause=_str(body.get("reason")),
            summary={k: body.get(k) for k in ("from_tick", "from_epoch", "to_tick", "snapshot", "snapshot_epoch")}
            | {"requested_by": request.get("requested_by"), "request_id": request.get("request_id")},
        )
    elif h.kind == "receipt":
        subject: dict[str, Any] = body["subject"] if isinstance(body.get("subject"), dict) else {}
        add(
            "receipt",
            agent_id=_str(subject.get("agent_id")),
            mutation_id=_str(subject.get("mutation_id")),
            trait_name=_str(subject.get("trait_name")),
            cause=_str(body.get("kind")),
            summary={"receipt_id": body.get("id"), "receipt_kind": body.get("kind")},
        )
    elif h.kind == "policy.decision":
        asked: dict[str, Any] = body["request"] if isinstance(body.get("request"), dict) else {}
        decided: dict[str, Any] = body["decision"] if isinstance(body.get("decision"), dict) else {}
        add(
            "policy.decision",
            agent_id=_str(asked.get("subject")) if asked.get("role") == "agent" else None,
            cause=_str(decided.get("decision")),
            summary={"decision_id": body.get("id")}
            | {k: asked.get(k) for k in ("role", "action", "subject", "resource")}
            | {k: decided.get(k) for k in ("rule", "reason", "manifest_hash", "dry_run")},
        )
    elif h.kind == "journal.retention":
        add(
            "journal.retention",
            cause="manifest",
            summary={k: body.get(k) for k in ("policy", "previous", "manifest_version")},
        )
    elif h.kind == "tick":
        traits = body.get("traits")
        if isinstance(traits, dict):
            agents = traits.get("agents") or {}
            replaced = traits.get("replaced") or {}
            for name, mutation_id in sorted((traits.get("arrived") or {}).items()):
                add(
                    "trait.arrived",
                    agent_id=_str(agents.get(name)),
                    mutation_id=_str(mutation_id),
                    trait_name=name,
                    cause="replaced" if name in replaced else "activated",
                    summary={"replaced": replaced.get(name)} if name in replaced else {},
                )
            left_versions = traits.get("left_versions") or {}
            for name, why in sorted((traits.get("left") or {}).items()):
                add("trait.left", mutation_id=_str(left_versions.get(name)), trait_name=name, cause=_str(why))
        params = body.get("params")
        if isinstance(params, dict):
            changed = {
                k: v for k, v in sorted(params.items()) if previous_params is None or previous_params.get(k) != v
            }
            add("params.changed", cause="params", summary={"changed": changed})
        host = body.get("host")
        if host in HOST_TROUBLE:
            add(f"host.{host}", cause=_str(body.get("host_detail")) or host)
    return out
