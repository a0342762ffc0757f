"""How the API writes a moment: Unix seconds (a float, to the millisecond) in most answers, and
ISO 8601 in UTC with a ``Z`` where the seed's shapes ask for it (``registered_at``,
``deadline_utc``)."""

from __future__ import annotations

from datetime import UTC, datetime


def unix(moment: datetime) -> float:
    return round(moment.timestamp(), 3)


def maybe_unix(moment: datetime | None) -> float | None:
    return unix(moment) if moment is not None else None


def iso_utc(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
