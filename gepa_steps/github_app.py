"""GitHub App installation tokens for cloning private repositories (POST /connect-git with an
``installation_id``).

An installation token reads what the installation's account granted the operator's App, so it
is only ever asked for a repository on the App's own host (Settings.gepa.github_url) whose owner
is the installation's account, as GitHub's API reports it; the token is scoped to that one
repository, read-only. It is fetched for each use, handed to git in a header bound to the
repository's URL (another host, a redirect or a submodule never gets it; never in the remote
URL, .git/config, a command line or a log) and then forgotten. Refusals name no token and quote
nothing GitHub said. Which agents may use an installation: genesis/github_grants.py."""

from __future__ import annotations

import base64
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import httpx
import jwt

from genesis import netpolicy

if TYPE_CHECKING:
    from genesis.config import Settings

# GitHub's own rules: an account login is letters, digits and single inner hyphens (at most 39);
# a repository name letters, digits, '.', '_' and '-' (at most 100).
_OWNER = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}$")
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
API_HEADERS = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}


class NotOnGitHub(ValueError):
    """repo_url is not a repository on the App's host: no installation token may go there."""


class GitHubAppError(RuntimeError):
    """No token for this clone; ``code`` is the API's error code for it."""

    code = "GITHUB_APP_FAILED"


class InstallationNotFound(GitHubAppError):
    code = "INSTALLATION_NOT_FOUND"


class RepositoryNotInInstallation(GitHubAppError):
    code = "REPOSITORY_NOT_IN_INSTALLATION"


@dataclass(frozen=True)
class Repository:
    owner: str
    name: str

    def __str__(self) -> str:
        return f"{self.owner}/{self.name}"


class GitHubApp:
    def __init__(self, settings: Settings):
        self._app_id = settings.gepa.github_app_id
        self._key_path = settings.gepa.github_private_key_path
        self._api = settings.gepa.github_api_url.rstrip("/")
        self._web = settings.gepa.github_url.rstrip("/")

    @property
    def configured(self) -> bool:
        return bool(self._app_id and self._key_path)

    def repository(self, url: str) -> Repository:
        """The repository ``url`` names (as programs.check_repo_url returns it) when it is
        ``<gepa_github_url>/<owner>/<name>[.git]``; NotOnGitHub otherwise."""
        refusal = NotOnGitHub(
            f"with installation_id, repo_url must be a repository on the GitHub App's host, "
            f"{self._web}/<owner>/<repository>: the installation's token goes nowhere else"
        )
        parts, base = urlsplit(url), urlsplit(self._web)
        try:
            same_host = (
                parts.scheme == base.scheme
                and netpolicy.canonical_host(netpolicy.url_host_port(url)[0])
                == netpolicy.canonical_host(netpolicy.url_host_port(self._web)[0])
                and netpolicy.url_host_port(url)[1] == netpolicy.url_host_port(self._web)[1]
            )
        except netpolicy.Refused:
            raise refusal from None
        prefix = base.path.rstrip("/") + "/"
        if not same_host or parts.query or parts.fragment or not parts.path.startswith(prefix):
            raise refusal
        segments = parts.path[len(prefix) :].split("/")
        if len(segments) != 2:
            raise refusal
        owner, name = segments[0], segments[1].removesuffix(".git")
        if not _OWNER.match(owner) or not _NAME.match(name) or name in (".", ".."):
            raise refusal
        return Repository(owner, name)

    def app_jwt(self) -> str:
        """The App's own short-lived JWT (RS256, 9 minutes, issued a minute early for clock skew)."""
        if self._key_path is None:
            raise GitHubAppError("no GitHub App is configured on this server (no private key)")
        now = int(time.time())
        key = self._key_path.read_text()
        return jwt.encode({"iat": now - 60, "exp": now + 540, "iss": str(self._app_id)}, key, algorithm="RS256")

    def _call(self, method: str, path: str, body: dict | None = None) -> httpx.Response:
        if not self.configured:
            raise GitHubAppError("installation_id was given but no GitHub App is configured on this server")
        try:
            return httpx.request(
                method,
                f"{self._api}{path}",
                json=body,
                timeout=30,
                headers={"Authorization": f"Bearer {self.app_jwt()}", **API_HEADERS},
            )
        except (httpx.HTTPError, OSError) as exc:
            raise GitHubAppError(f"GitHub's API could not be reached ({type(exc).__name__})") from None

    def installation_account(self, installation_id: int) -> str:
        """The login of the account (user or organisation) the installation belongs to."""
        response = self._call("GET", f"/app/installations/{int(installation_id)}")
        if response.status_code == 404:
            raise InstallationNotFound(
                f"installation {installation_id} is not an installation of this server's GitHub App"
            )
        try:
            login = response.json()["account"]["login"] if response.status_code == 200 else None
        except (ValueError, KeyError, TypeError):
            login = None
        if not isinstance(login, str):
            raise GitHubAppError(
                f"GitHub did not describe installation {installation_id} (HTTP {response.status_code})"
            )
        return login

    def repository_token(self, installation_id: int, repository: Repository) -> str:
        """A token of the installation that can only read ``repository``, once GitHub has
        confirmed the repository's owner is the installation's account."""
        if self.installation_account(installation_id).lower() != repository.owner.lower():  # logins ignore case
            raise RepositoryNotInInstallation(
                f"repository {repository} is not in installation {installation_id}: "
                f"its owner is not the account the installation belongs to"
            )
        response = self._call(
            "POST",
            f"/app/installations/{int(installation_id)}/access_tokens",
            {"repositories": [repository.name], "permissions": {"contents": "read"}},
        )
        if response.status_code in (404, 422):
            raise RepositoryNotInInstallation(
                f"installation {installation_id} cannot read repository {repository} (the account has not "
                f"granted the App this repository, or the App may not read repository contents)"
            )
        try:
            token = response.json()["token"] if response.status_code == 201 else None
        except (ValueError, KeyError, TypeError):
            token = None
        if not isinstance(token, str) or not token:
            raise GitHubAppError(
                f"GitHub refused an installation token for installation {installation_id} (HTTP {response.status_code})"
            )
        return token

    @staticmethod
    def git_auth_config(token: str, repo_url: str) -> dict[str, str]:
        """git config (passed through the environment) that authenticates HTTPS as the
        installation for ``repo_url`` and nothing else (``http.<url>.extraHeader``: git sends it
        only to URLs under the repository's, whatever else the clone is led to)."""
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        return {f"http.{repo_url}.extraHeader": f"Authorization: Basic {basic}"}
