"""``genesis world replay`` (verify a range of the journal by replaying it) and ``genesis audit
events | export | verify`` (the journal's audit events; an export checked offline)."""

from __future__ import annotations

import hashlib
import json
import random
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from cli.client import CliError
from cli.output import Cli, cli_of, examples, group, handled, table
from cli.receipts import KeysOpt, TrustOpt, pinned_keys
from genesis import signing
from journal import rederive

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (for scripts)")]
POLL_S = 2.0


def render_events(cli: Cli, events: list[dict], title: str) -> None:
    """Audit events as a table: journal record, tick, epoch, kind, trait, mutation, agent, cause."""
    rows = [
        [
            e["seq"],
            e["tick"],
            e["epoch"],
            e["kind"],
            e["trait_name"] or "-",
            e["mutation_id"] or "-",
            e["agent_id"] or "-",
            e["cause"] or "-",
        ]
        for e in events
    ]
    columns = ["record", "tick", "epoch", "kind", "trait", "mutation", "agent", "cause"]
    cli.console.print(table(title, columns, rows, whole=("mutation", "agent")))


def render_replay(cli: Cli, report: dict) -> None:
    if report["equal"]:
        cli.console.print(
            f"[green]equal[/]: ticks {report['from_tick']}-{report['to_tick']} replay to the recorded state hashes "
            f"({report['ticks_checked']} ticks checked, {report['records_replayed']} records replayed from snapshot "
            f"{report['snapshot']} in {report['elapsed_sec']} s, {report['replay_ticks_per_second']} ticks/s, "
            "no trait host)"
        )
        return
    d = report.get("divergence") or {}
    cli.console.print(
        f"[red]diverges[/] at record {d.get('seq')} (tick {d.get('tick')}, epoch {d.get('epoch')}): "
        f"{escape(str(d.get('reason', 'the replayed state differs from the recorded one')))}",
        soft_wrap=True,
    )
    rows = [
        [x["field"], x["entity"] if x["entity"] is not None else "several", x["recorded"], x["replayed"], x["note"]]
        for x in d.get("differences", [])
    ]
    if rows:
        cli.console.print(table("what differs", ["field", "entity", "recorded", "replayed", "note"], rows))


def verify_export(text: str, keys: dict[str, bytes]) -> dict[str, Any]:
    """Check an audit export offline: the events' sha256 and count against the manifest, the
    manifest's signed receipt, and the events' order."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise CliError("an empty export", code=2)
    try:
        last = json.loads(lines[-1])
        events = [json.loads(line) for line in lines[:-1]]
    except json.JSONDecodeError as exc:
        raise CliError(f"not an audit export (NDJSON): {exc}", code=2) from exc
    manifest, receipt = last.get("manifest"), last.get("receipt")
    problems = []
    if not isinstance(manifest, dict):
        raise CliError("no manifest on the export's last line", code=2)
    digest = hashlib.sha256(b"".join(line.encode() + b"\n" for line in lines[:-1])).hexdigest()
    if digest != manifest.get("events_sha256"):
        problems.append("the events' sha256 differs from the manifest's: an event was changed, added or removed")
    if len(events) != manifest.get("count"):
        problems.append(f"{len(events)} events, the manifest says {manifest.get('count')}")
    keys_order = [(e.get("seq"), e.get("index")) for e in events]
    if keys_order != sorted(keys_order):
        problems.append("the events are not in journal order")
    if receipt is None:
        problems.append("the manifest is not signed (the export could not reach the worker)")
    else:
        from audit import receipts

        try:
            signed = receipts.from_json(receipt)
            signing.verify(signed, keys)
            if signed["kind"] != "audit.export" or signed["body"].get("manifest") != manifest:
                problems.append("the receipt is not this manifest's audit.export receipt")
        except (signing.ReceiptInvalid, ValueError, TypeError) as exc:
            problems.append(f"the manifest's receipt does not verify: {exc}")
    return {"ok": not problems, "problems": problems, "events": len(events), "manifest": manifest}


def _filters(**given: Any) -> dict[str, Any]:
    return {k: v for k, v in given.items() if v not in (None, [], ())}


def register(app: typer.Typer, world: typer.Typer) -> None:
    @world.command(
        "replay",
        epilog=examples(
            "genesis world replay --from-tick 0 --to-tick 36000",
            "genesis world replay --from-tick 500 --to-tick 900 --json",
        ),
    )
    @handled
    def replay(
        ctx: typer.Context,
        from_tick: Annotated[int, typer.Option("--from-tick", min=0, help="first tick to check")],
        to_tick: Annotated[int, typer.Option("--to-tick", min=0, help="last tick to check")],
        json_out: JsonOpt = False,
    ) -> None:
        """Verify the world's history by replaying it (operator).

        From the latest kept snapshot at or before --from-tick the journal's records are replayed
        (no trait host, no container) and every recorded state hash compared: equal, or the first
        divergent tick with the Molbots and fields that differ. An end past the running world's
        tick is pinned at that tick; the command follows the replay to its end, with progress.
        Exit status 1 if it diverges."""
        cli = cli_of(ctx, json_out)
        params = {"from": from_tick, "to": to_tick}
        with cli.console.status("replaying the journal ...") as shown:
            while True:
                status, answer = cli.api.get_status("/v1/world/replay/verify", params=params)
                if status == 200:
                    break
                # the range as the API pinned it (an end past the running world's tick is cut there):
                # asking for that range follows the same replay to its end
                params["to"] = int(answer.get("to_tick", params["to"]))
                progress = answer.get("progress") or {}
                at = f"at tick {progress.get('tick')} of {params['to']}" if progress else f"to tick {params['to']}"
                shown.update(f"replaying the journal ({answer.get('workflow_id', '')}): {at}")
                time.sleep(POLL_S)
        cli.emit(answer, lambda: render_replay(cli, answer))
        if not answer.get("equal"):
            raise typer.Exit(1)

    audit = group(app, "audit", "The world's audit trail (operator)", "genesis audit events --kind world.rollback")

    @audit.command(
        "events",
        epilog=examples("genesis audit events --kind trait.left", "genesis audit events --agent AGENT_ID --json"),
    )
    @handled
    def events(
        ctx: typer.Context,
        kind: Annotated[list[str] | None, typer.Option(help="event kind (repeat for several)")] = None,
        agent: Annotated[str | None, typer.Option(help="an agent's id")] = None,
        mutation: Annotated[str | None, typer.Option(help="a mutation's id")] = None,
        trait: Annotated[str | None, typer.Option(help="a trait's name")] = None,
        from_tick: Annotated[int | None, typer.Option("--from-tick", min=0)] = None,
        to_tick: Annotated[int | None, typer.Option("--to-tick", min=0)] = None,
        epoch: Annotated[int | None, typer.Option(min=0)] = None,
        limit: Annotated[int, typer.Option(min=1, max=1000)] = 100,
        json_out: JsonOpt = False,
    ) -> None:
        """Audit events of the world's journal, oldest first: traits arriving and leaving,
        rollbacks, parameter changes, ticks the trait host missed, receipts."""
        cli = cli_of(ctx, json_out)
        params = _filters(
            kind=kind,
            agent_id=agent,
            mutation_id=mutation,
            trait=trait,
            from_tick=from_tick,
            to_tick=to_tick,
            epoch=epoch,
        )
        answer = cli.api.get("/v1/audit/events", params={**params, "limit": limit}, expect=("events",))
        cli.emit(answer, lambda: render_events(cli, answer["events"], f"{len(answer['events'])} audit event(s)"))

    @audit.command(
        "export",
        epilog=examples(
            "genesis audit export --out audit.ndjson", "genesis audit export --trait forager --out f.ndjson"
        ),
    )
    @handled
    def export(
        ctx: typer.Context,
        out: Annotated[Path, typer.Option(help="the NDJSON file to write")],
        kind: Annotated[list[str] | None, typer.Option(help="event kind (repeat for several)")] = None,
        agent: Annotated[str | None, typer.Option(help="an agent's id")] = None,
        mutation: Annotated[str | None, typer.Option(help="a mutation's id")] = None,
        trait: Annotated[str | None, typer.Option(help="a trait's name")] = None,
        from_tick: Annotated[int | None, typer.Option("--from-tick", min=0)] = None,
        to_tick: Annotated[int | None, typer.Option("--to-tick", min=0)] = None,
        json_out: JsonOpt = False,
    ) -> None:
        """Export audit events as NDJSON with a signed manifest (check it with `genesis audit verify`)."""
        cli = cli_of(ctx, json_out)
        params = _filters(
            kind=kind, agent_id=agent, mutation_id=mutation, trait=trait, from_tick=from_tick, to_tick=to_tick
        )
        text = cli.api.get_text("/v1/audit/export", params=params)
        out.write_text(text)
        manifest = json.loads(text.splitlines()[-1])["manifest"]
        cli.emit(
            {"file": str(out), "manifest": manifest},
            lambda: cli.console.print(f"{manifest['count']} event(s) written to {out}"),
        )

    @audit.command(
        "verify",
        epilog=examples(
            "genesis audit verify audit.ndjson --keys keys.json",
            "genesis audit verify audit.ndjson --trust k_1a2b3c4d5e6f7a8b",
            "genesis audit verify audit.ndjson --keys keys.json --journal .state/journal --sample 500",
        ),
    )
    @handled
    def verify(
        ctx: typer.Context,
        file: Annotated[Path, typer.Argument(help="an export of `genesis audit export` or GET /v1/audit/export")],
        keys: KeysOpt = None,
        trust: TrustOpt = None,
        journal: Annotated[
            Path | None,
            typer.Option(help="the world's journal directory: also derive every exported event again from it"),
        ] = None,
        archive: Annotated[
            Path | None,
            typer.Option(
                help="with --journal: the journal's archive, for the segments retention retired "
                "(default: <journal>-archive, when it exists)"
            ),
        ] = None,
        sample: Annotated[
            int | None, typer.Option(min=1, help="with --journal: check this many events, drawn at random")
        ] = None,
        seed: Annotated[int | None, typer.Option(help="the sample's seed (printed; default: a random one)")] = None,
        json_out: JsonOpt = False,
    ) -> None:
        """Check an audit export on this machine: its events against the manifest's sha256 and
        count, their order, and the manifest's signature with a pinned key (--keys or --trust).
        With --journal, each exported event (or a --sample of them) is derived again from the
        journal's records and compared, and none the journal holds in the export's range and
        filter may be missing: the database the export was read from is not trusted.
        Exit status 1 if anything fails."""
        cli = cli_of(ctx, json_out)
        if not file.exists():
            raise CliError(f"{file}: no such file", code=2)
        text = file.read_text()
        result = verify_export(text, pinned_keys(cli, keys, trust))
        if journal is not None:
            if not (journal / "records").is_dir():
                raise CliError(f"{journal}: not a journal directory (it has no records/)", code=2)
            lines = [line for line in text.splitlines() if line.strip()]
            events = [json.loads(line) for line in lines[:-1]]
            drawn = seed if seed is not None else random.SystemRandom().randrange(2**32)
            if archive is None:
                archive = journal.with_name(journal.name + "-archive")  # GENESIS_JOURNAL_ARCHIVE_DIR's default
            elif not (archive / "records").is_dir():
                raise CliError(f"{archive}: not a journal archive (it has no records/)", code=2)
            with cli.console.status("deriving the events again from the journal ..."):
                against = rederive.check(events, result["manifest"], journal, sample, drawn, archive)
            result["journal"] = against
            result["problems"] += against["problems"]
            result["ok"] = not result["problems"]

        def render() -> None:
            if result["ok"]:
                cli.console.print(
                    f"[green]ok[/]: {result['events']} event(s), manifest signed and matching (checked here)"
                )
            if "journal" in result:
                j = result["journal"]
                drawn_note = f" (a sample, seed {j['sample_seed']})" if j["sample_seed"] is not None else ""
                whole = "; none missing from its range" if j["completeness_checked"] else ""
                cli.console.print(
                    f"journal: {j['checked']} of {j['of']} event(s) derived again from {j['journal_records']} "
                    f"record(s){drawn_note}{whole}"
                )
            for problem in result["problems"]:
                cli.console.print(f"[red]FAILED[/]: {escape(problem)}", soft_wrap=True)

        cli.emit(result, render)
        if not result["ok"]:
            raise typer.Exit(1)
