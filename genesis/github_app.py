"""GitHub App installation tokens for cloning private repositories (POST /connect-git with an
``installation_id``). A token is fetched for each use, handed to git in an environment-borne
header (never in the remote URL, .git/config, a command line or a log) and then forgotten."""

from __future__ import annotations

import base64
import time
from pathlib import Path

import httpx
import jwt

from genesis.config import Settings


class GitHubAppError(RuntimeError):
    pass


class GitHubApp:
    def __init__(self, settings: Settings):
        self._app_id = settings.gepa_github_app_id
        self._key_path = settings.gepa_github_private_key_path
        self._api = settings.gepa_github_api_url.rstrip("/")

    @property
    def configured(self) -> bool:
        return bool(self._app_id and self._key_path)

    def app_jwt(self) -> str:
        """The App's own short-lived JWT (RS256, 9 minutes, issued a minute early for clock skew)."""
        now = int(time.time())
        key = Path(self._key_path).read_text()
        return jwt.encode({"iat": now - 60, "exp": now + 540, "iss": str(self._app_id)}, key, algorithm="RS256")

    def installation_token(self, installation_id: int) -> str:
        if not self.configured:
            raise GitHubAppError("installation_id was given but no GitHub App is configured "
                                 "(GENESIS_GEPA_GITHUB_APP_ID and GENESIS_GEPA_GITHUB_PRIVATE_KEY_PATH)")
        try:
            response = httpx.post(
                f"{self._api}/app/installations/{int(installation_id)}/access_tokens", timeout=30,
                headers={"Authorization": f"Bearer {self.app_jwt()}", "Accept": "application/vnd.github+json",
                         "X-GitHub-Api-Version": "2022-11-28"},
            )
        except (httpx.HTTPError, OSError) as exc:
            raise GitHubAppError(f"GitHub could not be reached for an installation token: {type(exc).__name__}") from None
        if response.status_code != 201:
            message = response.json().get("message", "") if "json" in response.headers.get("content-type", "") else ""
            raise GitHubAppError(f"GitHub refused an installation token for installation {installation_id}: "
                                 f"HTTP {response.status_code} {message}".strip())
        return response.json()["token"]

    @staticmethod
    def git_auth_config(token: str) -> dict[str, str]:
        """git config (passed through the environment) that authenticates HTTPS as the installation."""
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        return {"http.extraHeader": f"Authorization: Basic {basic}"}
