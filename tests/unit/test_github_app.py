"""Which repository URLs an installation may be used for, and who may use which installation
(gepa_steps/github_app.py, genesis/github_grants.py): pure checks, no network."""

from __future__ import annotations

import pytest

from genesis.config import Settings
from genesis.github_grants import InstallationGrants
from gepa_steps.github_app import GitHubApp, NotOnGitHub, Repository


def app(url: str = "https://github.com") -> GitHubApp:
    return GitHubApp(Settings().override(gepa_github_url=url))


@pytest.mark.parametrize(
    "url, repository",
    [
        ("https://github.com/acme/qa.git", Repository("acme", "qa")),
        ("https://github.com/acme/qa", Repository("acme", "qa")),
        ("https://github.com:443/Acme-Labs/q.a_b-c.git", Repository("Acme-Labs", "q.a_b-c")),
    ],
)
def test_repositories_on_the_github_host(url, repository):
    assert app().repository(url) == repository


@pytest.mark.parametrize(
    "url",
    [
        "https://evil.example/acme/qa.git",  # another host
        "https://github.com.evil.example/acme/qa.git",
        "https://api.github.com/acme/qa.git",
        "http://github.com/acme/qa.git",  # another scheme
        "https://github.com:8443/acme/qa.git",  # another port
        "https://github.com/acme/qa.git/info",  # not <owner>/<repository>
        "https://github.com/acme",
        "https://github.com/acme/",
        "https://github.com//qa.git",
        "https://github.com/acme/..",
        "https://github.com/acme/.git",
        "https://github.com/-acme/qa",
        "https://github.com/ac--me/qa",
        "https://github.com/acme/q%2fa",
        "https://github.com/acme/qa?x=1",
        "/srv/repos/acme/qa",
    ],
)
def test_anything_else_is_refused(url):
    with pytest.raises(NotOnGitHub, match=r"must be a repository on the GitHub App's host, https://github\.com/"):
        app().repository(url)


def test_an_enterprise_host_under_a_path():
    enterprise = app("https://git.corp.example/github/")
    assert enterprise.repository("https://git.corp.example/github/team/qa.git") == Repository("team", "qa")
    with pytest.raises(NotOnGitHub):
        enterprise.repository("https://git.corp.example/team/qa.git")


def test_installation_grants():
    grants = InstallationGrants.parse(" 7001=agt_a, 7001=agt_b,8=* ,")
    assert grants.allows(7001, "agt_a") and grants.allows(7001, "agt_b")
    assert not grants.allows(7001, "agt_c") and not grants.allows(7001, None)
    assert grants.allows(8, "agt_c") and grants.allows(8, None)  # '*': every caller, keyless ones too
    assert not grants.allows(9, "agt_a")
    assert not InstallationGrants.parse("").allows(7001, "agt_a")  # nothing listed: nobody


@pytest.mark.parametrize("text", ["7001", "7001=", "x=agt_a", "0=agt_a", "7001=agt a", "7001=agt_a=b"])
def test_malformed_grants_are_refused_at_start(text):
    with pytest.raises(ValueError, match="must be <installation_id>=<agent_id> or <installation_id>=\\*"):
        Settings().override(gepa_github_installations=text)
