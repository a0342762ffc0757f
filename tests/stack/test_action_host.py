"""Agents' round actions in a real trait-host container (the ``act`` request): each submission runs
once in a fresh process of its own against a proxy of its member, and whatever it does comes back
as recorded actions or a structured error, within the request's deadline; hostile code (escape
attempts, a busy loop, C code that cannot be interrupted, a memory bomb) harms neither the host nor
the other submissions."""

from __future__ import annotations

import time

import docker
import pytest

from tests import trait_hosts

STATE = {
    "member_id": 3,
    "round_id": 7,
    "member": {
        "id": 41,
        "x": 10.0,
        "y": 20.0,
        "energy": 50.0,
        "max_energy": 100.0,
        "age": 5,
        "state": "",
        "traits": [],
    },
    "neighbours": [{"id": 42, "x": 12.0, "y": 21.0, "energy": 30.0, "member_id": None}],
    "resources": [{"x": 15.0, "y": 25.0, "energy": 25.0}],
    "world": {"width": 800.0, "height": 600.0},
}

GOOD = """
def agent_action(engine, member_id):
    me = engine.member
    friend = engine.neighbours[0]
    engine.share(member_id, friend.id, me.energy / 10)
    food = engine.resources[0]
    engine.move_towards(member_id, food.x, food.y)
    engine.eat(member_id)
    engine.send_message(member_id, 4, "hello from " + str(engine.round_id))
"""

HOSTILE = {
    "busy": ("def agent_action(engine, member_id):\n    while True:\n        pass\n", "timeout"),
    "c_busy": ("def agent_action(engine, member_id):\n    sum(range(10**12))\n", "timeout"),
    "memory": ("def agent_action(engine, member_id):\n    x = [0] * (10**10)\n", "memory"),
    "syntax": ("def agent_action(engine, member_id)\n    pass\n", "syntax_error"),
    "no_entry": ("def act(engine, member_id):\n    pass\n", "no_entry_point"),
    "raises": ("def agent_action(engine, member_id):\n    1 / 0\n", "error"),
    "flood": (
        "def agent_action(engine, member_id):\n    for _ in range(100):\n        engine.eat(member_id)\n",
        "too_many_actions",
    ),
    "other_member": ("def agent_action(engine, member_id):\n    engine.eat(member_id + 1)\n", "error"),
    "import_os": ("import os\ndef agent_action(engine, member_id):\n    os.kill(1, 9)\n", "error"),
    "escape": (
        "def agent_action(engine, member_id):\n"
        "    ().__class__.__base__.__subclasses__()[0].__init__.__globals__['sys'].modules['os'].system('id')\n",
        "error",
    ),
    "exit": ("def agent_action(engine, member_id):\n    raise SystemExit(0)\n", "error"),
}


@pytest.fixture(scope="module")
def host():
    with trait_hosts.start(docker.from_env(), "test-actions") as started:
        yield started


def act(host, items, cpu_ms=100, deadline_ms=5000):
    reply = host.request({"op": "act", "items": items, "cpu_ms": cpu_ms, "deadline_ms": deadline_ms}, 30)
    assert reply["ok"], reply
    return reply["results"]


def test_an_action_is_recorded_against_the_members_proxy(host):
    (result,) = act(host, [{"id": "s1", "agent": "alice", "code": GOOD, "state": STATE}]).values()
    assert result == {
        "ok": True,
        "actions": [
            ["share", 42, 5.0],
            ["move_towards", 15.0, 25.0],
            ["eat"],
            ["message", 4, "hello from 7"],
        ],
    }


def test_hostile_actions_get_structured_errors_and_spare_the_others(host):
    items = [
        {"id": name, "agent": f"mallory-{name}", "code": code, "state": STATE} for name, (code, _) in HOSTILE.items()
    ]
    items.append({"id": "good", "agent": "alice", "code": GOOD, "state": STATE})
    started = time.monotonic()
    results = act(host, items, cpu_ms=100, deadline_ms=8000)
    took = time.monotonic() - started
    assert results["good"]["ok"] and len(results["good"]["actions"]) == 4
    for name, (_, code) in HOSTILE.items():
        assert results[name]["ok"] is False and results[name]["error"] == code, (name, results[name])
        assert results[name]["detail"], name
    assert "own member" in results["other_member"]["detail"]
    assert "not allowed" in results["import_os"]["detail"]
    assert took < 8, took  # the busy ones were stopped by their budget, not by the deadline
    # the host is still whole: another round of actions runs
    assert act(host, [{"id": "again", "agent": "alice", "code": GOOD, "state": STATE}])["again"]["ok"]


def test_submissions_share_nothing(host):
    """A submission cannot leave anything behind for a later one, even of the same agent."""
    leave = "import math\nmath.planted = 42\ndef agent_action(engine, member_id):\n    engine.eat(member_id)\n"
    find = (
        "import math\n"
        "def agent_action(engine, member_id):\n"
        "    engine.send_message(member_id, 1, str(getattr(math, 'planted', None)))\n"
    )
    first = act(host, [{"id": "leave", "agent": "alice", "code": leave, "state": STATE}])
    assert first["leave"]["ok"]
    second = act(host, [{"id": "find", "agent": "alice", "code": find, "state": STATE}])
    assert second["find"]["actions"] == [["message", 1, "None"]]


def test_the_deadline_ends_the_request_whatever_the_code_does(host):
    """More busy work than the deadline allows: the request still answers at its deadline, every
    submission with its error."""
    busy = HOSTILE["busy"][0]
    items = [{"id": f"s{i}", "agent": f"a{i}", "code": busy, "state": STATE} for i in range(40)]
    started = time.monotonic()
    results = act(host, items, cpu_ms=500, deadline_ms=1000)
    assert time.monotonic() - started < 4
    assert {r["error"] for r in results.values()} <= {"deadline", "timeout"}, results
    assert "deadline" in {r["error"] for r in results.values()}


def test_sybils_cannot_push_another_agents_action_past_the_deadline(host):
    """Fifteen agents' actions that burn CPU until they are killed, three each, all run before an
    honest agent's one: each agent has an equal share of the round's time, so the honest action
    still runs, and nobody's actions take more than their share."""
    busy = HOSTILE["busy"][0]
    sybils = [f"sybil{i:02d}" for i in range(15)]
    firsts = [{"id": f"{a}-1", "agent": a, "code": busy, "state": STATE} for a in sybils]
    honest = {"id": "honest", "agent": "zz-honest", "code": GOOD, "state": STATE}
    later = [{"id": f"{a}-{n}", "agent": a, "code": busy, "state": STATE} for n in (2, 3) for a in sybils]
    started = time.monotonic()
    results = act(host, [*firsts, honest, *later], cpu_ms=500, deadline_ms=3000)
    assert time.monotonic() - started < 5
    assert results["honest"]["ok"], results["honest"]
    assert all(results[i["id"]]["error"] == "deadline" for i in firsts), [results[i["id"]] for i in firsts]
    assert "share of the round's time (188 ms)" in results["sybil00-1"]["detail"]
    assert all(results[i["id"]]["error"] == "deadline" for i in later)  # their share was used up
