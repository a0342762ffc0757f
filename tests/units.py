"""The naming rule of durations in the API's answers (docs/api.md, "Units"), for the tests that
check the schema and the live answers: a duration ends in its unit, moments in ``_at``."""

from __future__ import annotations

import re

UNIT_SUFFIX = re.compile(r"_(sec|ms|us|ticks)$")
TIME_WORDS = re.compile(
    r"(^|_)(s|secs|second|seconds|msec|millis|minutes|mins|hours|ns|duration|latency|elapsed|timeout|ttl|interval|"
    r"lease|delay|wait)(_|$)"
)
# Names kept for the reasons docs/api.md gives: an older name beside the new one, a stored record,
# the seed's name.
DURATION_EXCEPTIONS = {"interval_s", "call_us_mean", "call_us_max", "seconds_remaining"}
NOT_DURATIONS = {"second_parent_program_id"}  # "second" as an ordinal


def duration_name_problem(name: str) -> str | None:
    """Why ``name`` breaks the naming of durations, or None."""
    if name in DURATION_EXCEPTIONS | NOT_DURATIONS or UNIT_SUFFIX.search(name):
        return None
    if name.endswith(("_at", "_times", "_per_second")):
        return None
    if TIME_WORDS.search(name):
        return f"{name}: a duration's name ends in its unit (_sec, _ms, _us, _ticks)"
    return None


def json_keys(node) -> set[str]:
    """Every key of every object in a JSON document."""
    if isinstance(node, dict):
        return set(node).union(*(json_keys(value) for value in node.values()))
    if isinstance(node, list):
        return set().union(*(json_keys(value) for value in node))
    return set()
