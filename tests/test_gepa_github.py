"""Private repositories through a GitHub App: /connect-git with an installation_id fetches an
installation token (App JWT, RS256) from GitHub's API and clones with it; the token is stored
nowhere (not in the remote URL, .git, the worker's log) and a refusal is a clear error.
GitHub is a real local HTTP server (tests/fake_github.py) running git's own http-backend."""

from __future__ import annotations

import subprocess

from genesis.harness import LOG_DIR
from tests.gepa_stack import GITHUB_INSTALLATION_ID
from tests.test_gepa_steps import step


def files_containing(root, secret: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


async def test_a_private_repository_is_cloned_with_a_token_that_is_kept_nowhere(gepa_stack, gepa_http):
    github = gepa_stack.github
    url = f"{github.url}/acme/private-qa.git"
    response = await gepa_http.post("/connect-git", json={"repo_url": url, "installation_id": GITHUB_INSTALLATION_ID})
    assert response.status_code == 201, response.text
    client_id = response.json()["client_id"]
    token = github.tokens[-1]
    # git authenticated with the installation token (HTTP Basic), never in a URL.
    assert any(r["authorization"] and r["path"].endswith("git-upload-pack") for r in github.requests)
    assert not any(token in r["path"] for r in github.requests)
    clone = gepa_stack.clone_of(client_id)
    remote = subprocess.run(["git", "remote", "get-url", "origin"], cwd=clone, capture_output=True, text=True, check=True)
    assert remote.stdout.strip() == url
    assert files_containing(clone / ".git", token) == []
    assert token not in (LOG_DIR / "worker-gepa.log").read_text(errors="replace")
    result = (await gepa_http.post("/execute_step", json=step(client_id, "private1"))).json()
    assert result["status"] == "success", result


async def test_refused_tokens_and_unauthenticated_clones_fail_clearly(gepa_stack, gepa_http):
    url = f"{gepa_stack.github.url}/acme/private-qa.git"
    refused = await gepa_http.post("/connect-git", json={"repo_url": url, "installation_id": 999})
    assert refused.status_code == 422 and refused.json()["error"] == "CLONE_FAILED"
    assert "GitHub refused an installation token for installation 999: HTTP 404 Not Found" in refused.json()["detail"]
    anonymous = await gepa_http.post("/connect-git", json={"repo_url": url})
    assert anonymous.status_code == 422 and anonymous.json()["error"] == "CLONE_FAILED"
    assert f"cloning {url} failed" in anonymous.json()["detail"]
    step_for_failed = await gepa_http.post("/execute_step", json=step(anonymous.json()["client_id"], "never"))
    assert step_for_failed.status_code == 404 and step_for_failed.json()["status"] == "failed"
