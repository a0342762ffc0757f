"""Private repositories through a GitHub App: /connect-git with an installation_id fetches an
installation token (App JWT, RS256) from GitHub's API and clones with it; the token is stored
nowhere (not in the remote URL, .git, the worker's log) and a refusal is a clear error.
GitHub is a real local HTTP server (tests/fake_github.py) running git's own http-backend.

Nobody acts for the operator: an installation is used only by the agents the operator granted
it, only for a repository on the App's host whose owner is the installation's account, with a
token that reads that one repository and goes to no other host."""

from __future__ import annotations

import base64
import subprocess

import httpx
import pytest

from cli.processes import LOG_DIR
from gepa_steps import gitops
from gepa_steps.github_app import GitHubApp
from tests import agents
from tests.gepa_requests import step
from tests.gepa_stack import GITHUB_INSTALLATION_ID, GITHUB_UNKNOWN_INSTALLATION_ID


def files_containing(root, secret: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def basic(token: str) -> str:
    return "Basic " + base64.b64encode(f"x-access-token:{token}".encode()).decode()


def assert_no_token_in(response: httpx.Response, tokens: list[str]) -> None:
    assert "ghs_" not in response.text and not any(token in response.text for token in tokens)


async def test_a_private_repository_is_cloned_with_a_token_that_is_kept_nowhere(gepa_stack, gepa_http):
    github = gepa_stack.github
    url = f"{github.url}/acme/private-qa.git"
    response = await gepa_http.post("/connect-git", json={"repo_url": url, "installation_id": GITHUB_INSTALLATION_ID})
    assert response.status_code == 201, response.text
    client_id = response.json()["client_id"]
    token = github.tokens[-1]
    # The token was asked for this one repository, read-only, after GitHub named the account.
    assert github.token_requests[-1] == {
        "installation": str(GITHUB_INSTALLATION_ID),
        "body": {"repositories": ["private-qa"], "permissions": {"contents": "read"}},
    }
    # git authenticated with the installation token (HTTP Basic), never in a URL.
    assert any(r["authorization"] == basic(token) and r["path"].endswith("git-upload-pack") for r in github.requests)
    assert not any(token in r["path"] for r in github.requests)
    clone = gepa_stack.clone_of(client_id)
    remote = subprocess.run(
        ["git", "remote", "get-url", "origin"], cwd=clone, capture_output=True, text=True, check=True
    )
    assert remote.stdout.strip() == url
    assert files_containing(clone / ".git", token) == []
    assert token not in (LOG_DIR / "worker-gepa.log").read_text(errors="replace")
    result = (await gepa_http.post("/execute_step", json=step(client_id, "private1"))).json()
    assert result["status"] == "success", result


async def test_refused_tokens_and_unauthenticated_clones_fail_clearly(gepa_stack, gepa_http):
    github = gepa_stack.github
    url = f"{github.url}/acme/private-qa.git"
    refused = await gepa_http.post(
        "/connect-git", json={"repo_url": url, "installation_id": GITHUB_UNKNOWN_INSTALLATION_ID}
    )
    assert refused.status_code == 422 and refused.json()["error"] == "INSTALLATION_NOT_FOUND", refused.text
    assert refused.json()["detail"] == (
        f"installation {GITHUB_UNKNOWN_INSTALLATION_ID} is not an installation of this server's GitHub App"
    )
    anonymous = await gepa_http.post("/connect-git", json={"repo_url": url})
    assert anonymous.status_code == 422 and anonymous.json()["error"] == "CLONE_FAILED"
    assert f"cloning {url} failed" in anonymous.json()["detail"]
    step_for_failed = await gepa_http.post("/execute_step", json=step(anonymous.json()["client_id"], "never"))
    assert step_for_failed.status_code == 404 and step_for_failed.json()["status"] == "failed"


async def test_an_installation_is_used_only_for_a_repository_on_the_github_host(gepa_stack, gepa_http):
    github, elsewhere = gepa_stack.github, gepa_stack.elsewhere
    token_requests, seen_elsewhere = len(github.token_requests), len(elsewhere.requests)
    for url in (
        f"{elsewhere.url}/acme/private-qa.git",  # another host (on the private allow-list)
        f"http://localhost:{github.server.server_address[1]}/acme/private-qa.git",  # another name for it
        f"{github.url}/acme/private-qa.git/extra",  # not <owner>/<repository>
        f"{github.url}/acme/..",
        str(gepa_stack.repo),
    ):  # a local path
        response = await gepa_http.post(
            "/connect-git", json={"repo_url": url, "installation_id": GITHUB_INSTALLATION_ID}
        )
        assert response.status_code == 422, (url, response.text)
        body = response.json()
        assert body["error"] == "VALIDATION_ERROR" and body["errors"][0]["field"] == "repo_url", (url, body)
        assert body["detail"] == (
            f"repo_url: with installation_id, repo_url must be a repository on the GitHub App's "
            f"host, {github.url}/<owner>/<repository>: the installation's token goes nowhere else"
        )
    assert len(github.token_requests) == token_requests  # no token was even asked for
    assert len(elsewhere.requests) == seen_elsewhere


async def test_only_granted_agents_use_an_installation(gepa_stack):
    github = gepa_stack.github
    token_requests = len(github.token_requests)
    async with httpx.AsyncClient(base_url=gepa_stack.url, timeout=60) as http:
        outsider = await agents.register(http, "gepa-outsider")
        response = await http.post(
            "/connect-git",
            headers=outsider.headers,
            json={"repo_url": f"{github.url}/acme/private-qa.git", "installation_id": GITHUB_INSTALLATION_ID},
        )
    assert response.status_code == 403, response.text
    assert response.json()["error"] == "INSTALLATION_NOT_ALLOWED"
    assert response.json()["detail"] == (
        f"installation_id {GITHUB_INSTALLATION_ID} may not be used by agent {outsider.agent_id!r}: the operator "
        f"grants installations to agents (GENESIS_GEPA_GITHUB_INSTALLATIONS)"
    )
    assert len(github.token_requests) == token_requests


async def test_a_repository_outside_the_installation_gets_no_token(gepa_stack, gepa_http):
    github = gepa_stack.github
    token_requests, tokens = len(github.token_requests), list(github.tokens)
    # Another account's repository: GitHub names the installation's account, no token is asked for.
    other = await gepa_http.post(
        "/connect-git",
        json={"repo_url": f"{github.url}/other-org/private-qa.git", "installation_id": GITHUB_INSTALLATION_ID},
    )
    assert other.status_code == 403 and other.json()["error"] == "REPOSITORY_NOT_IN_INSTALLATION", other.text
    assert other.json()["detail"] == (
        f"repository other-org/private-qa is not in installation {GITHUB_INSTALLATION_ID}: "
        f"its owner is not the account the installation belongs to"
    )
    assert len(github.token_requests) == token_requests
    # The account's, but not granted to the App: GitHub refuses the scoped token; its words stay out.
    missing = await gepa_http.post(
        "/connect-git", json={"repo_url": f"{github.url}/ACME/missing.git", "installation_id": GITHUB_INSTALLATION_ID}
    )
    assert missing.status_code == 403 and missing.json()["error"] == "REPOSITORY_NOT_IN_INSTALLATION", missing.text
    assert "cannot read repository ACME/missing" in missing.json()["detail"]
    assert "parent installation" not in missing.text
    assert github.tokens == tokens
    for response in (other, missing):
        assert_no_token_in(response, github.tokens)


async def test_a_redirect_to_another_host_never_gets_the_token(gepa_stack, gepa_http, tmp_path):
    github, elsewhere = gepa_stack.github, gepa_stack.elsewhere
    moved = github.repos_root / "acme" / "moved.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(gepa_stack.repo), str(moved)], check=True)
    github.redirects["/acme/moved.git/"] = elsewhere.url
    seen_elsewhere = len(elsewhere.requests)
    response = await gepa_http.post(
        "/connect-git", json={"repo_url": f"{github.url}/acme/moved.git", "installation_id": GITHUB_INSTALLATION_ID}
    )
    assert response.status_code == 422 and response.json()["error"] == "CLONE_FAILED", response.text
    assert github.token_requests[-1]["body"]["repositories"] == ["moved"]
    assert any(r["path"].startswith("/acme/moved.git/") for r in github.requests)  # git asked GitHub, got a 301
    assert elsewhere.requests[seen_elsewhere:] == []  # and did not follow it
    assert_no_token_in(response, github.tokens)


def test_git_sends_the_token_only_under_the_repository_url(gepa_stack, tmp_path):
    """The header's scope on its own (redirects aside): git on another host's URL, handed the
    token bound to the GitHub repository, sends no Authorization there; the same header unbound
    would have gone (so the recorder would see it)."""
    github, elsewhere = gepa_stack.github, gepa_stack.elsewhere
    token = "ghs_" + "5" * 32
    scoped = GitHubApp.git_auth_config(token, f"{github.url}/acme/private-qa.git")
    assert list(scoped) == [f"http.{github.url}/acme/private-qa.git.extraHeader"]
    target = f"{elsewhere.url}/acme/private-qa.git"
    seen = len(elsewhere.requests)
    with pytest.raises(gitops.CloneFailed):
        gitops.clone(target, tmp_path / "scoped", config=scoped, redact=token)
    scoped_requests = elsewhere.requests[seen:]
    assert scoped_requests and all("Authorization" not in r["headers"] for r in scoped_requests)
    unbound = {"http.extraHeader": next(iter(scoped.values()))}
    seen = len(elsewhere.requests)
    with pytest.raises(gitops.CloneFailed):
        gitops.clone(target, tmp_path / "unbound", config=unbound, redact=token)
    assert any(r["headers"].get("Authorization") == basic(token) for r in elsewhere.requests[seen:])


async def test_an_installation_id_out_of_range_is_a_precise_422(gepa_stack, gepa_http):
    for value in (0, 2**63):
        response = await gepa_http.post(
            "/connect-git", json={"repo_url": f"{gepa_stack.github.url}/acme/private-qa.git", "installation_id": value}
        )
        assert response.status_code == 422, response.text
        assert any(e["field"].endswith("installation_id") for e in response.json()["errors"]), response.text
