"""Bad input gets a clear 4xx that says what is wrong, and nothing half-written is left behind."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from sqlalchemy import func, select

from cli.processes import api_process, free_port, wait_for_api
from genesis.db.models import Mutation
from genesis.db.session import get_sessionmaker
from tests import traits

VALID = {"agent_id": "bad-input-tester", "trait_name": "energy_hoarder", "goal": "g", "code": traits.SEED_EXAMPLE}


async def mutation_count(settings) -> int:
    async with get_sessionmaker(settings.database_url)() as session:
        return await session.scalar(select(func.count()).select_from(Mutation))


@pytest.mark.parametrize(
    "body, status, error, needle",
    [
        (b'{"agent_id": "a", "trait_name": ', 400, "INVALID_JSON", "not valid JSON"),
        (b"[1, 2, 3]", 422, "INVALID_BODY", "JSON object"),
        (
            '{"agent_id": "a", "trait_name": "t", "code": "caf\xe9"}'.encode("latin-1"),
            400,
            "INVALID_JSON",
            "not valid JSON",
        ),
    ],
    ids=["malformed-json", "not-an-object", "non-utf8"],
)
async def test_unparseable_bodies(http, settings, body, status, error, needle):
    before = await mutation_count(settings)
    response = await http.post("/api/mutations/propose", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == status, response.text
    assert response.json()["error"] == error
    assert needle in response.json()["detail"]
    assert await mutation_count(settings) == before


@pytest.mark.parametrize(
    "change, field, needle",
    [
        ({"code": None}, "code", "valid string"),
        ({"trait_name": None}, "trait_name", "valid string"),
        ({"agent_id": 42}, "agent_id", "valid string"),
        ({"code": ""}, "code", "empty"),
        ({"code": "   \n\t "}, "code", "whitespace"),
        ({"code": "x = 1\n" * 6000}, "code", "limit is 32,768"),
        ({"trait_name": "EnergyHoarder"}, "trait_name", "snake_case"),
        ({"trait_name": "energy-hoarder"}, "trait_name", "snake_case"),
        ({"trait_name": "1st"}, "trait_name", "snake_case"),
        ({"agent_id": ""}, "agent_id", "agent_id must be"),
        ({"task_id": "bad id!"}, "task_id", "task_id must be"),
        ({"surprise": 1}, "surprise", "unknown field"),
    ],
    ids=[
        "code-null",
        "name-null",
        "agent-int",
        "code-empty",
        "code-blank",
        "code-too-large",
        "name-camel",
        "name-dash",
        "name-digit",
        "agent-empty",
        "task-bad",
        "extra-field",
    ],
)
async def test_invalid_fields_are_named(http, settings, change, field, needle):
    before = await mutation_count(settings)
    body = {**VALID, **change}
    response = await http.post("/api/mutations/propose", json=body)
    assert response.status_code == 422, response.text
    payload = response.json()
    assert payload["error"] == "VALIDATION_ERROR"
    assert any(e["field"] == field for e in payload["errors"]), payload
    assert needle in payload["detail"], payload
    assert await mutation_count(settings) == before


async def test_missing_fields_are_listed(http):
    response = await http.post("/api/mutations/propose", json={"agent_id": "a"})
    assert response.status_code == 422
    fields = {e["field"] for e in response.json()["errors"]}
    assert fields == {"trait_name", "code"}
    assert "field required" in response.json()["detail"]


async def test_oversized_body_is_refused_before_parsing(http, settings):
    before = await mutation_count(settings)
    response = await http.post("/api/mutations/propose", json={**VALID, "code": "#" * 200_000})
    assert response.status_code == 413
    assert response.json()["error"] == "PAYLOAD_TOO_LARGE"
    assert await mutation_count(settings) == before


@pytest.mark.parametrize("mutation_id", ["mut_000000", "mut_deadbeef0000"])
async def test_unknown_mutation_is_404(http, mutation_id):
    response = await http.get(f"/api/mutations/{mutation_id}/status")
    assert response.status_code == 404
    assert response.json()["error"] == "MUTATION_NOT_FOUND"
    assert mutation_id in response.json()["detail"]


@pytest.mark.parametrize("mutation_id", ["not-an-id", "mut_ZZZ", "mut_" + "0" * 33])
async def test_malformed_mutation_id_is_422(http, mutation_id):
    response = await http.get(f"/api/mutations/{mutation_id}/status")
    assert response.status_code == 422, response.text
    assert response.json()["errors"] == [
        {"field": "path.mutation_id", "message": "mutation_id must be 'mut_' followed by 6-32 hex digits"}
    ]


async def test_sandbox_api_document(http):
    response = await http.get("/api/agents/context/sandbox-api")
    assert response.status_code == 200
    doc = response.json()
    assert doc["sandbox_rules_version"] == "6" and doc["timeout_ms"] == 5
    assert "energy_consumption_rate" in doc["entity_allowed_attrs"]
    assert "os" in doc["forbidden_imports"] and "math" in doc["allowed_imports"]


async def test_health_reports_each_dependency(http):
    response = await http.get("/api/health")
    assert response.status_code == 200, response.text
    deps = response.json()["dependencies"]
    assert set(deps) == {"postgres", "redis", "temporal", "worker"}
    assert all(d["status"] == "ok" for d in deps.values()), deps
    assert deps["worker"]["pollers"] >= 1
    root = await http.get("/health")  # the GEPA spec's path: the same answer
    assert root.status_code == 200 and set(root.json()["dependencies"]) == set(deps)


async def test_health_names_a_down_dependency_without_its_message(settings, worker):
    """Postgres with a database that does not exist, Redis and Temporal on a closed port: each is
    down, and the answer says only which and the kind of failure; the exceptions (database name,
    addresses) are in the API's log."""
    secret_db = "genesis_health_secret_db"
    closed = free_port()
    broken = settings.override(
        api_port=free_port(),
        database_url=settings.database_url.rsplit("/", 1)[0] + f"/{secret_db}",
        redis_url=f"redis://127.0.0.1:{closed}/0",
        temporal_address=f"127.0.0.1:{closed}",
    )
    process = api_process(broken, "api-health-down")
    process.start()
    try:
        url = await asyncio.to_thread(wait_for_api, process)
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            response = await client.get("/api/health")
    finally:
        process.stop()
    assert response.status_code == 503, response.text
    body = response.json()
    assert body["status"] == "degraded" and set(body["dependencies"]) == {"postgres", "redis", "temporal", "worker"}
    assert all(d["status"] == "down" for d in body["dependencies"].values()), body
    for name in ("postgres", "redis"):
        error = body["dependencies"][name]["error"]
        assert error.startswith("not reachable: ") and error.endswith("(the API's log has the details)"), error
    assert body["dependencies"]["postgres"]["error"].startswith("not reachable: InvalidCatalogNameError"), body
    assert body["dependencies"]["redis"]["error"].startswith("not reachable: ConnectionError"), body
    for leak in (secret_db, str(closed), "127.0.0.1", "does not exist", "Connection refused"):
        assert leak not in response.text, (leak, body)
    logged = process.log_path.read_text(errors="replace")
    assert secret_db in logged and "health: postgres is down" in logged, "the log keeps what the answer leaves out"


@pytest.mark.parametrize(
    "after",
    [
        "yesterday",
        "<script>alert(1)</script>",
        "1-2-3",
        "-1-0",
        "1-",
        "0x10-0",
        " 1-0",
        "1-0 ",
        "99999999999999999999-0",
        "18446744073709551616-0",
        "0-18446744073709551616",
        "18446744073709551615-18446744073709551615",
        "\u0661-\u0661",
        "\uff11-0",
        "1" * 5000 + "-0",
        "'\"%00",
    ],
)
async def test_feed_after_is_checked_without_echoing_it(http, after):
    response = await http.get("/api/feed", params={"after": after})
    assert response.status_code == 422, (after[:40], response.text[:300])
    body = response.json()
    assert body["error"] == "VALIDATION_ERROR" and body["errors"][0]["field"] == "query.after", body
    assert "must be a stream id <milliseconds>-<sequence>" in body["detail"] and "below 2^64" in body["detail"]
    assert after not in response.text and "script" not in response.text


async def test_feed_after_takes_the_largest_ids(http):
    for after in (
        "0-0",
        "18446744073709551615-0",
        "0-18446744073709551615",
        "18446744073709551615-18446744073709551614",
    ):
        response = await http.get("/api/feed", params={"after": after})
        assert response.status_code == 200, (after, response.text)
        assert response.json()["last_id"] == after or response.json()["messages"], response.text


async def test_openapi_docs_are_served(http):
    assert (await http.get("/docs")).status_code == 200
    spec = (await http.get("/openapi.json")).json()
    assert "/api/mutations/propose" in spec["paths"]
