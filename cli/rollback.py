"""``genesis world snapshots`` and ``genesis world rollback``: the snapshots the world keeps, and
taking the world back to one as a new epoch of its journal (an operator's command)."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.markup import escape

from cli.client import CliError, segment
from cli.output import Cli, cli_of, examples, handled, table, when

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (for scripts)")]
WAIT_S = 30.0


def render_snapshots(cli: Cli, answer: dict) -> None:
    snaps = answer["snapshots"]
    if not snaps:
        cli.console.print("No snapshots yet (the engine writes one when it starts, then every few thousand ticks).")
        return
    rows = [
        [s["name"], s["epoch"], s["tick"], s["journal_seq"], when(s["created_at"]), ", ".join(s["pinned_for"]) or "-"]
        for s in snaps
    ]
    columns = ["name", "epoch", "tick", "record", "taken", "rollback point of"]
    cli.console.print(table(f"{len(snaps)} kept snapshot(s)", columns, rows, whole=("name",)))


def render_rollback(cli: Cli, answer: dict) -> None:
    status = answer.get("status")
    if status == "applied":
        cli.console.print(
            f"[green]applied[/]: the world went back from tick {answer['from_tick']} (epoch {answer['from_epoch']}) "
            f"to tick {answer['to_tick']} of snapshot {answer['snapshot']}; it runs on as epoch {answer['epoch']} "
            f"(journal record {answer['journal_seq']}, state {answer['state_hash'][:16]}…)"
        )
    elif status == "refused":
        cli.console.print(f"[red]refused[/]: {escape(str(answer.get('reason')))}")
    else:
        cli.console.print(f"requested ({answer['request_id']}): the engine has not taken it yet")


def register(world: typer.Typer) -> None:
    @world.command("snapshots", epilog=examples("genesis world snapshots", "genesis world snapshots --json"))
    @handled
    def snapshots(ctx: typer.Context, json_out: JsonOpt = False) -> None:
        """The snapshots the world keeps: the points a rollback can go back to.

        The last few, every Nth ever taken, and the rollback points of mutations still under
        observation (GENESIS_JOURNAL_KEEP_LAST / _KEEP_EVERY)."""
        cli = cli_of(ctx, json_out)
        answer = cli.api.get("/v1/world/snapshots", expect=("snapshots",))
        cli.emit(answer, lambda: render_snapshots(cli, answer))

    @world.command(
        "rollback",
        epilog=examples(
            'genesis world rollback --to-tick 36000 --reason "a trait starved the world"',
            'genesis world rollback --snapshot snap-e0000-t000000036000-s000000036009-n12.gsn --reason "bad params"',
            'genesis world rollback --mutation mut_5d0c2e9a41f3 --reason "its trait starved the world"',
        ),
    )
    @handled
    def rollback(
        ctx: typer.Context,
        reason: Annotated[str, typer.Option(help="why: recorded in the journal")],
        to_tick: Annotated[
            int | None, typer.Option("--to-tick", min=0, help="the latest kept snapshot at or before this tick")
        ] = None,
        snapshot: Annotated[str | None, typer.Option(help="a kept snapshot's name (genesis world snapshots)")] = None,
        mutation: Annotated[
            str | None, typer.Option(help="the snapshot from just before this mutation's trait went live")
        ] = None,
        wait: Annotated[bool, typer.Option(help="wait until the engine applied or refused it")] = True,
        json_out: JsonOpt = False,
    ) -> None:
        """Take the world back to a kept snapshot (operator).

        The journal only grows: the rollback is a new epoch, recorded with where it came from, the
        snapshot and the reason; the abandoned epoch's records stay in the journal. The engine
        applies it between two ticks, usually within a second."""
        targets = {"tick": to_tick, "snapshot": snapshot, "mutation_id": mutation}
        given = {key: value for key, value in targets.items() if value is not None}
        if len(given) != 1:
            raise CliError("give exactly one of --to-tick, --snapshot or --mutation", code=2)
        cli = cli_of(ctx, json_out)
        body = {"reason": reason, **given}
        accepted = cli.api.post("/v1/world/rollback", json=body, expect=("request_id",))
        answer = accepted
        if wait:
            deadline = time.monotonic() + WAIT_S
            while True:
                answer = cli.api.get(
                    f"/v1/world/rollbacks/{segment(accepted['request_id'], 'request_id')}", expect=("status",)
                )
                if answer["status"] != "requested" or time.monotonic() > deadline:
                    break
                time.sleep(0.25)
        cli.emit(answer, lambda: render_rollback(cli, answer))
        if answer.get("status") == "refused":
            raise typer.Exit(1)
