"""AST gatekeeper: steps 2-10 of the mutation validation pipeline (open-mutation-api seed).

The checks live in ``genesis/gatekeeper_core.py``; this module serves its Cython-compiled build
(about twice as fast, built by ``make venv``) when that is present and current, and otherwise the
pure-Python module itself, after one warning in the log (``genesis.native``).
"""

from __future__ import annotations

from genesis import native

_core, COMPILED = native.load("gatekeeper_core")

GateResult = _core.GateResult
schema_problems = _core.schema_problems
validate = _core.validate
MAX_NESTING: int = _core.MAX_NESTING

__all__ = ["COMPILED", "GateResult", "MAX_NESTING", "schema_problems", "validate"]
