"""How the CLI talks: rich text for people, one JSON document for scripts (``--json``), and
errors on stderr (or as JSON on stdout) with a non-zero exit code."""

from __future__ import annotations

import functools
import json
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import typer
from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from typer.exceptions import TyperException

from cli.client import ApiClient, CliError

STATUS_STYLE = {
    "queued": "dim",
    "validating": "cyan",
    "sandbox_ok": "blue",
    "activated": "bold green",
    "kept": "bold green",
    "rolled_back": "yellow",
    "extinct": "dim yellow",
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
    debug: bool = False
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


def examples(*lines: str) -> str:
    """The ``Examples:`` epilog of a command's --help: one command line each, shown as written."""
    return "Examples:\n\n" + "\n".join(escape(line) for line in lines)


def group(app: typer.Typer, name: str, help: str, *example_lines: str) -> typer.Typer:
    """A command group (``genesis NAME ...``) added to ``app``."""
    sub = typer.Typer(help=help, no_args_is_help=True, epilog=examples(*example_lines) if example_lines else None)
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
        except (typer.Exit, typer.Abort, TyperException):
            raise  # exit codes and usage errors: typer reports them itself
        except Exception as exc:  # a bug of the CLI must still end in one line, not a traceback
            cli = ctx.obj if ctx is not None and isinstance(ctx.obj, Cli) else None
            if cli is not None and cli.debug:
                raise
            where = f" in {ctx.command_path}" if ctx is not None else ""
            Console(stderr=True, highlight=False).print(
                f"[bold red]Error:[/] unexpected {type(exc).__name__}{where}: {escape(str(exc))} "
                "(a bug in the genesis command line; `genesis --debug ...` shows the traceback)",
                markup=True,
                soft_wrap=True,
            )
            raise typer.Exit(1) from None

    return wrapper


def styled(status: str | None, width: int = 0) -> str:
    """``status`` in its colour, padded to ``width`` visible characters."""
    if status is None:
        return "-"
    return f"[{STATUS_STYLE.get(status, 'white')}]{status:<{width}}[/]"


def when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else "-"


def when_short(ts: float | None) -> str:
    """For a column of a list: the time if it was today, else the month and day."""
    if not isinstance(ts, (int, float)):
        return "-"
    moment = datetime.fromtimestamp(ts)
    return moment.strftime("%H:%M" if moment.date() == datetime.now().date() else "%m-%d")


def versioned(name: Any, version: Any) -> str:
    """``slow_burner v2`` (the name alone before a version exists)."""
    return f"{name} v{version}" if version is not None else str(name)


ID_CELL = re.compile(r"[a-z]{2,5}_[0-9a-f]{4,}(_[0-9a-f]+)?")  # mut_…, agt_…, sub_…, task_…, rcpt_…


def table(title: str | None, columns: list[str], rows: list[list[Any]], whole: tuple[str, ...] = ()) -> Records:
    """Rows for people: a table whose ``whole`` columns (codes, and every column of ids to copy)
    are never wrapped or cut (a cell may hold several lines), or, in a terminal too narrow for
    them and the rest, one block of ``column value`` lines per row."""
    cells = [[cell(v) for v in row] for row in rows]
    ids = tuple(
        c
        for i, c in enumerate(columns)
        if any(r[i] != "-" for r in cells) and all(r[i] == "-" or ID_CELL.fullmatch(r[i]) for r in cells)
    )
    return Records(title, columns, cells, (*whole, *ids))


def cell(value: Any) -> str:
    """A table cell: ``-`` for nothing; a float as people read it (``99.76``, ``0.0123``, ``4``)."""
    if value is None:
        return "-"
    if isinstance(value, float) and math.isfinite(value):
        if value == 0 or abs(value) >= 1:
            return f"{value:,.2f}".rstrip("0").rstrip(".")
        return f"{value:.3g}"
    return str(value)


@dataclass
class Records:
    """What ``table()`` returns: rich renders it as a table or as blocks, whichever fits the width
    it is given. Cells are rich markup (escape text that comes from elsewhere)."""

    title: str | None
    columns: list[str]
    cells: list[list[str]]
    whole: tuple[str, ...]

    # Room a wrapping column needs to stay readable, and the table's space between columns.
    MIN_COLUMN = 8
    GAP = 2

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        kept = [len(c) for c in self.columns]
        for row in self.cells:
            kept = [max(k, *map(len, Text.from_markup(v).plain.split("\n"))) for k, v in zip(kept, row, strict=True)]
        needed = sum(
            kept[i] if c in self.whole else min(kept[i], self.MIN_COLUMN) for i, c in enumerate(self.columns)
        ) + self.GAP * (len(self.columns) - 1)
        yield self._table(kept, options.max_width) if needed <= options.max_width else self._blocks()

    def _table(self, kept: list[int], max_width: int) -> Table:
        # As wide as its title (up to the terminal): a title longer than the columns would wrap.
        title = len(Text.from_markup(self.title).plain) if self.title else 0
        result = Table(
            title=self.title,
            min_width=min(title, max_width),
            title_justify="left",
            header_style="bold",
            box=box.SIMPLE_HEAD,
            show_edge=False,
            pad_edge=False,
            collapse_padding=True,
        )
        for i, column in enumerate(self.columns):
            if column in self.whole:
                result.add_column(column, no_wrap=True, min_width=kept[i])
            else:
                result.add_column(column, overflow="fold")
        for row in self.cells:
            result.add_row(*row)
        return result

    def _blocks(self) -> Group:
        label = max(len(c) for c in self.columns[1:]) if len(self.columns) > 1 else 0
        lines: list[Text] = [Text(self.title, style="bold")] if self.title else []
        for row in self.cells:
            lines.append(Text.from_markup(row[0], style="bold", overflow="fold"))
            for column, value in zip(self.columns[1:], row[1:], strict=True):
                line = Text(f"  {column:<{label}}  ", overflow="fold")
                lines.append(line.append_text(Text.from_markup(value.replace("\n", " "))))
        return Group(*lines)
