"""`genesis world stats` and `genesis traits` show the live traits (the API's one set) and, labelled
apart, what the engine runs when that differs; quarantined traits are shown as such, with the
reason. The API is a small HTTP server of this test that answers what each case needs."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from tests.cli_runs import OddServer, run


@pytest.fixture
def odd() -> Iterator[OddServer]:
    server = OddServer()
    yield server
    server.close()


def flat(out: str) -> str:
    """The output as one line (a table cell may wrap at the terminal's width)."""
    return " ".join(out.split())


STATS = {
    "tick": 9000,
    "ticks_per_second": 60.0,
    "mode": "paced",
    "population": 180,
    "avg_energy": 51.2,
    "live_traits": ["forager", "hoarder", "saver"],
    "active_traits": ["forager", "saver"],
    "mutations_applied": 5,
    "tick_overruns": 0,
    "mean_tick_ms": 1.5,
    "running": True,
}


def test_world_stats_labels_the_running_traits_apart_when_they_differ(odd: OddServer):
    odd.json("GET /api/stats", STATS)
    code, out, err, _ = run(odd, "world", "stats")
    assert code == 0, err
    running = "running 2: forager, saver (what the engine's trait host ran at its last report)"
    assert f"live traits 3: forager, hoarder, saver {running}" in flat(out), out
    assert "mutations 5 applied and not rolled back (older versions too)" in flat(out), out

    odd.json("GET /api/stats", {**STATS, "active_traits": ["saver", "hoarder", "forager"]})
    code, out, err, _ = run(odd, "world", "stats")
    assert code == 0 and "live traits 3: forager, hoarder, saver" in flat(out), out
    assert not re.search(r"^running", out, re.M), out


def test_world_stats_says_when_the_live_traits_are_unknown(odd: OddServer):
    odd.json("GET /api/stats", {**STATS, "live_traits": None})
    code, out, err, _ = run(odd, "world", "stats")
    assert code == 0, err
    assert "live traits ? (Postgres is unreachable) running 2: forager, saver" in flat(out), out


def trait(name: str, **fields) -> dict:
    return {
        "trait_name": name,
        "version": 1,
        "mutation_id": f"mut_{name}",
        "agent_id": "agt_0123",
        "class_name": "T",
        "code_hash": "h",
        "activated_at": 1.0,
        "carriers": 3,
        "running": True,
        "mutation_status": "kept",
        "fitness_verdict": "positive",
        "verdict_reason": "r",
        **fields,
    }


def test_traits_shows_verdicts_running_and_quarantined(odd: OddServer):
    odd.json(
        "GET /api/traits",
        {
            "traits": [
                trait("forager"),
                trait("hoarder", fitness_verdict="inconclusive", running=False),
                trait("saver", mutation_status="activated", fitness_verdict=None, running=None),
            ],
            "quarantined": [
                {
                    "trait_name": "spinner",
                    "version": 2,
                    "mutation_id": "mut_spinner",
                    "agent_id": "agt_0123",
                    "mutation_status": "rolled_back",
                    "quarantine": {"reason": "it exceeded its CPU budget on 3 ticks in a row", "quarantined_at": 2.0},
                    "live_version": 1,
                }
            ],
            "snapshot_tick": 9000,
        },
    )
    code, out, err, _ = run(odd, "traits")
    assert code == 0, err
    assert "3 live trait(s), carriers at tick 9,000" in out, out
    rows = {line.split()[0]: line for line in out.splitlines() if re.match(r"^\w+ v\d", line)}
    assert rows["forager"].split()[-2:] == ["kept,", "positive"], rows
    assert "kept, inconclusive (not running" in rows["hoarder"], rows
    assert rows["saver"].split()[-1] == "observing", rows
    assert rows["spinner"].split()[-3:] == ["quarantined,", "rolled", "back"], rows
    assert (
        "spinner is quarantined: it exceeded its CPU budget on 3 ticks in a row (it no longer runs; it was rolled back)"
        in " ".join(out.split())
    )
    assert "inconclusive: its verdict could not decide" in out

    code, out, err, _ = run(odd, "traits", "--json")
    listed = {t["trait_name"]: t for t in json.loads(out)["traits"]}
    assert [name for name, t in listed.items() if not t["quarantined"]] == ["forager", "hoarder", "saver"]
    assert listed["spinner"]["quarantined"] is True and listed["spinner"]["quarantine"]["reason"].startswith(
        "it exceeded"
    )
