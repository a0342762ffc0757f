"""Every request body of the API comes with examples in /openapi.json (what /docs and /redoc show
as ready-to-send requests), and every example is a request the API accepts: it validates against
the body's own model (a batch's proposals each as a single proposal), its trait passes the
gatekeeper, and the ids a route checks beyond its model are well formed."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter

import gatekeeper
from api.app import create_app
from api.mutations.schemas import BatchProposeItem
from evolution import schedules
from gatekeeper.actions import validate_action
from genesis.config import Settings
from tests.api_routes import http_routes

APP = create_app(Settings())  # built, never started: no service is reached
SCHEMA = APP.openapi()
WRITE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
BODY_ROUTES = [
    (method, path, route)
    for method, path, route in http_routes(APP)
    if method in WRITE_METHODS and route.body_field is not None
]
ROUTE_IDS = [f"{method} {path}" for method, path, _ in BODY_ROUTES]


def documented_examples(method: str, path: str) -> list[Any]:
    """The examples of the operation's request body schema, as /openapi.json serves them."""
    schema = SCHEMA["paths"][path][method.lower()]["requestBody"]["content"]["application/json"]["schema"]
    for candidate in [schema, *schema.get("anyOf", [])]:  # an optional body is anyOf [model, null]
        if "$ref" in candidate:
            return SCHEMA["components"]["schemas"][candidate["$ref"].rsplit("/", 1)[-1]].get("examples", [])
    return schema.get("examples", [])


def proposals_in(example: dict[str, Any]) -> list[dict[str, Any]]:
    """The trait proposals of an example (an agent's round action is code but no trait)."""
    return example.get("proposals", [example] if "code" in example and "trait_name" in example else [])


def test_the_write_endpoints_are_all_found():
    assert len(BODY_ROUTES) >= 11, ROUTE_IDS
    assert {"POST /api/mutations/propose", "POST /api/mutations/propose/batch", "POST /execute_step"} <= set(ROUTE_IDS)


@pytest.mark.parametrize(("method", "path", "route"), BODY_ROUTES, ids=ROUTE_IDS)
def test_every_request_body_has_examples_that_validate(method, path, route):
    examples = documented_examples(method, path)
    assert examples, f"{method} {path}: add json_schema_extra examples to its request model"
    body = TypeAdapter(route.body_field.field_info.annotation)
    for example in examples:
        body.validate_python(example)  # raises with the field and the reason
        for proposal in proposals_in(example):
            BatchProposeItem.model_validate(proposal)  # what the batch route checks per item


@pytest.mark.parametrize(("method", "path", "route"), BODY_ROUTES, ids=ROUTE_IDS)
def test_example_traits_pass_the_gatekeeper(method, path, route):
    for example in documented_examples(method, path):
        hashes = set()
        for proposal in proposals_in(example):
            result = gatekeeper.validate(proposal["trait_name"], proposal["code"])
            assert result.ok, (proposal["trait_name"], result.failure_code, result.validation_log)
            hashes.add(result.code_hash)
        assert len(hashes) == len(proposals_in(example)), "the same code twice in one batch: DUPLICATE_CODE"


def test_example_actions_pass_the_action_gatekeeper():
    for example in documented_examples("POST", "/v1/world/actions"):
        result = validate_action(example["code"])
        assert result.ok, result.validation_log


def test_ids_the_routes_check_are_well_formed():
    for example in documented_examples("POST", "/api/schedules"):
        schedules.check_id(example["schedule_id"])
    assert proposals_in(documented_examples("POST", "/api/mutations/propose")[0])
