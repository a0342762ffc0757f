"""World parameters an evolution cycle may change (``adjust_params``): a small allow-list with
bounds, and the override record the engine applies on top of its configured WorldParams.

A change is bounded twice: each value stays within its parameter's absolute bounds, and moves at
most ``MAX_RELATIVE_STEP`` (50 %) away from the value in force. The record lives in Redis at
``meta:world:params`` (genesis/redis_keys.py); the engine reads it about once a second, and
reports each snapshot to the cycle workflow named in it, which observes the world like a
MutationWorkflow observes a trait and restores ``previous`` on a negative verdict."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

MAX_RELATIVE_STEP = 0.5


class ParamBounds(BaseModel):
    low: float
    high: float
    integer: bool = False
    description: str


ALLOWED: dict[str, ParamBounds] = {
    "resource_spawn_chance": ParamBounds(
        low=0.05, high=1.0, description="chance per tick that one food resource appears"
    ),
    "resource_energy": ParamBounds(low=5.0, high=60.0, description="energy in one food resource"),
    "max_resources": ParamBounds(low=20, high=1000, integer=True, description="most food resources at once"),
    "base_metabolism": ParamBounds(
        low=0.01, high=0.2, description="energy burnt per tick (times energy_consumption_rate)"
    ),
    "reproduction_threshold": ParamBounds(low=60.0, high=100.0, description="energy an adult needs to reproduce"),
    "trait_gain_chance": ParamBounds(low=0.0, high=0.6, description="chance that a newborn gains a new live trait"),
}


class ParamsChange(BaseModel):
    """What an ``adjust_params`` cycle applies: ``after`` on top of the values in force
    (``before``), and the override record to restore on a rollback (``previous_overrides``)."""

    before: dict[str, float] = Field(default_factory=dict)
    after: dict[str, float] = Field(default_factory=dict)
    previous_overrides: dict[str, float] = Field(default_factory=dict)


class ParamsError(ValueError):
    """A requested change outside the allow-list or its bounds (the message says which)."""


def check_change(requested: object, current: dict[str, float]) -> dict[str, float]:
    """The validated new values (ints for integer parameters); ParamsError names each problem."""
    if not isinstance(requested, dict) or not requested:
        raise ParamsError("params must be a non-empty object {name: new value} of: " + ", ".join(ALLOWED))
    problems, out = [], {}
    for name, value in requested.items():
        bounds = ALLOWED.get(name)
        if bounds is None:
            problems.append(f"{name!r} is not adjustable (allowed: {', '.join(ALLOWED)})")
            continue
        if type(value) not in (int, float) or value != value:
            problems.append(f"{name}: {value!r} is not a number")
            continue
        if not bounds.low <= value <= bounds.high:
            problems.append(f"{name}: {value} is outside [{bounds.low}, {bounds.high}]")
            continue
        now = float(current.get(name, float(value)))
        if now and abs(value - now) > abs(now) * MAX_RELATIVE_STEP + 1e-12:
            problems.append(f"{name}: {value} moves more than {MAX_RELATIVE_STEP:.0%} away from {now}")
            continue
        out[name] = round(value) if bounds.integer else float(value)
    if problems:
        raise ParamsError("; ".join(problems))
    return out


def read_record(raw: bytes | str | None) -> dict[str, Any]:
    """The override record stored at ``meta:world:params`` ({} when none)."""
    if not raw:
        return {}
    try:
        record = json.loads(raw)
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def clean_overrides(overrides: Any) -> dict[str, float]:
    """Only allowed names with in-bounds numbers (the engine applies nothing else)."""
    out: dict[str, float] = {}
    if not isinstance(overrides, dict):
        return out
    for name, value in overrides.items():
        bounds = ALLOWED.get(name)
        if bounds is not None and type(value) in (int, float) and bounds.low <= value <= bounds.high:
            out[name] = round(value) if bounds.integer else float(value)
    return out
