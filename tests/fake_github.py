"""A stand-in for GitHub at its network boundary, as a real HTTP server: the App API's
``POST /app/installations/{id}/access_tokens`` (checks the App's RS256 JWT) and git's smart HTTP
protocol for private repositories (``git http-backend``, requiring the installation token as
HTTP Basic ``x-access-token:<token>``). It records what each request carried, so tests can check
where the token travelled."""

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


class FakeGitHub:
    def __init__(self, repos_root: Path, installation_id: int):
        self.repos_root, self.installation_id = repos_root, installation_id
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.private_key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                 serialization.NoEncryption())
        self._public_key = key.public_key()
        self.tokens: list[str] = []
        self.requests: list[dict] = []
        github = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
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

    def access_token(self, handler) -> None:
        installation = handler.path.split("/")[3]
        auth = handler.headers.get("authorization", "")
        try:
            claims = jwt.decode(auth.removeprefix("Bearer "), self._public_key, algorithms=["RS256"])
        except jwt.PyJWTError as exc:
            return self._reply(handler, 401, {"message": f"A JSON web token could not be decoded: {exc}"})
        if claims.get("iss") != APP_ID:
            return self._reply(handler, 401, {"message": "Integration not found"})
        if installation != str(self.installation_id):
            return self._reply(handler, 404, {"message": "Not Found"})
        token = f"ghs_{secrets.token_hex(16)}"
        self.tokens.append(token)
        self._reply(handler, 201, {"token": token, "expires_at": "2099-01-01T00:00:00Z"})

    def git(self, handler) -> None:
        parts = urlsplit(handler.path)
        auth = handler.headers.get("authorization", "")
        self.requests.append({"path": handler.path, "authorization": auth})
        expected = {"Basic " + base64.b64encode(f"x-access-token:{t}".encode()).decode() for t in self.tokens}
        if auth not in expected:
            handler.send_response(401)
            handler.send_header("WWW-Authenticate", 'Basic realm="GitHub"')
            handler.send_header("content-length", "0")
            handler.end_headers()
            return
        body = handler.rfile.read(int(handler.headers.get("content-length") or 0))
        env = {"GIT_PROJECT_ROOT": str(self.repos_root), "GIT_HTTP_EXPORT_ALL": "1", "PATH_INFO": parts.path,
               "QUERY_STRING": parts.query, "REQUEST_METHOD": handler.command,
               "CONTENT_TYPE": handler.headers.get("content-type", ""), "CONTENT_LENGTH": str(len(body)),
               "PATH": "/usr/bin:/bin"}
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
