"""``genesis check FILE``: the first step of writing a trait. It sends the file to
``POST /api/mutations/check`` — the gatekeeper, dedupe and the sandbox test a proposal gets, with
nothing recorded — and prints the verdict, the validation log and the sandbox report.

Its exit codes are a linter's, unlike the other commands': 0 passed, 1 rejected, 2 anything
that is not a verdict (bad arguments, an unreadable file, the API refusing or unreachable)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from cli.client import EXIT_USAGE, CliError
from cli.mutations import parse_replaces, say_options_for
from cli.output import Cli, cli_of, examples, handled
from genesis import rules

EXIT_PASSED = 0
EXIT_CHECK_REJECTED = 1
EXIT_NOT_CHECKED = EXIT_USAGE  # 2

EXAMPLES = examples(
    "genesis check examples/traits/forager.py",
    "genesis check my_trait.py --name scout --json",
    "genesis check v2.py --name scout --replaces live",
    "cat my_trait.py | genesis check - --name scout",
)

# The sandbox report's fields, in the order and words they are shown (its summary is the log's
# last line; the rest is in --json).
REPORT_ROWS = [
    ("verdict", "verdict"),
    ("ticks_run", "ticks run"),
    ("calls", "execute() calls"),
    ("call_us_mean", "µs per call (mean)"),
    ("call_us_max", "µs per call (max)"),
    ("trait_tick_ms", "trait ms per tick"),
    ("projected_fps", "projected fps"),
    ("intents_applied", "intents applied"),
    ("intents_rejected", "intents rejected"),
    ("exceptions", "exceptions"),
    ("first_error", "first error"),
    ("timeouts", "timeouts"),
    ("memory_blocks_per_tick", "memory blocks per tick"),
]


def trait_name_for(file: Path, name: str | None) -> str:
    """``--name``, or the file's name without ``.py`` (forager.py → forager)."""
    if name is not None:
        return name
    stem = file.stem if str(file) != "-" else ""
    if not re.match(rules.TRAIT_NAME_PATTERN, stem):
        source = "stdin" if str(file) == "-" else f"{file.name!r}"
        raise typer.BadParameter(
            f"no trait_name can be taken from {source}: pass --name (snake_case, e.g. --name hungry_forager)",
            param_hint="--name",
        )
    return stem


def render(cli: Cli, answer: dict, file: Path) -> None:
    for line in answer.get("validation_log") or []:
        cli.console.print(f"  [dim]{escape(line)}[/]")
    report = answer.get("sandbox_report")
    if report:
        grid = Table.grid(padding=(0, 2))
        for key, label in REPORT_ROWS:
            if report.get(key) not in (None, {}):
                grid.add_row(f"    {label}", _shown(report[key]))
        cli.console.print("  Sandbox report:")
        cli.console.print(grid)
    name = answer["trait_name"]
    if answer["verdict"] == "passed":
        cli.console.print(
            f"[bold green]Passed:[/] {name} would pass validation and the sandbox test (nothing recorded)"
        )
        cli.console.print(f"  propose it: genesis propose {escape(str(file))} --name {name}")
        return
    cli.console.print(f"[bold red]Rejected:[/] {answer.get('failure_reason_code')}")
    failed = [line for line in answer.get("validation_log") or [] if "FAILED" in line]
    for line in failed or (answer.get("validation_log") or [])[-1:]:
        cli.console.print(f"  [red]{escape(line)}[/]")


def _shown(value: Any) -> str:
    if isinstance(value, dict):
        value = ", ".join(f"{k} {v}" for k, v in value.items())
    return escape(str(value))  # a trait's own exception text is never markup


def register(app: typer.Typer) -> None:
    @app.command(epilog=EXAMPLES)
    @handled
    def check(
        ctx: typer.Context,
        file: Annotated[Path, typer.Argument(help="the trait's Python source ('-' reads stdin)", allow_dash=True)],
        name: Annotated[
            str | None, typer.Option("--name", "-n", help="trait_name (snake_case); default: the file's name")
        ] = None,
        replaces: Annotated[
            str | None,
            typer.Option(help="check a new version of your live trait: 'live', or a version: 3, or NAME@3"),
        ] = None,
        agent_id: Annotated[
            str | None, typer.Option(envvar="GENESIS_AGENT_ID", help="only without a key (GENESIS_AUTH=open)")
        ] = None,
        timeout: Annotated[float, typer.Option("--timeout", min=1, help="seconds to wait for the verdict")] = 90.0,
        json_out: Annotated[bool, typer.Option("--json", help="Print the API's answer as JSON (for scripts)")] = False,
    ) -> None:
        """Check a trait before proposing it: the gatekeeper, dedupe and the sandbox test a proposal
        gets, with its verdict, validation log and sandbox report — and nothing recorded (no
        mutation, nothing in the world). Checks have a rate limit of their own, apart from
        proposals. Exit code 0 passed, 1 rejected, 2 not checked."""
        cli = cli_of(ctx, json_out)
        trait_name = trait_name_for(file, name)
        body: dict[str, Any] = {"trait_name": trait_name}
        if (ref := parse_replaces(replaces, trait_name)) is not None:
            body["replaces"] = ref
        if agent_id is not None:
            body["agent_id"] = agent_id
        try:
            body["code"] = sys.stdin.read() if str(file) == "-" else file.read_text(encoding="utf-8")
            cli.say(f"Checking [bold]{trait_name}[/] (gatekeeper and sandbox test; nothing is recorded)")
            answer = cli.api.post("/api/mutations/check", json=body, timeout=timeout)
        except (OSError, UnicodeDecodeError) as exc:
            raise CliError(f"cannot read {file}: {exc}", code=EXIT_NOT_CHECKED) from exc
        except CliError as err:  # no verdict: not a rejection of the code
            err.code = EXIT_NOT_CHECKED
            say_options_for(err, trait_name)
            raise
        cli.emit(answer, lambda: render(cli, answer, file))
        raise typer.Exit(EXIT_PASSED if answer.get("verdict") == "passed" else EXIT_CHECK_REJECTED)
