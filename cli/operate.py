"""Running and watching Genesis: up, watch (the Evolution Feed), schedules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Annotated

import typer
from rich.markup import escape

from cli.client import CliError, segment
from cli.output import Cli, cli_of, examples, group, handled, table, when
from genesis.config import PROJECT_ROOT

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (for scripts)")]
ScheduleId = Annotated[str, typer.Argument(help="schedule id")]


def feed_line(cli: Cli, message: dict) -> None:
    """One Evolution Feed message: JSON line with --json, else time, agent, action, message."""
    if cli.json:
        print(json.dumps(message), flush=True)
        return
    ts = message.get("timestamp")
    clock = time.strftime("%H:%M:%S", time.localtime(ts)) if isinstance(ts, (int, float)) else "--:--:--"
    refs = " ".join(f"{k}={message[k]}" for k in ("mutation_id", "trigger_id", "workflow_id") if message.get(k))
    cli.console.print(
        f"[dim]{clock}[/] [bold]{message.get('agent', '?'):>9}[/] [cyan]{message.get('action', '?')}[/] "
        f"{escape(str(message.get('message', '')))} [dim]{refs}[/]",
        soft_wrap=True,
    )


def ws_url(api_url: str, path: str) -> str:
    base = api_url.rstrip("/")
    if base.startswith("https://"):
        return "wss://" + base[len("https://") :] + path
    return "ws://" + base.removeprefix("http://") + path


def register(app: typer.Typer) -> None:
    @app.command(epilog=examples("genesis up", "genesis up --no-services", "genesis up --dry-run"))
    @handled
    def up(
        ctx: typer.Context,
        services: Annotated[bool, typer.Option(help="bootstrap the services first (scripts/services.sh)")] = True,
        dry_run: Annotated[bool, typer.Option("--dry-run", help="print the steps without running them")] = False,
    ) -> None:
        """What `make run` does: the services, then every Genesis process.

        Install/start Postgres, Redis, Docker and Temporal (scripts/services.sh), then run the
        worker, the engine, the Watcher and the API in the foreground (Ctrl-C stops them)."""
        steps = []
        if services:
            steps.append(["bash", str(PROJECT_ROOT / "scripts" / "services.sh")])
        steps.append([sys.executable, "-m", "cli.run"])
        if dry_run:
            for step in steps:
                print(" ".join(step))
            return
        if services:
            if not (PROJECT_ROOT / "scripts" / "services.sh").exists():
                raise CliError(
                    f"{PROJECT_ROOT / 'scripts' / 'services.sh'} not found: run `genesis up` from a "
                    "Genesis checkout (pip install -e .)"
                )
            done = subprocess.run(steps[0], cwd=PROJECT_ROOT)
            if done.returncode != 0:
                raise CliError(
                    f"the services bootstrap failed (exit {done.returncode}); see .state/logs/", code=done.returncode
                )
        os.chdir(PROJECT_ROOT)
        os.execv(sys.executable, steps[-1])  # cli.run supervises the processes and handles Ctrl-C

    @app.command(
        epilog=examples("genesis watch", "genesis watch --backlog 100", "genesis watch --once --backlog 100 --json")
    )
    @handled
    def watch(
        ctx: typer.Context,
        backlog: Annotated[int, typer.Option(min=0, max=500, help="show this many recent messages first")] = 20,
        once: Annotated[bool, typer.Option("--once", help="print the recent messages and exit")] = False,
        after: Annotated[str | None, typer.Option(help="start after this stream id")] = None,
        json_out: Annotated[bool, typer.Option("--json", help="one JSON message per line")] = False,
    ) -> None:
        """The live Evolution Feed: what the Watcher, the agents and the workflows do, as it happens."""
        cli = cli_of(ctx, json_out)
        params: dict = {"limit": backlog or 1}
        if after:
            params["after"] = after
        recent = cli.api.get("/api/feed", params=params)
        for message in recent.get("messages", [])[-backlog:] if backlog else []:
            feed_line(cli, message)
        if once:
            return
        position = {"last_id": recent.get("last_id") or after}
        try:
            _stream(cli, position)
        except _NoSocket as exc:  # no WebSocket (or it dropped): poll on from the last message seen
            cli.err_console.print(f"[dim]{exc}; polling GET /api/feed[/]")
            _poll(cli, position["last_id"])

    schedule = group(
        app,
        "schedule",
        "Periodic improvement cycles (Temporal Schedules)",
        'genesis schedule create --interval 3600 --note "hourly improvement cycle"',
        "genesis schedule list",
        "genesis schedule pause hourly",
    )

    def show_schedules(cli: Cli, items: list[dict]) -> None:
        rows = [
            [
                s.get("schedule_id"),
                s.get("interval_sec", s.get("interval_s")),
                "paused" if s.get("paused") else "active",
                ", ".join(
                    when(t) if isinstance(t, (int, float)) else str(t) for t in (s.get("next_run_times") or [])[:2]
                ),
                len(s.get("recent_runs") or []),
                escape(s["note"]) if s.get("note") else None,
            ]
            for s in items
        ]
        columns = ["id", "interval s", "state", "next runs", "recent runs", "note"]
        cli.console.print(table(None, columns, rows, whole=("id",)))

    @schedule.command(
        "create",
        epilog=examples(
            'genesis schedule create --interval 3600 --note "hourly improvement cycle"',
            "genesis schedule create --interval 600 --id ten-minutes --paused",
        ),
    )
    @handled
    def schedule_create(
        ctx: typer.Context,
        interval: Annotated[float, typer.Option("--interval", min=1, help="seconds between cycles")],
        schedule_id: Annotated[
            str | None, typer.Option("--id", help="schedule id (default: chosen by the API)")
        ] = None,
        paused: Annotated[bool, typer.Option("--paused", help="create it paused")] = False,
        note: Annotated[str | None, typer.Option(help="free text")] = None,
        json_out: JsonOpt = False,
    ) -> None:
        """Create a schedule of improvement cycles every --interval seconds."""
        cli = cli_of(ctx, json_out)
        body: dict = {"interval_sec": interval, "paused": paused}
        if schedule_id:
            body["schedule_id"] = schedule_id
        if note is not None:
            body["note"] = note
        answer = cli.api.post("/api/schedules", json=body)
        cli.emit(answer, lambda: show_schedules(cli, [answer]))

    @schedule.command("list", epilog=examples("genesis schedule list", "genesis schedule list --json"))
    @handled
    def schedule_list(ctx: typer.Context, json_out: JsonOpt = False) -> None:
        """Every schedule with its next run times and recent runs."""
        cli = cli_of(ctx, json_out)
        answer = cli.api.get("/api/schedules")
        cli.emit(answer, lambda: show_schedules(cli, answer.get("schedules", [])))

    def schedule_action(verb: str, done: str, method: str, suffix: str, doc: str) -> None:
        @handled
        def command(ctx: typer.Context, schedule_id: ScheduleId, json_out: JsonOpt = False) -> None:
            cli = cli_of(ctx, json_out)
            path = f"/api/schedules/{segment(schedule_id, 'schedule id')}{suffix}"
            answer = cli.api.request(method, path, ok=(200, 202, 204))
            cli.emit(
                answer if answer is not None else {"schedule_id": schedule_id, done: True},
                lambda: cli.console.print(f"schedule {schedule_id} {done}"),
            )

        command.__doc__ = doc
        schedule.command(verb, epilog=examples(f"genesis schedule {verb} hourly"))(command)

    schedule_action("pause", "paused", "POST", "/pause", "Pause a schedule (no cycles until resumed).")
    schedule_action("resume", "resumed", "POST", "/resume", "Resume a paused schedule.")
    schedule_action("delete", "deleted", "DELETE", "", "Delete a schedule.")


class _NoSocket(Exception):
    pass


def _stream(cli: Cli, position: dict) -> None:
    from websockets.exceptions import InvalidStatus, WebSocketException
    from websockets.sync.client import connect

    url = ws_url(cli.api_url, "/ws/feed")
    try:
        with connect(url, open_timeout=10) as socket:
            cli.err_console.print(f"[dim]following {url} (Ctrl-C stops)[/]")
            for frame in socket:
                try:
                    message = json.loads(frame)
                    feed_line(cli, message)
                    position["last_id"] = message.get("id") or position["last_id"]
                except (ValueError, AttributeError):
                    cli.err_console.print(f"[dim]unreadable feed frame: {frame!r:.200}[/]")
        raise _NoSocket(f"{url} was closed by the server")
    except InvalidStatus as exc:
        raise _NoSocket(f"{url} answered HTTP {exc.response.status_code}") from exc
    except (OSError, WebSocketException) as exc:
        raise _NoSocket(f"{url}: {exc}") from exc


def _poll(cli: Cli, last_id: str | None) -> None:
    while True:
        params = {"limit": 100, **({"after": last_id} if last_id else {})}
        answer = cli.api.get("/api/feed", params=params)
        for message in answer.get("messages", []):
            feed_line(cli, message)
        last_id = answer.get("last_id") or last_id
        time.sleep(1.0)
