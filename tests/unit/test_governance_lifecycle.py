"""The life of a governance proposal (governance/lifecycle.py): the one path and its exits, and
every other transition refused."""

from __future__ import annotations

import itertools

import pytest

from governance import lifecycle as life

pytestmark = pytest.mark.unit

ALLOWED = {
    (life.PROPOSED, life.SHADOWING),
    (life.PROPOSED, life.FAILED),
    (life.SHADOWING, life.AWAITING_APPROVAL),
    (life.SHADOWING, life.FAILED),
    (life.AWAITING_APPROVAL, life.APPROVED),
    (life.AWAITING_APPROVAL, life.REJECTED),
    (life.AWAITING_APPROVAL, life.EXPIRED),
    (life.APPROVED, life.APPLIED),
    (life.APPROVED, life.FAILED),
}


@pytest.mark.parametrize("current, to", list(itertools.product(life.STATES, repeat=2)))
def test_only_the_lifecycles_transitions_are_allowed(current, to):
    if (current, to) in ALLOWED:
        life.check(current, to)
    else:
        with pytest.raises(life.IllegalTransition, match=f"a {current} proposal cannot become {to}"):
            life.check(current, to)


def test_final_states_have_no_way_out_and_unknown_states_are_refused():
    assert {s for s in life.STATES if not life.TRANSITIONS[s]} == set(life.FINAL)
    with pytest.raises(life.IllegalTransition, match="unknown state"):
        life.check("limbo", life.APPLIED)
