"""How every caller of the trait host judges a trait's results (sandbox/host_client.py)."""

from __future__ import annotations

import pytest

from genesis.dto import SandboxProfile
from sandbox.host_client import DRIFT_WINDOW_CALLS, DRIFT_WINDOW_TICKS, TraitAccount, account, drift

PROFILE = SandboxProfile(call_us_mean=5.0, errors_per_call=0.0, intents_per_call=1.0)


def result(calls: int = 10, us: float = 5.0, errors: int = 0, intents: int = 10, **extra) -> dict:
    return {
        "calls": calls,
        "total_us": calls * us,
        "error_count": errors,
        "errors": [{"entity_id": 1, "error": "ValueError: no"}] if errors else [],
        "timeouts": [],
        "intents": intents,
        **extra,
    }


def window(state: TraitAccount, **kwargs) -> str | None:
    """A full window of identical ticks; what drift says at its end."""
    ticks = max(DRIFT_WINDOW_TICKS, DRIFT_WINDOW_CALLS // kwargs.get("calls", 10) + 1)
    said = None
    for _ in range(ticks):
        account(state, result(**kwargs))
        said = drift(state) or said
    return said


def test_a_trait_that_behaves_as_in_its_test_does_not_drift() -> None:
    assert window(TraitAccount(profile=PROFILE)) is None


@pytest.mark.parametrize(
    "change, words",
    [
        ({"us": 400.0}, "us of CPU each live"),
        ({"errors": 5}, "of its calls fail live"),
        ({"intents": 80}, "intents a call live"),
    ],
)
def test_a_sharp_departure_from_the_profile_is_named(change: dict, words: str) -> None:
    state = TraitAccount(profile=PROFILE)
    said = window(state, **change)
    assert said is not None and words in said, said


def test_small_departures_and_traits_without_a_profile_are_left_alone() -> None:
    assert window(TraitAccount(profile=PROFILE), us=40.0, intents=25) is None  # 8x, and 2.5 a call
    assert window(TraitAccount(profile=None), us=4000.0) is None


def test_throttled_and_lost_ticks_count_for_nothing_and_over_share_names_the_trait() -> None:
    state = TraitAccount(profile=PROFILE)
    assert account(state, {"calls": 0, "lost": "its process is being started"}) is None
    assert account(state, {"calls": 0, "lost": "throttled", "throttled": "throttled"}) is None
    assert (state.lost, state.throttled, state.strikes) == (1, 1, 0)
    why = account(state, result(over_share="its agent kept using more than its fair share"))
    assert why is not None and "fair share" in why


def test_a_first_kill_makes_a_suspect_and_a_confirmed_one_quarantines() -> None:
    state = TraitAccount()
    assert account(state, {"calls": 0, "killed": "one call ran over 20 ms", "confirmed": False}) is None
    assert state.suspect
    why = account(state, {"calls": 0, "killed": "one call ran over 20 ms", "confirmed": True})
    assert why is not None and "confirmed while it ran alone" in why


def test_a_profile_comes_from_a_sandbox_report() -> None:
    report = {"calls": 200, "call_us_mean": 3.5, "exceptions": 0, "timeouts": 0, "intents_applied": 150}
    profile = SandboxProfile.of({**report, "intents_rejected": {"bad_type": 50}})
    assert profile == SandboxProfile(call_us_mean=3.5, errors_per_call=0.0, intents_per_call=1.0)
    assert SandboxProfile.of(None) is None and SandboxProfile.of({"calls": 0}) is None
