"""The life of a proposal to change the world's rules: propose -> shadow -> approve -> apply.

::

    proposed -> shadowing -> awaiting_approval -> approved -> applied
                    |               |                 |
                    v               v                 v
                  failed     rejected / expired     failed (the manifest moved since the shadow)

Every other transition is refused: a proposal is applied only after an approval, approved only
after its shadow report exists, and never decided twice.
"""

from __future__ import annotations

PROPOSED = "proposed"
SHADOWING = "shadowing"
AWAITING_APPROVAL = "awaiting_approval"
APPROVED = "approved"
APPLIED = "applied"
REJECTED = "rejected"
EXPIRED = "expired"
FAILED = "failed"

STATES = (PROPOSED, SHADOWING, AWAITING_APPROVAL, APPROVED, APPLIED, REJECTED, EXPIRED, FAILED)
FINAL = frozenset({APPLIED, REJECTED, EXPIRED, FAILED})
TRANSITIONS: dict[str, frozenset[str]] = {
    PROPOSED: frozenset({SHADOWING, FAILED}),
    SHADOWING: frozenset({AWAITING_APPROVAL, FAILED}),
    AWAITING_APPROVAL: frozenset({APPROVED, REJECTED, EXPIRED}),
    APPROVED: frozenset({APPLIED, FAILED}),
    APPLIED: frozenset(),
    REJECTED: frozenset(),
    EXPIRED: frozenset(),
    FAILED: frozenset(),
}


class IllegalTransition(ValueError):
    """A transition the life of a proposal does not have."""


def check(current: str, to: str) -> None:
    if current not in TRANSITIONS:
        raise IllegalTransition(f"unknown state {current!r}")
    if to not in TRANSITIONS[current]:
        allowed = ", ".join(sorted(TRANSITIONS[current])) or "none: it is final"
        raise IllegalTransition(f"a {current} proposal cannot become {to} (from {current}: {allowed})")
