"""The `genesis` command line run as its users run it: against an HTTP server that answers oddly
(``OddServer``, unit tests) or the real API (stack tests), with its exit code and output; and a
finished workflow's history recorded for the replay corpus."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from temporalio.client import WorkflowHistory
from typer.testing import CliRunner

from cli import app
from genesis.config import PROJECT_ROOT
from tests.pipeline_steps import HISTORIES
from tests.replays import assert_replays


class OddServer:
    """Answers each ``METHOD path`` (query string left out) with a canned status and body; records every request."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[int, str, bytes]] = {}
        self.requests: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                server.requests.append(f"{self.command} {self.path}")
                status, kind, body = server.answers.get(
                    f"{self.command} {self.path.split('?')[0]}", (404, "application/json", b'{"error":"NOT_FOUND"}')
                )
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_DELETE = _answer

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def json(self, request: str, body: object, status: int = 200) -> None:
        self.answers[request] = (status, "application/json", json.dumps(body).encode())

    def text(self, request: str, body: str, status: int = 200, kind: str = "text/html") -> None:
        self.answers[request] = (status, kind, body.encode())

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def run(server: OddServer, *args: str, key: str = "gen_0badc0de_secret") -> tuple[int, str, str, BaseException | None]:
    env = {"GENESIS_API_URL": server.url, "GENESIS_API_KEY": key, "GENESIS_OPERATOR_KEY": "", "COLUMNS": "80"}
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr, result.exception


async def run_cli(
    api_url: str, *args: str, key: str | None = None, settings=None, timeout: float = 120, columns: int = 200
) -> tuple[int, str, str]:
    process = await start_cli(api_url, *args, key=key, settings=settings, columns=columns)
    out, err = await asyncio.wait_for(process.communicate(), timeout)
    return process.returncode, out.decode(), err.decode()


async def invoke(
    api_url: str, *args: str, key: str | None = None, operator_key: str | None = None
) -> tuple[int, str, str]:
    """The CLI in this process with typer's CliRunner (quicker than a subprocess), against the
    same real API process. Commands that follow a mutation or replay run as subprocesses."""
    env = {
        "GENESIS_API_URL": api_url,
        "GENESIS_API_KEY": key or "",
        "GENESIS_OPERATOR_KEY": operator_key or "",
        "COLUMNS": "200",
    }
    result = await asyncio.to_thread(CliRunner().invoke, app, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


async def start_cli(api_url: str, *args: str, key: str | None = None, settings=None, columns: int = 200):
    """The CLI as a subprocess whose stdout is not a terminal: ``columns`` is the width it is told."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_")}
    env.update({"GENESIS_API_URL": api_url, "COLUMNS": str(columns), "PYTHONUNBUFFERED": "1"})
    if key:
        env["GENESIS_API_KEY"] = key
    if settings is not None:
        env["GENESIS_TEMPORAL_ADDRESS"] = settings.temporal.address
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cli",
        *args,
        cwd=PROJECT_ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def record_history(temporal_client, workflow_id: str, name: str) -> WorkflowHistory:
    """Replay a finished run against the current code (the worker's workflows); with
    GENESIS_RECORD_HISTORIES=1 also store it in tests/histories/ for every later run."""
    history = await temporal_client.get_workflow_handle(workflow_id).fetch_history()
    await assert_replays(history)
    if os.environ.get("GENESIS_RECORD_HISTORIES"):
        Path(HISTORIES, f"{name}.json").write_text(history.to_json())
    return history
