"""AST gatekeeper: steps 2-10 of the mutation validation pipeline (open-mutation-api seed).

The checks live in ``genesis/gatekeeper_core.py``."""

from __future__ import annotations

from genesis.gatekeeper_core import MAX_NESTING, GateResult, schema_problems, validate

__all__ = ["GateResult", "MAX_NESTING", "schema_problems", "validate"]
