"""What the world is doing: ``genesis world stats``, ``genesis traits`` (the live traits and their
verdicts) and ``genesis tasks`` (the Watcher's open tasks for agents)."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from genesis.cli.client import segment
from genesis.cli.output import Cli, cli_of, examples, group, handled, table, versioned

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (for scripts)")]
# The statuses of a mutation whose trait is in the world: observed, or judged and kept.
LIVE_STATUSES = ("activated", "kept")
LIST_LIMIT = 200  # GET /api/mutations' largest page


def number(value: Any, digits: int = 0) -> str:
    """``12,345`` / ``55.8``; ``?`` when the engine did not report it."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "?"
    return f"{value:,.{digits}f}"


def render_stats(cli: Cli, stats: dict) -> None:
    traits = [str(t) for t in stats.get("active_traits") or []]
    state = "running" if stats.get("running") else "[yellow]not running[/] (last report)"
    rows = [
        [
            "world",
            f"{state}, tick {number(stats.get('tick'))} at {number(stats.get('ticks_per_second'), 1)} ticks/s "
            f"(mean tick {number(stats.get('mean_tick_ms'), 2)} ms, {number(stats.get('tick_overruns'))} over budget)",
        ],
        [
            "population",
            f"{number(stats.get('population'))} Molbots, average energy {number(stats.get('avg_energy'), 1)}",
        ],
        ["live traits", f"{len(traits)}: {escape(', '.join(traits))}" if traits else "none yet"],
        ["mutations", f"{number(stats.get('mutations_applied'))} live (activated or kept)"],
    ]
    summary = Table.grid(padding=(0, 2))
    summary.add_column(style="bold", no_wrap=True)
    summary.add_column()
    for row in rows:
        summary.add_row(*row)
    cli.console.print(summary)
    if traits:
        cli.console.print("[dim]each trait's version, owner and verdict: genesis traits[/]")


def outcome(mutation: dict | None) -> dict:
    """What became of a live trait's mutation (the fields ``genesis traits --json`` adds)."""
    mutation = mutation or {}
    return {
        "mutation_status": mutation.get("status"),
        "fitness_verdict": mutation.get("fitness_verdict"),
        "quarantined": bool(mutation.get("quarantine")),
        "quarantine": mutation.get("quarantine"),
    }


def verdict(trait: dict) -> str:
    """For people: still observed, kept with its fitness verdict, or quarantined by the engine
    (it no longer runs; its rollback follows)."""
    if trait["quarantined"]:
        return "[bold red]quarantined[/]"
    status = trait["mutation_status"]
    if status == "activated":
        return "observing"
    fitness = trait["fitness_verdict"]
    return f"{status}, {fitness}" if fitness else str(status or "?")


def live_traits(cli: Cli) -> dict:
    """``GET /api/traits`` joined with the mutations that made them (their status and fitness
    verdict, from ``GET /api/mutations``), plus the traits the engine quarantined whose rollback
    has not run yet (the API lists those as not live)."""
    answer = cli.api.get("/api/traits", expect=("traits",))
    listed = list(answer["traits"])
    while answer.get("next_cursor"):  # more live traits than one page holds
        answer = cli.api.get("/api/traits", params={"cursor": answer["next_cursor"]}, expect=("traits",))
        listed += answer["traits"]
    mutations: dict[str, dict] = {}
    for status in LIVE_STATUSES:
        page = cli.api.get("/api/mutations", params={"status": status, "limit": LIST_LIMIT}, expect=("mutations",))
        mutations.update(
            {m["mutation_id"]: m for m in page["mutations"] if isinstance(m, dict) and m.get("mutation_id")}
        )
    traits = []
    for trait in listed:
        mutation = mutations.get(trait.get("mutation_id"))
        if mutation is None and trait.get("mutation_id"):  # older than the newest pages: ask for it alone
            path = f"/api/mutations/{segment(str(trait['mutation_id']), 'mutation id')}/status"
            mutation = cli.api.get(path, expect=("status",))
        traits.append({**trait, **outcome(mutation)})
    live = {t.get("trait_name") for t in traits}
    for mutation in mutations.values():
        if mutation.get("quarantine") and mutation.get("trait_name") not in live:
            traits.append(
                {
                    "trait_name": mutation.get("trait_name"),
                    "version": mutation.get("trait_version"),
                    "mutation_id": mutation["mutation_id"],
                    "agent_id": mutation.get("agent_id"),
                    "carriers": None,
                    **outcome(mutation),
                }
            )
    traits.sort(key=lambda t: str(t.get("trait_name")))
    return {"traits": traits, "snapshot_tick": answer.get("snapshot_tick")}


def render_traits(cli: Cli, answer: dict) -> None:
    traits = answer["traits"]
    if not traits:
        cli.console.print("no live traits yet: propose one with `genesis propose FILE --name NAME`")
        return
    rows = [
        [
            versioned(t.get("trait_name"), t.get("version")),
            t.get("mutation_id"),
            t.get("agent_id"),
            t.get("carriers"),
            verdict(t),
        ]
        for t in traits
    ]
    tick = answer.get("snapshot_tick")
    title = f"{sum(1 for t in traits if not t['quarantined'])} live trait(s)" + (
        f", carriers at tick {tick:,}" if isinstance(tick, int) else ""
    )
    cli.console.print(
        table(title, ["trait", "mutation", "agent", "carriers", "verdict"], rows, whole=("trait", "mutation", "agent"))
    )
    for t in traits:
        if t["quarantined"]:
            reason = escape(str((t.get("quarantine") or {}).get("reason", "")))
            cli.console.print(
                f"  {t.get('trait_name')} is quarantined: {reason} (it no longer runs; its rollback follows)",
                soft_wrap=True,
            )


def render_tasks(cli: Cli, answer: dict) -> None:
    tasks = answer["tasks"]
    if not tasks:
        cli.console.print("no open tasks: the Watcher publishes one when the world runs into trouble")
        return
    now = time.time()
    rows = [
        [
            t.get("task_id"),
            t.get("severity"),
            t.get("problem_type"),
            f"{max(0, int(t['expires_at'] - now))} s" if isinstance(t.get("expires_at"), (int, float)) else "?",
            t.get("claimed_by") or "-",
            escape(str(t.get("description", ""))),
        ]
        for t in tasks
    ]
    columns = ["task", "severity", "problem", "expires in", "claimed by", "description"]
    cli.console.print(table(f"{len(tasks)} open task(s), soonest expiry first", columns, rows, whole=("task",)))
    cli.console.print("[dim]answer one: genesis propose FILE --name NAME --task TASK_ID[/]")


def register(app: typer.Typer) -> None:
    world = group(app, "world", "The running world", "genesis world stats", "genesis world stats --json")

    @world.command("stats", epilog=examples("genesis world stats", "genesis world stats --json"))
    @handled
    def world_stats(ctx: typer.Context, json_out: JsonOpt = False) -> None:
        """Tick rate, population, energy, live traits, applied mutations."""
        cli = cli_of(ctx, json_out)
        answer = cli.api.get("/api/stats", expect=("tick",))
        cli.emit(answer, lambda: render_stats(cli, answer))

    @app.command(epilog=examples("genesis traits", "genesis traits --json"))
    @handled
    def traits(ctx: typer.Context, json_out: JsonOpt = False) -> None:
        """The live traits, who made them and how they are doing.

        Each trait's live version, the mutation and agent that made it, its carriers at the
        latest snapshot, and its verdict: observing, kept with its fitness, or quarantined by
        the engine (it no longer runs; its rollback follows within seconds)."""
        cli = cli_of(ctx, json_out)
        answer = live_traits(cli)
        cli.emit(answer, lambda: render_traits(cli, answer))

    @app.command(epilog=examples("genesis tasks", "genesis tasks --limit 5 --json"))
    @handled
    def tasks(
        ctx: typer.Context,
        limit: Annotated[int, typer.Option(min=1, max=500, help="at most this many, soonest expiry first")] = 100,
        json_out: JsonOpt = False,
    ) -> None:
        """Open tasks for agents: what the world needs.

        Published by the Watcher (or an operator): the problem, how long the task stays open,
        and who has claimed it. Answer one with `genesis propose FILE --name NAME --task TASK_ID`."""
        cli = cli_of(ctx, json_out)
        answer = cli.api.get("/api/agents/context/tasks", params={"limit": limit}, expect=("tasks",))
        cli.emit(answer, lambda: render_tasks(cli, answer))
