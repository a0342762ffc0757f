"""How the CLI talks: rich text for people, one JSON document for scripts (``--json``), and
errors on stderr (or as JSON on stdout) with a non-zero exit code."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from genesis.cli.client import ApiClient, CliError

STATUS_STYLE = {
    "queued": "dim",
    "validating": "cyan",
    "sandbox_ok": "blue",
    "activated": "bold green",
    "kept": "bold green",
    "rolled_back": "yellow",
    "rejected": "bold red",
    "failed": "bold magenta",
}


@dataclass
class Cli:
    """Options of the whole invocation (``genesis --api URL --api-key KEY --operator-key KEY --json ...``)."""

    api_url: str
    api_key: str | None
    json: bool = False
    timeout: float = 30.0
    operator_key: str | None = None
    console: Console = field(default_factory=lambda: Console(highlight=False))
    err_console: Console = field(default_factory=lambda: Console(stderr=True, highlight=False))
    _client: ApiClient | None = None

    @property
    def api(self) -> ApiClient:
        if self._client is None:
            self._client = ApiClient(self.api_url, self.api_key, self.timeout, self.operator_key)
        return self._client

    def emit(self, data: Any, render: Callable[[], None] | None = None) -> None:
        """``data`` as JSON with --json; otherwise ``render()`` (or pretty JSON without one)."""
        if self.json or render is None:
            print(json.dumps(data, indent=None if self.json else 2, default=str), flush=True)
        else:
            render()

    def say(self, *args: Any, **kwargs: Any) -> None:
        """Human progress text: on stdout normally, on stderr with --json (stdout stays one JSON document)."""
        (self.err_console if self.json else self.console).print(*args, **kwargs)


def group(app: typer.Typer, name: str, help: str) -> typer.Typer:
    """A command group (``genesis NAME ...``) added to ``app``."""
    sub = typer.Typer(help=help, no_args_is_help=True)
    app.add_typer(sub, name=name)
    return sub


def cli_of(ctx: typer.Context, json_flag: bool = False) -> Cli:
    cli: Cli = ctx.ensure_object(Cli) if ctx.obj is None else ctx.obj
    if json_flag:
        cli.json = True
    return cli


def handled(command: Callable) -> Callable:
    """Turn a CliError into a clear message and its exit code (JSON on stdout with --json)."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = kwargs.get("ctx") or next((a for a in args if isinstance(a, typer.Context)), None)
        try:
            return command(*args, **kwargs)
        except CliError as err:
            cli = ctx.obj if ctx is not None and isinstance(ctx.obj, Cli) else None
            if cli is not None and (cli.json or kwargs.get("json_out")):
                print(json.dumps(err.to_json()), flush=True)
            else:
                Console(stderr=True, highlight=False).print(
                    f"[bold red]Error:[/] {err.message}", markup=True, soft_wrap=True
                )
            raise typer.Exit(err.code) from None
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            raise typer.Exit(130) from None

    return wrapper


def styled(status: str | None, width: int = 0) -> str:
    """``status`` in its colour, padded to ``width`` visible characters."""
    if status is None:
        return "-"
    return f"[{STATUS_STYLE.get(status, 'white')}]{status:<{width}}[/]"


def when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else "-"


def table(title: str | None, columns: list[str], rows: list[list[Any]]) -> Table:
    result = Table(title=title, title_justify="left", header_style="bold")
    for column in columns:
        result.add_column(column)
    for row in rows:
        result.add_row(*("-" if v is None else str(v) for v in row))
    return result
