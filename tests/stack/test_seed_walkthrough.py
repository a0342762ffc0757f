"""The seed's five-step external-agent walkthrough (open-mutation-api.md, "Пример рабочего цикла
внешнего агента"), over HTTP against the real stack: API, worker, Temporal, Postgres, Redis,
Docker and a running engine.

tasks → sandbox-api → propose → status → effects, with the two additions of GENESIS_AUTH=required
that the walkthrough of docs/api.md makes (register once and send the key; claim the task). Every
answer is checked field by field against the seed's examples. The walkthrough's curl commands send
exactly the bodies below (checked by the last test)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import httpx
from sqlalchemy import update

import gatekeeper
from genesis.db.models import Mutation
from genesis.db.session import get_sessionmaker
from tests import agents, traits
from tests.pipeline_steps import assert_honest_verdict

API_DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
TASK_BODY = {
    "problem_type": "starvation",
    "severity": "high",
    "description": "Average energy fell to 20%. A trait that gathers resources better is needed.",
}
REGISTER_BODY = {"name": "claude-external-1", "description": "my first agent"}
TASK_PLACEHOLDER = "$TASK"
PROPOSE_BODY = {  # the seed's request; agent_id is the key's agent (may be left out with a key)
    "task_id": TASK_PLACEHOLDER,
    "trait_name": "energy_hoarder",
    "goal": "Hoard energy when it runs low",
    "code": traits.SEED_EXAMPLE,
}
SEED_STATUSES = ["queued", "validating", "sandbox_ok", "activated"]  # the seed's happy path, in order

# The seed's examples, key by key (Genesis adds fields; it never drops or renames one).
SEED_TASK_KEYS = {
    "task_id",
    "expires_at",
    "ttl_remaining_sec",
    "source",
    "problem_type",
    "severity",
    "description",
    "suggested_area",
    "world_context",
    "constraints",
}
SEED_SANDBOX_API = {
    "api_version": "1",
    "trait_pattern": "define class BaseTrait stub inline, then inherit from it",
    "required_method": "async execute(self, entity) -> None",
    "allowed_imports": [
        "__future__",
        "math",
        "random",
        "dataclasses",
        "typing",
        "enum",
        "collections",
        "functools",
        "itertools",
    ],
    "timeout_ms": 5,
    "max_loop_iterations": 100,
    "no_module_level_code": True,
}
SEED_PROPOSE_KEYS = {"mutation_id", "status", "message"}
SEED_STATUS_KEYS = {
    "mutation_id",
    "trait_name",
    "agent_id",
    "status",
    "failure_reason_code",
    "created_at",
    "updated_at",
    "validation_log",
}
SEED_EFFECTS_KEYS = {"mutation_id", "trait_name", "status", "observation_window_ticks", "observed", "effects"}
SEED_EFFECT_DELTAS = {"entity_count_delta": int, "avg_energy_delta": (int, float), "death_starvation_delta": int}


def number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


async def eventually(probe, what: str, timeout_s: float = 30, every_s: float = 0.1):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = await probe()
        if value:
            return value
        await asyncio.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


async def listed_tasks(http) -> dict[str, dict]:
    # limit=500: other tests of the session publish tasks too, and the list is soonest-expiry first
    response = await http.get("/api/agents/context/tasks", params={"limit": 500})
    assert response.status_code == 200, response.text
    assert set(response.json()) == {"tasks", "next_cursor"}  # the seed's shape, and where its next page starts
    return {task["task_id"]: task for task in response.json()["tasks"]}


async def start_from_a_world_without_the_seed_example(http, settings, start_api) -> None:
    """The walkthrough starts where the seed's does: `energy_hoarder` is not live and its code is
    new. Earlier tests of this session propose the seed's example too, so a live `energy_hoarder`
    would make the proposal 409 TRAIT_EXISTS and its code hash DUPLICATE_CODE. An operator takes it
    out of the world (rollback over an API in open mode: the proposer's key is not ours), and the
    earlier mutations' claim on the code hash is released (their records stay as they are)."""
    detail = await http.get("/api/traits/energy_hoarder")
    live = detail.json()["live"] if detail.status_code == 200 else None
    if live is not None:
        operator = await start_api("walkthrough-operator", auth="open")
        async with httpx.AsyncClient(base_url=operator, timeout=30) as client:
            rollback = await client.post(
                f"/api/mutations/{live['mutation_id']}/rollback",
                json={"reason": "the seed walkthrough starts without it"},
            )
            assert rollback.status_code in (200, 202), rollback.text

        async def retired():
            answer = await http.get("/api/traits/energy_hoarder")
            return answer.json()["live"] is None

        await eventually(retired, "the earlier energy_hoarder to be rolled back", timeout_s=60, every_s=0.25)
    code_hash = gatekeeper.validate("energy_hoarder", traits.SEED_EXAMPLE).code_hash
    async with get_sessionmaker(settings.database_url)() as session:
        await session.execute(
            update(Mutation)
            .where(Mutation.code_hash == code_hash, Mutation.holds_code_hash)
            .values(holds_code_hash=False)
        )
        await session.commit()


async def test_seed_walkthrough_over_http(http, settings, engine_proc, start_api, operator_http):
    # 0. An operator publishes a task (the Watcher's job, once it exists).
    published = await operator_http.post("/api/agents/tasks", json=TASK_BODY)
    assert published.status_code == 201, published.text
    task_id = published.json()["task_id"]
    assert re.fullmatch(r"task_[0-9a-f]{12}", task_id)

    # 1. GET /api/agents/context/tasks: the task is there, in the seed's shape.
    async def listed_with_it() -> dict[str, dict]:  # other tests' tasks may be listed before it is
        listed = await listed_tasks(http)
        return listed if task_id in listed else {}

    tasks = await eventually(listed_with_it, "the task to be listed")
    task = tasks[task_id]
    assert set(task) == SEED_TASK_KEYS | {"claimed_by", "claim_lease_remaining_sec"}
    assert isinstance(task["expires_at"], float) and task["expires_at"] > time.time()
    assert isinstance(task["ttl_remaining_sec"], int) and 590 <= task["ttl_remaining_sec"] <= 600  # high: 10 min
    assert task["source"] == "operator"
    assert {key: task[key] for key in TASK_BODY} == TASK_BODY
    assert task["suggested_area"] == "traits"
    assert isinstance(task["world_context"], dict)
    assert set(task["world_context"]) <= {"entity_count", "avg_energy"}  # of the latest snapshot, if any
    assert task["constraints"] and all(isinstance(c, str) and c for c in task["constraints"])
    assert any(
        "math, random, dataclasses, typing, enum, collections, functools, itertools" in c for c in task["constraints"]
    )
    assert task["claimed_by"] is None and task["claim_lease_remaining_sec"] is None

    # 2. GET /api/agents/context/sandbox-api: the rules, seed shape.
    rules = await http.get("/api/agents/context/sandbox-api")
    assert rules.status_code == 200, rules.text
    document = rules.json()
    # One departure (docs/contract.md): loops are bounded by timeout_ms, not by a count
    assert {key: document[key] for key in SEED_SANDBOX_API} == {**SEED_SANDBOX_API, "max_loop_iterations": None}
    assert "loops included" in document["loop_bound"]
    assert isinstance(document["sandbox_rules_version"], str) and document["sandbox_rules_version"].isdigit()
    assert set(document["forbidden_imports"]) >= {"os", "sys", "subprocess", "socket", "shutil", "backend"}
    assert set(document["forbidden_calls"]) >= {"eval", "exec", "compile", "open", "__import__", "print", "globals"}
    assert set(document["forbidden_attrs"]) >= {"__subclasses__", "__globals__", "__code__", "__builtins__", "__dict__"}
    assert set(document["entity_allowed_attrs"]) >= {"x", "y", "energy", "speed", "state", "age", "traits"}
    assert gatekeeper.validate("my_trait", document["example"]).ok  # the example it gives passes the rules

    # 3. Register (the key is the walkthrough's addition), claim the task, propose the seed's example.
    registered = await http.post("/v1/agents/register", json=REGISTER_BODY)
    assert registered.status_code == 201, registered.text
    agent = agents.TestAgent(registered.json()["agent_id"], registered.json()["api_key"], REGISTER_BODY["name"])
    claimed = await http.post(f"/api/agents/tasks/{task_id}/claim", headers=agent.headers)
    assert claimed.status_code == 201, claimed.text
    claim = claimed.json()
    assert claim["task_id"] == task_id and claim["agent_id"] == agent.agent_id and claim["status"] == "claimed"
    assert 0 < claim["lease_sec"] <= settings.task.claim_lease_s
    assert (await listed_tasks(http))[task_id]["claimed_by"] == agent.agent_id

    await start_from_a_world_without_the_seed_example(http, settings, start_api)
    body = {**PROPOSE_BODY, "task_id": task_id}
    proposed = await http.post("/api/mutations/propose", json=body, headers=agent.headers)
    assert proposed.status_code == 202, proposed.text
    accepted = proposed.json()
    assert set(accepted) >= SEED_PROPOSE_KEYS
    mutation_id = accepted["mutation_id"]
    assert re.fullmatch(r"mut_[0-9a-f]{6,}", mutation_id)
    assert accepted["status"] == "queued"
    assert accepted["message"] == "Mutation accepted for validation"
    assert accepted["status_url"] == f"/api/mutations/{mutation_id}/status"

    # 4. GET /api/mutations/{id}/status through the seed's statuses to `activated`.
    seen: list[str] = []
    deadline = time.monotonic() + 120
    while True:
        response = await http.get(f"/api/mutations/{mutation_id}/status")
        assert response.status_code == 200, response.text
        status = response.json()
        if not seen or seen[-1] != status["status"]:
            seen.append(status["status"])
        assert status["status"] in SEED_STATUSES, (seen, status)  # never rejected, never past activated unseen
        if status["status"] == "activated":
            break
        assert time.monotonic() < deadline, f"{mutation_id} never reached activated: {seen}"
        await asyncio.sleep(0.05)
    # Fast steps may fall between two polls, but what was seen is the seed's order.
    assert seen == sorted(seen, key=SEED_STATUSES.index) and seen[-1] == "activated", seen
    assert set(status) >= SEED_STATUS_KEYS
    assert status["mutation_id"] == mutation_id and status["trait_name"] == "energy_hoarder"
    assert status["agent_id"] == agent.agent_id and status["task_id"] == task_id
    assert status["failure_reason_code"] is None
    assert number(status["created_at"]) and number(status["updated_at"])
    assert status["created_at"] <= status["updated_at"] <= time.time() + 1
    log = status["validation_log"]
    assert all(isinstance(line, str) for line in log)
    assert "AST parse: OK" in log and "Deduplication: OK" in log
    assert any(line.startswith("Sandbox: OK") for line in log)
    assert any(line.startswith("Activation: trait_energy_hoarder_v") for line in log)

    # 5. GET /api/mutations/{id}/effects: before the observation window is over (seed, first example)...
    before = (await http.get(f"/api/mutations/{mutation_id}/effects")).json()
    assert {key: before[key] for key in SEED_EFFECTS_KEYS | {"fitness_verdict"}} == {
        "mutation_id": mutation_id,
        "trait_name": "energy_hoarder",
        "status": "activated",
        "observation_window_ticks": settings.observation.window_ticks,
        "observed": False,
        "effects": None,
        "fitness_verdict": None,
    }
    assert before["trait_version"] == status["trait_version"] and before["replaces"] is None  # a new trait
    # The activation of the claimed task's mutation closes the task.
    await eventually(lambda: _absent(http, task_id), "the task to close on activation")

    # ... and after it (seed, second example). The verdict then moves the status on: kept, or
    # rolled_back when it was negative (Genesis' statuses after `activated`).
    async def judged():
        answer = (await http.get(f"/api/mutations/{mutation_id}/effects")).json()
        return answer if answer["observed"] else None

    after = await eventually(judged, "the observation window to be judged", timeout_s=120, every_s=0.25)
    assert set(after) >= SEED_EFFECTS_KEYS | {"fitness_verdict"}
    assert after["mutation_id"] == mutation_id and after["trait_name"] == "energy_hoarder"
    assert after["observation_window_ticks"] == settings.observation.window_ticks and after["observed"] is True
    assert_honest_verdict(after)  # inconclusive when too few Molbots carried it in the window to judge it
    for name, kind in SEED_EFFECT_DELTAS.items():
        assert isinstance(after["effects"][name], kind) and not isinstance(after["effects"][name], bool), (name, after)
    final = (await http.get(f"/api/mutations/{mutation_id}/status")).json()
    assert final["status"] == after["status"] and final["fitness_verdict"] == after["fitness_verdict"]


async def _absent(http, task_id: str) -> bool:
    return task_id not in await listed_tasks(http)


def _documented_walkthrough() -> str:
    text = API_DOC.read_text(encoding="utf-8")
    section = text.split("## Walkthrough: an external agent, step by step", 1)[1]
    return section.split("```bash", 1)[1].split("```", 1)[0]


def test_documented_walkthrough_sends_these_requests():
    """The curl commands of docs/api.md are this test's requests: same paths, same bodies."""
    script = _documented_walkthrough()
    bodies = [
        json.loads(raw.replace("'\"$TASK\"'", TASK_PLACEHOLDER))
        for raw in re.findall(r"-d '(.*?)'(?=\s*(?:\||\\?\n|$))", script, flags=re.S)
    ]
    assert bodies == [TASK_BODY, REGISTER_BODY, PROPOSE_BODY]
    requests = re.findall(r"curl -s (?:-X (\w+) )?localhost:8000(\S+)", script)
    assert [(method or "GET", path) for method, path in requests] == [
        ("POST", "/api/agents/tasks"),
        ("GET", "/api/agents/context/tasks"),
        ("GET", "/api/agents/context/sandbox-api"),
        ("POST", "/v1/agents/register"),
        ("POST", "/api/agents/tasks/$TASK/claim"),
        ("POST", "/api/mutations/propose"),
        ("GET", "/api/mutations/$MUT/status"),
        ("GET", "/api/mutations/$MUT/effects"),
        ("GET", "/v1/agents/me"),
    ]
    assert "X-API-Key: $KEY" in script.split("/claim", 1)[1].split("\n", 1)[0]
