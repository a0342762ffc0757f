"""POST /connect-git cannot make the server reach the machines next to it: repository hosts and
egress_allow entries that are (in any spelling) or resolve to loopback, private, link-local or
metadata addresses are refused with the reason, before anything is recorded or cloned; the GEPA
stack's own loopback servers pass only because the operator's allow-list names each of them.
A clone of a port that accepts connections and never answers fails within seconds, with the
same message as any other failed clone."""

from __future__ import annotations

import socket
import time

import pytest
from sqlalchemy import func, select

from genesis.db.models import GepaClient
from genesis.db.session import get_engine
from gepa_steps import gitops
from tests.netpolicy_servers import Silent

REFUSED_HOSTS = {
    "127.0.0.1": "127.0.0.1 is a loopback address",
    "2130706433": "127.0.0.1 is a loopback address",
    "127.1": "127.0.0.1 is a loopback address",
    "0x7f.1": "127.0.0.1 is a loopback address",
    "0177.0.0.1": "127.0.0.1 is a loopback address",
    "[::1]": "::1 is a loopback address",
    "[::ffff:127.0.0.1]": "(it stands for 127.0.0.1)",
    "10.0.0.1": "10.0.0.1 is a private address",
    "172.17.0.1": "172.17.0.1 is a private address",  # the Docker bridge
    "192.168.1.10": "192.168.1.10 is a private address",
    "169.254.169.254": "169.254.169.254 is a cloud metadata address",
    "[fe80::1]": "fe80::1 is a link-local address",
    "localhost": "localhost is a loopback name",
}


async def _clients(settings) -> int:
    async with get_engine(settings.database_url).connect() as conn:
        return (await conn.execute(select(func.count()).select_from(GepaClient))).scalar_one()


async def test_repository_hosts_that_are_private_are_refused(gepa_stack, gepa_http):
    before = await _clients(gepa_stack.settings)
    github_port = gepa_stack.github.server.server_address[1]
    refused = {f"https://{host}/acme/qa.git": why for host, why in REFUSED_HOSTS.items()}
    # The fake GitHub is allowed on its own port only.
    refused[f"http://127.0.0.1:{github_port + 1}/acme/private-qa.git"] = "127.0.0.1 is a loopback address"
    refused[f"http://2130706433:{github_port + 1}/acme/private-qa.git"] = "127.0.0.1 is a loopback address"
    for url, why in refused.items():
        response = await gepa_http.post("/connect-git", json={"repo_url": url})
        assert response.status_code == 422, (url, response.text)
        body = response.json()
        assert body["error"] == "VALIDATION_ERROR" and body["errors"][0]["field"] == "repo_url", url
        assert why in body["detail"] and "GENESIS_OUTBOUND_PRIVATE_ALLOW" in body["detail"], (url, body["detail"])
    assert await _clients(gepa_stack.settings) == before  # nothing recorded, nothing cloned


async def test_a_name_that_resolves_to_a_private_address_is_refused(gepa_stack, gepa_http):
    hostname = socket.gethostname()
    try:
        socket.getaddrinfo(hostname, 443)
    except OSError:
        pytest.skip(f"this machine's name {hostname!r} does not resolve here")
    response = await gepa_http.post("/connect-git", json={"repo_url": f"https://{hostname}/acme/qa.git"})
    assert response.status_code == 422 and f"{hostname} (" in response.json()["detail"], response.text
    entry = await gepa_http.post(
        "/connect-git", json={"repo_url": str(gepa_stack.repo), "egress_allow": [f"{hostname}:6379"]}
    )
    assert entry.status_code == 422 and f"{hostname} (" in entry.json()["detail"], entry.text


async def test_egress_allow_entries_that_are_private_are_refused(gepa_stack, gepa_http):
    for host, why in {**REFUSED_HOSTS, "100.64.0.1": "shared (carrier-grade NAT)"}.items():
        for port in (6379, 5432, 7233):  # Redis, Postgres, Temporal
            response = await gepa_http.post(
                "/connect-git", json={"repo_url": str(gepa_stack.repo), "egress_allow": [f"{host}:{port}"]}
            )
            assert response.status_code == 422, (host, response.text)
            body = response.json()
            assert body["errors"][0]["field"] == "egress_allow" and why in body["detail"], (host, body["detail"])
    # The operator's allow-list names this one: the client may list it (in any spelling).
    allowed = f"0x7f.1:{gepa_stack.allowed[1]}"
    response = await gepa_http.post("/connect-git", json={"repo_url": str(gepa_stack.repo), "egress_allow": [allowed]})
    assert response.status_code == 201, response.text
    assert response.json()["egress_allow"] == [f"127.0.0.1:{gepa_stack.allowed[1]}"]


@pytest.mark.parametrize("scheme", ["https", "http"])
async def test_a_silent_repository_host_fails_the_clone_within_seconds(gepa_stack, gepa_http, scheme):
    """The silent server's port is on the operator's allow-list (so the clone is attempted): the
    connection is accepted and never answered, as a Redis port answers a TLS hello."""
    silent = Silent(gepa_stack.silent_port)
    url = f"{scheme}://127.0.0.1:{gepa_stack.silent_port}/acme/qa.git"
    started = time.monotonic()
    try:
        response = await gepa_http.post("/connect-git", json={"repo_url": url})
    finally:
        silent.close()
    elapsed = time.monotonic() - started
    assert response.status_code == 422 and response.json()["error"] == "CLONE_FAILED", response.text
    assert response.json()["detail"] == f"cloning {url} failed: {gitops.CLONE_FAILED}"
    assert elapsed < 15, elapsed
