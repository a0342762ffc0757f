"""The API's conventions, checked on the app and its schema without any service: every list pages
with ``limit`` and ``cursor`` and says so in its schema; cursors refuse what the API did not hand
out; durations are named by their unit (or are a documented exception); the check of unknown
query parameters reads what a route declares, dependencies of including routers too."""

from __future__ import annotations

import base64
import json
import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from fastapi import APIRouter, Depends, FastAPI, Query
from fastapi.testclient import TestClient
from pydantic import BaseModel

from api.app import create_app
from api.errors import ApiError, install_error_handlers
from api.paging import Keyset, moment, number, text, whole
from api.strict_requests import check_declared_inputs
from genesis.config import Settings
from tests.units import DURATION_EXCEPTIONS, UNIT_SUFFIX, duration_name_problem

SCHEMA = create_app(Settings()).openapi()  # built, never started: no service is reached
API_DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
LISTS = [
    "/api/mutations",
    "/api/traits",
    "/api/traits/{trait_name}",
    "/api/agents/context/tasks",
    "/api/agents/tasks",
    "/api/evolution/cycles",
    "/api/feed",
    "/api/schedules",
    "/api/world/entities",
]


def schema_names(node) -> set[str]:
    """Every property and parameter name anywhere in the OpenAPI document."""
    names: set[str] = set()
    if isinstance(node, dict):
        names |= set(node.get("properties", {}))
        if node.get("in") in ("query", "path", "header") and isinstance(node.get("name"), str):
            names.add(node["name"])
        for value in node.values():
            names |= schema_names(value)
    elif isinstance(node, list):
        for value in node:
            names |= schema_names(value)
    return names


def response_schema(operation: dict) -> dict:
    ref = operation["responses"]["200"]["content"]["application/json"]["schema"].get("$ref", "")
    return SCHEMA["components"]["schemas"][ref.rsplit("/", 1)[-1]] if ref else {}


# --- Paging --------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", LISTS)
def test_every_list_takes_limit_and_cursor_and_documents_its_pages(path):
    operation = SCHEMA["paths"][path]["get"]
    params = {p["name"]: p for p in operation["parameters"] if p["in"] == "query"}
    assert {"limit", "cursor"} <= set(params), sorted(params)
    assert params["cursor"]["schema"]["anyOf"][0]["maxLength"] == 512
    assert "Link" in operation["responses"]["200"]["headers"]
    assert "422" in operation["responses"]
    model = response_schema(operation)
    if model:  # the world's entities answer a plain object
        assert "next_cursor" in model["properties"], path


def test_the_task_list_has_both_paths_with_one_answer():
    seed, agents = (SCHEMA["paths"][p]["get"] for p in ("/api/agents/context/tasks", "/api/agents/tasks"))
    assert response_schema(seed) == response_schema(agents)
    assert set(response_schema(seed)["properties"]) == {"tasks", "next_cursor"}
    assert "post" in SCHEMA["paths"]["/api/agents/tasks"]  # publishing stays where it was


KEYSET = Keyset("things", moment, number, whole(2**63), text(r"^[a-z_]{1,20}$"))


def test_a_cursor_gives_back_exactly_the_key_it_was_made_from():
    key = (datetime(2026, 2, 18, 9, 30, 1, 123456, tzinfo=UTC), 1764108312.4, 2**62, "some_name")
    cursor = KEYSET.encode(*key)
    assert re.fullmatch(r"[A-Za-z0-9_-]+", cursor)
    assert KEYSET.decode(cursor) == key
    shifted = datetime(2026, 2, 18, 11, 30, tzinfo=timezone(timedelta(hours=2)))
    assert KEYSET.decode(KEYSET.encode(shifted, 0.0, 0, "a"))[0] == shifted
    assert KEYSET.decode(None) is None


def _forged(*parts) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(parts)).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor, says",
    [
        (_forged("others", "2026-02-18T09:30:00+00:00", 1.0, 1, "a"), "a cursor of another list; this one is things"),
        (_forged("things", "2026-02-18T09:30:00+00:00", 1.0, 1), "not a cursor this API handed out"),
        (_forged("things", "2026-02-18T09:30:00", 1.0, 1, "a"), "not a cursor"),  # a time without its zone
        (_forged("things", "2026-02-18T09:30:00+00:00", "1", 1, "a"), "not a cursor"),
        (_forged("things", "2026-02-18T09:30:00+00:00", 1.0, True, "a"), "not a cursor"),
        (_forged("things", "2026-02-18T09:30:00+00:00", 1.0, -1, "a"), "not a cursor"),
        (_forged("things", "2026-02-18T09:30:00+00:00", 1.0, 1, "A'; DROP"), "not a cursor"),
        (_forged("things", "2026-02-18T09:30:00+00:00", 1.0, 1, "a\n"), "not a cursor"),
        (_forged("things", "0001-01-01T00:00:00+05:00", 1.0, 1, "a"), "not a cursor"),
        (_forged("things", "2026-02-18T09:30:00+00:00", 1.0, 2**63, "a"), "not a cursor"),
        (base64.urlsafe_b64encode(b'["things", NaN, 1, 1, "a"]').decode().rstrip("="), "not a cursor"),
        (_forged({"things": 1}), "not a cursor"),
        ("not base64!", "not a cursor"),
        ("AAAA", "not a cursor"),
        ("", "not a cursor"),
    ],
    ids=[
        "other-list",
        "short",
        "naive-time",
        "string-number",
        "bool-integer",
        "negative",
        "bad-name",
        "newline",
        "before-year-1-in-utc",
        "too-large",
        "nan",
        "object",
        "alphabet",
        "binary",
        "empty",
    ],
)
def test_a_cursor_the_api_did_not_hand_out_is_a_422(cursor, says):
    with pytest.raises(ApiError) as refused:
        KEYSET.decode(cursor)
    assert refused.value.status_code == 422 and refused.value.error == "VALIDATION_ERROR"
    assert refused.value.extra["errors"][0]["field"] == "query.cursor"
    assert (
        says in refused.value.detail and "pass the next_cursor of the previous page unchanged" in refused.value.detail
    )


# --- Units ---------------------------------------------------------------------------------------


def test_durations_in_the_schema_end_in_their_unit_and_are_documented():
    names = schema_names(SCHEMA)
    assert not [problem for name in sorted(names) if (problem := duration_name_problem(name))]
    units = API_DOC.read_text(encoding="utf-8").split("## Units", 1)[1].split("\n## ", 1)[0]
    durations = sorted(name for name in names if UNIT_SUFFIX.search(name) or name in DURATION_EXCEPTIONS)
    assert durations, "no duration found: the schema walk is broken"
    documented = set(re.findall(r"`(?:[a-z_]+\.)?([a-z_]+)`", units))
    assert [name for name in durations if name not in documented] == []
    assert documented >= DURATION_EXCEPTIONS


@pytest.mark.parametrize(
    "name, problem",
    [
        ("timeout_s", True),
        ("lease_seconds", True),
        ("wait_time", True),
        ("latency", True),
        ("lease_sec", False),
        ("latency_ms", False),
        ("observation_window_ticks", False),
        ("lease_expires_at", False),
        ("ticks_per_second", False),
        ("per_ip_minute_limit", False),
    ],
)
def test_the_duration_rule_tells_names_apart(name, problem):
    assert (duration_name_problem(name) is not None) == problem


# --- Unknown query parameters and bodies ---------------------------------------------------------


class Body(BaseModel):
    name: str


def small_app() -> TestClient:
    """An app with the check: a route in a router included with a dependency that has a query
    parameter of its own, and a route outside the schema."""

    def region(region: str = Query("eu")) -> str:
        return region

    app = FastAPI(dependencies=[Depends(check_declared_inputs)])
    install_error_handlers(app)
    router = APIRouter(prefix="/things")

    @router.get("")
    async def things(limit: int = 10, order: str = Query("id", alias="sort")) -> dict:
        return {"limit": limit, "sort": order}

    @router.post("")
    async def make(body: Body) -> dict:
        return {"made": body.name}

    async def page() -> dict:
        return {}

    app.include_router(router, dependencies=[Depends(region)])
    app.add_api_route("/page", page, include_in_schema=False)
    return TestClient(app)


def test_declared_parameters_pass_undeclared_ones_are_named():
    client = small_app()
    ok = client.get("/things", params={"limit": 3, "sort": "name", "region": "us"})  # the router's, the alias
    assert ok.status_code == 200 and ok.json() == {"limit": 3, "sort": "name"}, ok.text
    refused = client.get("/things", params={"order": "name", "x" * 100: "1"})  # the python name is not the alias
    assert refused.status_code == 422, refused.text
    body = refused.json()
    assert body["accepted_parameters"] == ["limit", "region", "sort"]
    assert [e["field"] for e in body["errors"]] == ["query.order", "query." + "x" * 64 + "…"]
    assert body["detail"].endswith("this endpoint accepts limit, region, sort")
    many = client.get("/things", params={f"p{n:02d}": 1 for n in range(15)})
    assert len(many.json()["errors"]) == 10 and "(and 5 more)" in many.json()["detail"]
    assert client.get("/page", params={"anything": "1"}).status_code == 200


def test_a_body_without_a_json_content_type_is_a_415_and_json_ones_pass():
    client = small_app()
    for content_type in ("application/json", "application/json; charset=utf-8", "application/vnd.things+json"):
        made = client.post("/things", content=b'{"name": "a"}', headers={"Content-Type": content_type})
        assert made.status_code == 200, (content_type, made.text)
    bare = client.post("/things", content=b'{"name": "a"}')
    assert bare.status_code == 415 and bare.json()["error"] == "UNSUPPORTED_MEDIA_TYPE", bare.text
    assert bare.json()["detail"].endswith("the request has no Content-Type header")
    form = client.post("/things", content=b"name=a", headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert form.status_code == 415 and "curl -d" in form.json()["detail"]
    empty = client.post("/things", content=b"", headers={"Content-Type": "text/plain"})
    assert empty.status_code == 422 and empty.json()["error"] == "INVALID_BODY", empty.text  # said as before
