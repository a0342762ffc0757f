"""``genesis journal status``: what the world's journal holds on disk, its archive, the oldest tick
a replay can start from and the retention in force (an operator's command)."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.output import Cli, cli_of, examples, group, handled, when

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (for scripts)")]


def size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def render_status(cli: Cli, s: dict) -> None:
    p, a, d = s["policy"], s["archive"], s["disk"]
    age = f"for {p['keep_ticks']:,} ticks" if p["keep_ticks"] else "for ever"
    oldest = s["oldest_replayable_tick"]
    lines = [
        f"journal      {size(s['records_bytes'])} in {s['segments']} segment(s) from record {s['first_seq']}, "
        f"{size(s['snapshots_bytes'])} in {s['snapshots']} snapshot(s)",
        f"replayable   from tick {oldest:,}" if oldest is not None else "replayable   no snapshot yet",
        f"archive      {a['segments']} segment(s), {size(a['bytes'])}"
        + (f", records {a['first_seq']}-{a['last_seq']} from tick {a['first_tick']:,}" if a["segments"] else "")
        + f", {a['snapshots']} snapshot(s)",
        f"disk         {size(d['free_bytes'])} free of {size(d['total_bytes'])}"
        + (" [red]— low: free some before the journal fills it[/]" if d["low"] else ""),
        f"retention    snapshots: the last {p['keep_last']}, every {p['keep_every']}th {age}; "
        f"older segments: {p['segments']} (the manifest's retention: genesis governance manifest)",
        f"as of        {when(s['updated_at'])}",
    ]
    for line in lines:
        cli.console.print(line)


def register(app: typer.Typer) -> None:
    journal = group(app, "journal", "The world's journal on disk (operator).", "genesis journal status")

    @journal.command("status", epilog=examples("genesis journal status", "genesis journal status --json"))
    @handled
    def status(ctx: typer.Context, json_out: JsonOpt = False) -> None:
        """Disk use of the journal and its archive, the oldest tick a replay can start from, the
        disk's free space and the retention in force (operator).

        The engine publishes it every 10 seconds; segments older than the oldest kept snapshot
        are archived or deleted as the manifest's `retention.segments` says, each time with a
        receipt (docs/journal.md)."""
        cli = cli_of(ctx, json_out)
        answer = cli.api.get("/v1/journal/status", expect=("policy", "disk"))
        cli.emit(answer, lambda: render_status(cli, answer))
