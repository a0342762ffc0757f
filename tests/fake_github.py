"""A stand-in for GitHub at its network boundary, as a real HTTP server: the App API's
``GET /app/installations/{id}`` (the installation and its account) and
``POST /app/installations/{id}/access_tokens`` (optionally scoped to ``repositories`` of the
account, with ``permissions``), both checking the App's RS256 JWT and answering in GitHub's
shapes; and git's smart HTTP protocol for private repositories (``git http-backend``, requiring
an installation token that covers the repository as HTTP Basic ``x-access-token:<token>``).
Repositories live at ``<repos_root>/<account>/<name>.git``; ``redirects`` answers a path prefix
with a 301 elsewhere, as GitHub does for a renamed repository. It records what each request
carried, so tests can check where the token travelled. ``RecordingHost`` is another host that
records every request's headers."""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

APP_ID = "424242"


NOT_ACCESSIBLE = "There is at least one repository that does not exist or is not accessible to the parent installation."


class FakeGitHub:
    def __init__(self, repos_root: Path, installation_id: int, account: str = "acme"):
        self.repos_root, self.installation_id, self.account = repos_root, installation_id, account
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.private_key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        self._public_key = key.public_key()
        self.tokens: list[str] = []
        self.token_scopes: dict[str, set[str] | None] = {}  # token -> repository names (None: all)
        self.token_requests: list[dict] = []  # {"installation", "body"} of each access_tokens call
        self.requests: list[dict] = []
        self.redirects: dict[str, str] = {}
        github = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                if self.path.startswith("/app/installations/"):
                    github.installation(self)
                else:
                    github.git(self)

            def do_POST(self) -> None:
                if self.path.startswith("/app/installations/"):
                    github.access_token(self)
                else:
                    github.git(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _reply(self, handler, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _app_installation(self, handler) -> str | None:
        """The installation id of an App API request whose JWT checks out; None once answered."""
        auth = handler.headers.get("authorization", "")
        try:
            claims = jwt.decode(auth.removeprefix("Bearer "), self._public_key, algorithms=["RS256"])
        except jwt.PyJWTError as exc:
            return self._reply(handler, 401, {"message": f"A JSON web token could not be decoded: {exc}"})
        if claims.get("iss") != APP_ID:
            return self._reply(handler, 401, {"message": "Integration not found"})
        installation = handler.path.split("/")[3]
        if installation != str(self.installation_id):
            return self._reply(handler, 404, {"message": "Not Found"})
        return installation

    def installation(self, handler) -> None:
        if self._app_installation(handler) is not None:
            self._reply(
                handler,
                200,
                {
                    "id": self.installation_id,
                    "app_id": int(APP_ID),
                    "target_type": "Organization",
                    "account": {"login": self.account, "id": 9001, "type": "Organization"},
                    "repository_selection": "selected",
                    "permissions": {"contents": "read", "metadata": "read"},
                },
            )

    def access_token(self, handler) -> None:
        body = json.loads(handler.rfile.read(int(handler.headers.get("content-length") or 0)) or b"{}")
        installation = self._app_installation(handler)
        if installation is None:
            return
        self.token_requests.append({"installation": installation, "body": body})
        names = body.get("repositories")
        if names is not None and not all((self.repos_root / self.account / f"{name}.git").is_dir() for name in names):
            return self._reply(handler, 422, {"message": NOT_ACCESSIBLE})
        token = f"ghs_{secrets.token_hex(16)}"
        self.tokens.append(token)
        self.token_scopes[token] = None if names is None else set(names)
        self._reply(
            handler,
            201,
            {
                "token": token,
                "expires_at": "2099-01-01T00:00:00Z",
                "permissions": body.get("permissions") or {"contents": "read", "metadata": "read"},
                "repository_selection": "selected",
            },
        )

    def _authorised(self, auth: str, path: str) -> bool:
        """The Basic credentials carry a token whose scope covers the repository ``path`` names."""
        owner, _, rest = path.lstrip("/").partition("/")
        name = rest.split("/")[0].removesuffix(".git")
        for token, scope in self.token_scopes.items():
            if auth == "Basic " + base64.b64encode(f"x-access-token:{token}".encode()).decode():
                return owner == self.account and (scope is None or name in scope)
        return False

    def git(self, handler) -> None:
        parts = urlsplit(handler.path)
        auth = handler.headers.get("authorization", "")
        self.requests.append({"path": handler.path, "authorization": auth})
        moved = next((target for prefix, target in self.redirects.items() if parts.path.startswith(prefix)), None)
        if moved is not None:
            handler.send_response(301)
            handler.send_header("Location", moved + handler.path)
            handler.send_header("content-length", "0")
            handler.end_headers()
            return
        if not self._authorised(auth, parts.path):
            handler.send_response(401)
            handler.send_header("WWW-Authenticate", 'Basic realm="GitHub"')
            handler.send_header("content-length", "0")
            handler.end_headers()
            return
        body = handler.rfile.read(int(handler.headers.get("content-length") or 0))
        env = {
            "GIT_PROJECT_ROOT": str(self.repos_root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": parts.path,
            "QUERY_STRING": parts.query,
            "REQUEST_METHOD": handler.command,
            "CONTENT_TYPE": handler.headers.get("content-type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "PATH": "/usr/bin:/bin",
        }
        out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, check=True).stdout
        head, _, payload = out.partition(b"\r\n\r\n")
        status = 200
        headers = []
        for line in head.decode().split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name, value.strip()))
        handler.send_response(status)
        for name, value in headers:
            handler.send_header(name, value)
        handler.send_header("content-length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class RecordingHost:
    """Another host on loopback: it records the path and headers of every request and answers
    401 asking for Basic credentials, as a git host would."""

    def __init__(self):
        self.requests: list[dict] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _record(self) -> None:
                recorder.requests.append({"path": self.path, "headers": dict(self.headers.items())})
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="elsewhere"')
                self.send_header("content-length", "0")
                self.end_headers()

            do_GET = do_POST = _record

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
