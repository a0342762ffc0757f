"""What the world is doing: ``genesis world stats``, ``genesis traits`` (the live traits and their
verdicts) and ``genesis tasks`` (the Watcher's open tasks for agents)."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from cli import audit, rollback
from cli.output import Cli, cli_of, examples, group, handled, table, versioned

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (for scripts)")]


def number(value: Any, digits: int = 0) -> str:
    """``12,345`` / ``55.8``; ``?`` when the engine did not report it."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "?"
    return f"{value:,.{digits}f}"


def render_stats(cli: Cli, stats: dict) -> None:
    live = stats.get("live_traits")
    running = [str(t) for t in stats.get("active_traits") or []]
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
        ["live traits", _names(live) if isinstance(live, list) else "? (Postgres is unreachable)"],
    ]
    if not isinstance(live, list) or sorted(map(str, live)) != sorted(running):
        rows.append(["running", f"{_names(running)} (what the engine's trait host ran at its last report)"])
    applied = number(stats.get("mutations_applied"))
    rows.append(["mutations", f"{applied} applied and not rolled back (older versions too)"])
    summary = Table.grid(padding=(0, 2))
    summary.add_column(style="bold", no_wrap=True)
    summary.add_column()
    for row in rows:
        summary.add_row(*row)
    cli.console.print(summary)
    if live or running:
        cli.console.print("[dim]each trait's version, owner and verdict: genesis traits[/]")


def _names(traits: list) -> str:
    return f"{len(traits)}: {escape(', '.join(map(str, traits)))}" if traits else "none yet"


def verdict(trait: dict) -> str:
    """For people: still observed, kept with its fitness verdict, or quarantined by the engine
    (it no longer runs; its rollback follows, or has happened). A live trait the engine has not
    loaded yet (within a second or two of activation) says so."""
    if trait["quarantined"]:
        return "[bold red]quarantined[/]" + (", rolled back" if trait.get("mutation_status") == "rolled_back" else "")
    status = trait.get("mutation_status")
    fitness = trait.get("fitness_verdict")
    shown = "observing" if status == "activated" else f"{status}, {fitness}" if fitness else str(status or "?")
    return shown + (" [yellow](not running yet)[/]" if trait.get("running") is False else "")


def live_traits(cli: Cli) -> dict:
    """``GET /api/traits``: the live traits, then the traits whose newest version the engine
    quarantined (not live; marked ``quarantined``), and the kept traits selection took out since
    (``departed``: extinct, or rolled back by a late verdict)."""
    answer = cli.api.get("/api/traits", expect=("traits",))
    listed, quarantined = list(answer["traits"]), list(answer.get("quarantined") or [])
    departed = [d for d in answer.get("departed") or [] if isinstance(d, dict)]  # on the first page
    while answer.get("next_cursor"):  # more live traits than one page holds
        answer = cli.api.get("/api/traits", params={"cursor": answer["next_cursor"]}, expect=("traits",))
        listed += answer["traits"]
    traits = [{**t, "quarantined": False, "quarantine": None} for t in listed if isinstance(t, dict)]
    for q in quarantined:
        if isinstance(q, dict):
            traits.append({**q, "carriers": None, "running": False, "fitness_verdict": None, "quarantined": True})
    return {
        "traits": traits,
        "departed": departed,
        "snapshot_tick": answer.get("snapshot_tick"),
        "max_live_traits": answer.get("max_live_traits"),
    }


def render_departed(cli: Cli, answer: dict) -> None:
    """The kept traits selection took out since their verdict, newest first."""
    for d in answer.get("departed") or []:
        how = "went extinct" if d.get("how") == "extinct" else "was rolled back late"
        again = f" (revive: genesis revive {d.get('mutation_id')})" if d.get("how") == "extinct" else ""
        cli.console.print(
            f"  {d.get('trait_name')} v{d.get('version')} {how}: {escape(str(d.get('reason')))}{again}", soft_wrap=True
        )


def render_traits(cli: Cli, answer: dict) -> None:
    traits = answer["traits"]
    if not traits:
        cli.console.print("no live traits yet: propose one with `genesis propose FILE --name NAME`")
        render_departed(cli, answer)
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
    live = [t for t in traits if not t["quarantined"]]
    tick = answer.get("snapshot_tick")
    bound = answer.get("max_live_traits")
    title = f"{len(live)}" + (f" of at most {bound}" if isinstance(bound, int) else "") + " live trait(s)"
    title += f", carriers at tick {tick:,}" if isinstance(tick, int) else ""
    columns = ["trait", "mutation", "agent", "carriers", "verdict"]
    cli.console.print(table(title, columns, rows, whole=("trait", "mutation", "agent")))
    for t in traits:
        if t["quarantined"]:
            reason = escape(str((t.get("quarantine") or {}).get("reason", "")))
            after = (
                "it no longer runs; it was rolled back"
                if t.get("mutation_status") == "rolled_back"
                else "it no longer runs; its rollback follows"
            )
            cli.console.print(f"  {t.get('trait_name')} is quarantined: {reason} ({after})", soft_wrap=True)
    render_departed(cli, answer)
    if any(t.get("fitness_verdict") == "inconclusive" for t in live):
        cli.console.print("[dim]inconclusive: its verdict could not decide (`genesis status <mutation>` says why)[/]")


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
    rollback.register(world)
    audit.register(app, world)

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
        latest snapshot, whether the engine runs it, and its verdict: observing, or kept with
        its fitness (inconclusive: too few carriers to judge it). Then the traits the engine
        quarantined (they no longer run; their rollback follows within seconds)."""
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
