"""``genesis workflows replay``: replay recorded histories against the current workflow code."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import Progress

from cli.client import EXIT_NONDETERMINISM, CliError
from cli.output import Cli, cli_of, examples, group, handled


def render_report(cli: Cli, report) -> None:
    """One ReplayReport (cli/replay.py) for people."""
    title = f"{report.workflow_id} ({report.workflow_type}, run {report.run_id or '?'})"
    if report.ok:
        cli.console.print(f"[green]✔[/] {title} replays against the current code")
        return
    cli.console.print(f"[bold red]✘[/] {title}: [bold]{report.error_kind}[/]", soft_wrap=True)
    if report.event is not None:
        where = f"    at {report.event.describe()}"
        if report.issued:
            where += f": the history recorded this; the current code issued {report.issued}"
        cli.console.print(where, soft_wrap=True)
        if report.candidates:
            cli.console.print(f"    (the message names it only by name: it is one of events {report.candidates})")
    elif report.issued:
        cli.console.print(f"    the current code issued {report.issued}")
    cli.console.print(f"    [dim]{report.message}[/]", soft_wrap=True)
    if report.commands:
        cli.console.print("    recorded commands:")
        for command in report.commands:
            marker = "[bold red]▶[/]" if report.event and command.event_id == report.event.event_id else " "
            cli.console.print(f"     {marker} {command.describe()}", soft_wrap=True)


def register(app: typer.Typer) -> None:
    workflows = group(
        app,
        "workflows",
        "Temporal workflows: replay histories against the current code",
        "genesis workflows replay mutation-mut_3f9c2a1b7d40",
        "genesis workflows replay --failed --since 1d",
    )

    @workflows.command(
        epilog=examples(
            "genesis workflows replay mutation-mut_3f9c2a1b7d40",
            "genesis workflows replay mutation-mut_3f9c2a1b7d40 --run-id 8d1c0f0e-5b1e-4d55-9a56-1c2b3d4e5f60",
            "genesis workflows replay --failed --since 6h --json",
            "genesis workflows replay --file tests/histories/mutation_kept.json",
            "genesis workflows replay --file tests/histories/task_expired.json --json",
        )
    )
    @handled
    def replay(
        ctx: typer.Context,
        workflow_id: Annotated[str | None, typer.Argument(help="replay this workflow's history")] = None,
        run_id: Annotated[str | None, typer.Option(help="a run of WORKFLOW_ID (default: the latest)")] = None,
        failed: Annotated[
            bool, typer.Option("--failed", help="replay every workflow run that failed within --since")
        ] = False,
        since: Annotated[str, typer.Option(help="with --failed: how far back (30m, 6h, 1d, 2w)")] = "1d",
        limit: Annotated[int, typer.Option(min=1, max=10_000, help="with --failed: at most this many runs")] = 200,
        files: Annotated[
            list[Path] | None,
            typer.Option(
                "--file", help="replay a history JSON file (Temporal's format; repeatable)", exists=True, dir_okay=False
            ),
        ] = None,
        temporal: Annotated[
            str | None,
            typer.Option(envvar="GENESIS_TEMPORAL_ADDRESS", help="Temporal frontend (default 127.0.0.1:7233)"),
        ] = None,
        namespace: Annotated[
            str | None, typer.Option(envvar="GENESIS_TEMPORAL_NAMESPACE", help="Temporal namespace (default: default)")
        ] = None,
        json_out: Annotated[bool, typer.Option("--json", help="print one JSON document")] = False,
    ) -> None:
        """Replay histories from Temporal (or files) with the worker's workflows.

        A nondeterminism error names the workflow, the recorded event and what the code issued
        instead. Exit code 7 if any history does not replay."""
        from cli import replay as replaying  # temporalio: imported only by this command

        cli = cli_of(ctx, json_out)
        if not (workflow_id or failed or files):
            raise typer.BadParameter("give a WORKFLOW_ID, --failed, or --file PATH")
        if failed:
            try:
                window = replaying.parse_since(since)
            except ValueError as exc:
                raise typer.BadParameter(str(exc), param_hint="--since") from exc
        histories = [_read_file(path) for path in files or []]
        if workflow_id or failed:
            histories += asyncio.run(
                _fetch(temporal, namespace, workflow_id, run_id, window if failed else None, limit)
            )
        if failed and not histories:
            cli.say(f"no workflow failed in the last {since} ({replaying.failed_query(window)})")
        reports = _replay_with_progress(cli, histories)
        bad = [r for r in reports if not r.ok]

        def render() -> None:
            for report in reports:
                render_report(cli, report)
            if reports:
                cli.console.print(f"{len(reports) - len(bad)}/{len(reports)} replayed cleanly")

        cli.emit({"replayed": len(reports), "failed": len(bad), "reports": [r.to_json() for r in reports]}, render)
        # The SDK's Replayer can abort the interpreter at exit (sdk-python#300): leave at once.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_NONDETERMINISM if bad else 0)


def _read_file(path: Path):
    from temporalio.client import WorkflowHistory

    try:
        text = path.read_text(encoding="utf-8")
        workflow_id = path.stem
        try:  # `temporal workflow show --output json` and fetch_history().to_json() both fit
            started = json.loads(text)["events"][0]
            workflow_id = started.get("workflowExecutionStartedEventAttributes", {}).get("workflowId") or path.stem
        except (ValueError, KeyError, IndexError, AttributeError):
            pass
        return WorkflowHistory.from_json(workflow_id if workflow_id != path.stem else str(path), text)
    except Exception as exc:  # not JSON, or not a history
        raise CliError(f"{path} is not a Temporal history in JSON: {exc}") from exc


async def _fetch(address, namespace, workflow_id, run_id, window, limit):
    from temporalio.service import RPCError

    from cli import replay as replaying
    from genesis.config import Settings
    from genesis.temporal import connect

    overrides = {k: v for k, v in (("temporal_address", address), ("temporal_namespace", namespace)) if v}
    settings = Settings(**overrides)
    try:
        client = await asyncio.wait_for(connect(settings), timeout=10)
    except Exception as exc:
        raise CliError(
            f"cannot reach Temporal at {settings.temporal.address}: {exc} (set --temporal or GENESIS_TEMPORAL_ADDRESS)"
        ) from exc
    try:
        targets = [(workflow_id, run_id)] if workflow_id else []
        if window is not None:
            targets += await replaying.failed_runs(client, window, limit)
        return await replaying.fetch_histories(client, targets)
    except RPCError as exc:
        raise CliError(f"Temporal refused the request: {exc}") from exc


def _replay_with_progress(cli: Cli, histories: list) -> list:
    from cli import replay as replaying

    if not histories:
        return []
    with Progress(console=cli.err_console, transient=True, disable=cli.json or len(histories) < 3) as progress:
        task = progress.add_task("replaying", total=len(histories))
        return asyncio.run(replaying.replay(histories, on_result=lambda _: progress.advance(task)))
