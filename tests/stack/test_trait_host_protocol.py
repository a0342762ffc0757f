"""The trait host's answers to requests it must refuse: every refusal is a reply saying why, and
the host goes on answering (its requests come from the trusted client, but a bug there must not
take every live trait down with the host)."""

from __future__ import annotations

import docker
import pytest

from sandbox import image
from sandbox.container import TraitHostContainer
from tests import trait_hosts


@pytest.fixture
def host():
    client = docker.from_env()
    host = TraitHostContainer(client, image.ensure(client), trait_hosts.LIMITS, "test-protocol")
    yield host
    host.close()
    client.close()


def test_refused_requests_get_replies_and_the_host_goes_on(host):
    before_hello = host.request({"op": "load", "trait": "t", "source": "", "class_name": "T"}, 20)
    assert not before_hello["ok"] and "say hello first" in before_hello["error"]

    not_a_name = host.request({"op": ["hello"]}, 5)
    assert not not_a_name["ok"] and "unknown op" in not_a_name["error"]

    hello = trait_hosts.hello()
    lacking = {**hello, "entity_api": {**hello["entity_api"], "methods": [*hello["entity_api"]["methods"], "fly"]}}
    refused = host.request(lacking, 5)
    assert not refused["ok"] and "fly" in refused["error"]
    after_refusal = host.request({"op": "stats"}, 5)
    assert not after_refusal["ok"] and "say hello first" in after_refusal["error"]

    assert host.request(hello, 20)["ok"]
    unhashable = host.request({"op": {"op": "stats"}}, 5)
    assert not unhashable["ok"] and "unknown op" in unhashable["error"]
    assert host.request({"op": "stats"}, 5)["ok"]
