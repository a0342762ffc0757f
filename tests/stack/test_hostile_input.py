"""Hostile path and query values against every HTTP route of the app (walked from app.routes, so a
new route is covered without touching this file), on the session's real API process: no answer is
a 5xx, and none shows internals (SQL, tracebacks, driver names, file paths). Bodies: an integer too
long to convert and duplicate keys are precise 422s."""

from __future__ import annotations

import json
import re
import time
from urllib.parse import quote

import httpx
import pytest

from api.app import create_app
from genesis.config import PROJECT_ROOT
from genesis.redis_keys import ENGINE_STATUS
from tests import agents
from tests.api_routes import http_routes
from tests.evolution_worlds import BASE, write_snapshots

# Each as it goes into the URL: quoted here, except the ones that are already escapes on purpose.
HOSTILE = [
    quote("\x00", safe=""),
    "%00",
    "a%00b",
    quote("x" * 5000, safe=""),
    quote("ünï€ødé😀\u202e", safe=""),
    "..%2F..%2Fetc%2Fpasswd",
    quote("../", safe=""),
    "-1",
    "0",
    "99999999999999999999999999",
    "1e309",
    "NaN",
    quote("' OR 1=1 --", safe=""),
    "%ff%fe",
    quote("\r\nX-Injected: 1", safe=""),
    quote("<script>", safe=""),
    "%25",
    "%",
    quote(" ", safe=""),
]
INTERNALS = re.compile(
    r"SELECT |INSERT |UPDATE |Traceback|sqlalchemy|asyncpg|psycopg|File \"|site-packages|\.py\b|"
    + re.escape(str(PROJECT_ROOT))
    + r"|/usr/lib/|redis\.exceptions|temporalio\.",
    re.IGNORECASE,
)
BENIGN_PATH = {
    "mutation_id": "mut_0123456789ab",
    "task_id": "task_hostile",
    "trigger_id": "trg_0123456789ab",
    "schedule_id": "hostile-probe",
    "trait_name": "hostile_probe",
    "program_id": "p001",
}
# Routes whose answer is not about the request (streams of the world's state): a hostile unknown
# query parameter still goes to them, like to every route.
SKIP = set()


def _filled(path: str, values: dict[str, str]) -> str:
    """``path`` with each ``{name}`` (or ``{name:converter}``) replaced by ``values[name]``."""
    return re.sub(r"{(\w+)(?::\w+)?}", lambda m: values[m.group(1)], path)


def requests_for(settings) -> list[tuple[str, str, dict[str, str]]]:
    """(method, url, query) for every hostile value in every path and query parameter of every route."""
    out = []
    for method, path, route in http_routes(create_app(settings)):
        if (method, path) in SKIP or method == "HEAD":
            continue
        names = re.findall(r"{(\w+)(?::\w+)?}", path)
        base = {name: BENIGN_PATH.get(name, "probe") for name in names}
        for value in HOSTILE:
            for name in names:
                out.append((method, _filled(path, {**base, name: value}), {}))
            for param in [p.alias for p in route.dependant.query_params] or ["unexpected"]:
                out.append((method, _filled(path, base), {param: value}))
    return out


def leaked(text: str) -> str | None:
    match = INTERNALS.search(text)
    return match.group(0) if match else None


@pytest.fixture
async def live_world(redis_client, settings):
    """Snapshots and an engine status, so the world's endpoints answer as in a running world
    (their 503 NO_SNAPSHOT / ENGINE_NOT_RUNNING otherwise is the world's state, not the input's)."""
    saved = await redis_client.hgetall(ENGINE_STATUS)
    await write_snapshots(redis_client, settings.engine.snapshot_interval, {}, BASE)
    await redis_client.hset(ENGINE_STATUS, mapping={"tick": "10", "population": "5", "updated_at": str(time.time())})
    yield
    await redis_client.delete(ENGINE_STATUS)
    if saved:
        await redis_client.hset(ENGINE_STATUS, mapping=saved)


async def test_hostile_paths_and_queries_get_no_5xx_and_no_internals(api_url, http, settings, live_world):
    agent = await agents.agent(http, "hostile-input")
    operator = await agents.operator(settings, "hostile-input-operator")
    headers = {**agent.headers, **operator.headers}
    problems = []
    sent = 0
    async with httpx.AsyncClient(base_url=api_url, timeout=30, headers=headers) as client:
        for method, url, query in requests_for(settings):
            # The query is put in the URL as given (already escaped), so NUL and broken escapes
            # reach the server as the attacker sends them.
            target = url + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")
            response = await client.request(method, target, json={} if method in ("POST", "PUT", "DELETE") else None)
            sent += 1
            what = f"{method} {target[:120]}"
            if response.status_code >= 500:
                problems.append(f"{what}: {response.status_code} {response.text[:300]}")
            elif (found := leaked(response.text)) is not None and response.status_code >= 400:
                problems.append(f"{what}: {response.status_code} shows {found!r}: {response.text[:300]}")
    assert sent > 500, sent
    assert not problems, "\n".join(problems[:40]) + f"\n({len(problems)} problems in {sent} requests)"


async def test_invalid_path_parameters_are_422(http):
    for url in (
        "/api/evolution/cycles/%00",
        "/api/mutations/not-an-id/status",
        "/api/mutations/%00/effects",
        "/api/agents/context/tasks?limit=%00",
        f"/api/traits/{'x' * 5000}",
    ):
        response = await http.get(url)
        assert response.status_code == 422, (url, response.text)
        body = response.json()
        assert body["error"] == "VALIDATION_ERROR" and body["errors"], body
        assert leaked(response.text) is None, response.text
    response = await http.get("/api/evolution/cycles/%00")
    assert response.json()["errors"][0]["field"] in ("trigger_id", "path"), response.text


@pytest.mark.parametrize("path", ["/api/mutations/propose", "/v1/agents/register"])
async def test_a_huge_integer_in_a_body_is_a_precise_422(http, path):
    body = (
        '{"trait_name": "big_int", "code": "x", "name": "n", "replaces": {"trait_name": "big_int", "version": '
        + "9" * 5000
        + "}}"
    )
    response = await http.post(
        path, content=body, headers={"Content-Type": "application/json", **await agents.headers(http)}
    )
    assert response.status_code == 422, response.text
    payload = response.json()
    assert payload["error"] == "INVALID_JSON_NUMBER", payload
    assert "5,000 digits" in payload["detail"] and "at most" in payload["detail"], payload
    assert "UTF-8" not in payload["detail"]


@pytest.mark.parametrize("path", ["/api/mutations/propose", "/v1/agents/register"])
async def test_duplicate_keys_in_a_body_are_a_precise_422(http, path):
    body = '{"name": "first", "name": "second", "trait_name": "t", "code": "x"}'
    response = await http.post(
        path, content=body, headers={"Content-Type": "application/json", **await agents.headers(http)}
    )
    assert response.status_code == 422, response.text
    payload = response.json()
    assert payload["error"] == "DUPLICATE_JSON_KEY", payload
    assert "'name'" in payload["detail"] and "more than once" in payload["detail"], payload
    nested = '{"trait_name": "t", "code": "x", "replaces": {"trait_name": "t", "trait_name": "u"}}'
    response = await http.post(
        path, content=nested, headers={"Content-Type": "application/json", **await agents.headers(http)}
    )
    assert response.status_code == 422 and response.json()["error"] == "DUPLICATE_JSON_KEY", response.text
    assert "replaces.trait_name" in response.json()["detail"]
    # Equal keys after JSON unescaping are the same key.
    escaped = '{"name": "a", "n\\u0061me": "b"}'
    response = await http.post(path, content=escaped, headers={"Content-Type": "application/json"})
    assert response.status_code == 422 and response.json()["error"] == "DUPLICATE_JSON_KEY", response.text
    assert json.loads('{"a": 1}') == {"a": 1}


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 40_000 + b"]" * 40_000,
        b'{"a":' * 5_000 + b"1" + b"}" * 5_000,
        b'{"a":' * 5_000 + b'{"k": 1, "k": 2}' + b"}" * 5_000,
    ],
    ids=["arrays", "objects", "duplicate-inside"],
)
async def test_too_deep_a_body_is_a_precise_422(http, body):
    response = await http.post(
        "/api/mutations/propose",
        content=body,
        headers={"Content-Type": "application/json", **await agents.headers(http)},
    )
    assert response.status_code == 422, response.text
    assert response.json()["error"] == "JSON_TOO_DEEP" and "nested too deeply" in response.json()["detail"]
