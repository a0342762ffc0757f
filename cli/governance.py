"""``genesis governance`` (the world's rules: the manifest, proposals to change it, their shadow
reports and decisions) and ``genesis rounds`` (agents acting through their members)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from cli.client import CliError
from cli.output import Cli, cli_of, examples, group, handled, styled, table

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (for scripts)")]


def _segment(value: str, what: str, prefix: str) -> str:
    if not value.startswith(prefix) or not value[len(prefix) :].isalnum():
        raise CliError(f"{value!r} is not a {what} ({prefix}...)", code=2)
    return value


def shadow_table(report: dict[str, Any]) -> Any:
    """A shadow report's baseline and candidate side by side (a proposal's or a held mutation's)."""
    b, c = report["baseline"], report["candidate"]
    trait = report.get("trait")
    title = f"shadow: {report['ticks']} ticks from snapshot {report['snapshot']}" + (
        f", without and with {trait['name']}" if trait else f" ({report['recorded_ticks']} on recorded inputs)"
    )
    names = ["population_start", "population_min", "population_mean", "population_end", "energy_end", "births"]
    rows = [[name, b[name], c[name]] for name in names]
    rows.append(["deaths", sum(b["deaths"].values()), sum(c["deaths"].values())])
    if trait:  # a held mutation's: its trait on the candidate's side only
        mine = c["traits"].get(trait["name"], {})
        rows.append(["carriers (max)", "", c["carriers"]["max"]])
        rows.append(["its calls / errors", "", f"{mine.get('calls', 0)} / {mine.get('errors', 0)}"])
        if mine.get("quarantined_at_tick") is not None:
            rows.append(["quarantined at tick", "", mine["quarantined_at_tick"]])
    rows.append(["end state", b["end_state_hash"][:16], c["end_state_hash"][:16]])
    return table(title, ["", "baseline", "candidate"], rows)


def render_proposal(cli: Cli, p: dict[str, Any]) -> None:
    cli.console.print(
        f"[bold]{p['proposal_id']}[/] {p['status']} — {escape(p['reason'])} "
        f"(by {p['author_role']} {escape(p['author'])}, against manifest v{p['base_version']})",
        soft_wrap=True,
    )
    rows = [[op.get("op"), op.get("path"), json.dumps(op.get("value")) if "value" in op else ""] for op in p["diff"]]
    cli.console.print(table("what it changes", ["op", "path", "value"], rows))
    report = p.get("report")
    if report:
        cli.console.print(shadow_table(report))
        cli.console.print(f"report hash: {p['report_hash']}  (what `genesis governance approve` names)")
    if p.get("failure"):
        cli.console.print(f"[red]failed[/]: {escape(p['failure'])}", soft_wrap=True)
    if p.get("applied_version"):
        cli.console.print(f"[green]applied[/] as manifest version {p['applied_version']}")


ROUND_WAIT_S = 120.0  # a round lasts seconds; past this `rounds submit` stops following it


def action_lines(actions: list[dict] | None) -> list[str]:
    """Each recorded action of a submission (``{"action": [kind, *args], "applied", "reason"}``):
    what it was, and applied or refused with the reason."""
    lines = []
    for entry in actions or []:
        action = entry.get("action")
        kind, args = (str(action[0]), action[1:]) if isinstance(action, list) and action else ("action", [])
        call = f"{kind}({', '.join(str(a) for a in args)})"
        lines.append(f"{call} applied" if entry.get("applied") else f"{call} refused: {entry.get('reason')}")
    return lines


def register(app: typer.Typer) -> None:
    gov = group(
        app,
        "governance",
        "The world's rules: the manifest and governed changes of it",
        "genesis governance manifest",
        "genesis governance propose patch.json --reason 'richer food'",
    )

    @gov.command("manifest", epilog=examples("genesis governance manifest", "genesis governance manifest --json"))
    @handled
    def manifest(ctx: typer.Context, json_out: JsonOpt = False) -> None:
        """The rules in force: parameters, policy, capabilities, approvals, retention, rounds."""
        cli = cli_of(ctx, json_out)
        answer = cli.api.get("/v1/manifest")
        cli.emit(
            answer,
            lambda: cli.console.print_json(
                json.dumps({"version": answer["version"], "hash": answer["hash"], **answer["document"]})
            ),
        )

    @gov.command(
        "propose",
        epilog=examples(
            "genesis governance propose patch.json --reason 'richer food'",
            'echo \'[{"op": "add", "path": "/params/resource_energy", "value": 30}]\' > p.json',
        ),
    )
    @handled
    def propose(
        ctx: typer.Context,
        patch: Annotated[Path, typer.Argument(help="a JSON file: the RFC 6902 operations (a list)")],
        reason: Annotated[str, typer.Option(help="why")],
        json_out: JsonOpt = False,
    ) -> None:
        """Propose a patch of the manifest in force (an agent with rules.propose, or an operator).
        It is shadowed beside the baseline and waits for an operator's approval."""
        cli = cli_of(ctx, json_out)
        try:
            ops = json.loads(patch.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise CliError(f"{patch}: not a JSON patch: {exc}", code=2) from exc
        base = cli.api.get("/v1/manifest")
        answer = cli.api.post(
            "/v1/governance/proposals", json={"base_hash": base["hash"], "ops": ops, "reason": reason}
        )
        cli.emit(
            answer,
            lambda: cli.console.print(
                f"proposed {answer['proposal_id']}: `genesis governance show {answer['proposal_id']}`"
            ),
        )

    @gov.command(
        "list", epilog=examples("genesis governance list", "genesis governance list --status awaiting_approval")
    )
    @handled
    def list_(
        ctx: typer.Context,
        status: Annotated[str | None, typer.Option(help="only this status")] = None,
        limit: Annotated[int, typer.Option(min=1, max=200)] = 20,
        json_out: JsonOpt = False,
    ) -> None:
        """Proposals, newest first."""
        cli = cli_of(ctx, json_out)
        params: dict[str, Any] = {"limit": limit, **({"status": status} if status else {})}
        answer = cli.api.get("/v1/governance/proposals", params=params)
        rows = [[p["proposal_id"], p["status"], p["author"], p["reason"][:60]] for p in answer["proposals"]]
        cli.emit(answer, lambda: cli.console.print(table("proposals", ["id", "status", "author", "reason"], rows)))

    @gov.command("show", epilog=examples("genesis governance show gov_0123456789abcdef"))
    @handled
    def show(ctx: typer.Context, proposal_id: Annotated[str, typer.Argument()], json_out: JsonOpt = False) -> None:
        """A proposal, the diff it makes and its shadow report."""
        cli = cli_of(ctx, json_out)
        answer = cli.api.get(f"/v1/governance/proposals/{_segment(proposal_id, 'proposal id', 'gov_')}")
        cli.emit(answer, lambda: render_proposal(cli, answer))

    @gov.command("approve", epilog=examples("genesis governance approve gov_0123456789abcdef --report-hash HASH"))
    @handled
    def approve(
        ctx: typer.Context,
        proposal_id: Annotated[str, typer.Argument()],
        report_hash: Annotated[str, typer.Option("--report-hash", help="the shadow report you read (its hash)")],
        json_out: JsonOpt = False,
    ) -> None:
        """Approve a proposal's shadow report (operator); it is then applied."""
        cli = cli_of(ctx, json_out)
        path = f"/v1/governance/proposals/{_segment(proposal_id, 'proposal id', 'gov_')}/approve"
        answer = cli.api.post(path, json={"report_hash": report_hash})
        cli.emit(answer, lambda: cli.console.print(f"approved {proposal_id}: it is applied next"))

    @gov.command("reject", epilog=examples("genesis governance reject gov_0123456789abcdef --reason 'not now'"))
    @handled
    def reject(
        ctx: typer.Context,
        proposal_id: Annotated[str, typer.Argument()],
        reason: Annotated[str, typer.Option(help="why")] = "",
        json_out: JsonOpt = False,
    ) -> None:
        """Reject a proposal (operator)."""
        cli = cli_of(ctx, json_out)
        path = f"/v1/governance/proposals/{_segment(proposal_id, 'proposal id', 'gov_')}/reject"
        answer = cli.api.post(path, json={"reason": reason})
        cli.emit(answer, lambda: cli.console.print(f"rejected {proposal_id}"))

    rounds = group(app, "rounds", "Agents acting through their members, in rounds", "genesis rounds current")

    @rounds.command("current", epilog=examples("genesis rounds current"))
    @handled
    def current(ctx: typer.Context, json_out: JsonOpt = False) -> None:
        """The round accepting submissions now, and until when."""
        cli = cli_of(ctx, json_out)
        answer = cli.api.get("/v1/world/rounds/current/deadline")
        cli.emit(
            answer,
            lambda: cli.console.print(
                f"round {answer['round_id']} {answer['state']}: {answer['seconds_remaining']} s left "
                f"(until {answer['deadline_utc']}, tick {answer['closes_tick']})"
            ),
        )

    @rounds.command(
        "submit",
        epilog=examples(
            "genesis rounds submit action.py --key round-7-a", "genesis rounds submit a.py --key k --no-wait"
        ),
    )
    @handled
    def submit(
        ctx: typer.Context,
        code: Annotated[Path, typer.Argument(help="a Python file defining agent_action(engine, member_id)")],
        key: Annotated[str, typer.Option("--key", help="your idempotency key: a retry with it is answered the same")],
        wait: Annotated[bool, typer.Option(help="follow the round until it settles, then show your outcome")] = True,
        json_out: JsonOpt = False,
    ) -> None:
        """Submit your member's action for the accepting round (your agent's --api-key), and follow
        the round until it settles: what became of your submission and each of its actions."""
        cli = cli_of(ctx, json_out)
        try:
            source = code.read_text()
        except OSError as exc:
            raise CliError(f"{code}: cannot read it: {exc}", code=2) from exc
        answer = cli.api.post("/v1/world/actions", json={"code": source, "idempotency_key": key})
        settled_before = answer.get("submission_status", "accepted") != "accepted"  # a key used already
        if not wait:
            said = (
                f"this key was used already: submission {answer['submission_id']} of round {answer['round_id']}, "
                f"{answer['submission_status']} (`genesis rounds show {answer['round_id']}`)"
                if settled_before
                else f"accepted into round {answer['round_id']} ({answer['submission_id']})"
            )
            cli.emit(answer, lambda: cli.console.print(said))
            return
        deadline = time.monotonic() + ROUND_WAIT_S
        with cli.console.status(f"round {answer['round_id']}: waiting for it to settle ..."):
            while (settled := cli.api.get(answer["round_url"], expect=("state",)))["state"] != "settled":
                if time.monotonic() > deadline:
                    raise CliError(
                        f"round {answer['round_id']} has not settled: `genesis rounds show {answer['round_id']}`"
                    )
                time.sleep(0.5)
        mine = next((s for s in settled["submissions"] if s["id"] == answer["submission_id"]), None)
        outcome = {**answer, "round": settled, "submission": mine}

        def render() -> None:
            if mine is None:
                cli.console.print(f"round {answer['round_id']} settled; your submission is not in it")
                return
            why = f": {mine['error'] or ''} {mine['reason'] or ''}".rstrip() if mine["status"] == "rejected" else ""
            cli.console.print(
                f"round {answer['round_id']} settled: your submission {answer['submission_id']} "
                f"{styled(mine['status'])}{escape(why)}",
                soft_wrap=True,
            )
            for line in action_lines(mine.get("actions")):
                cli.console.print(f"  {escape(line)}", soft_wrap=True)

        cli.emit(outcome, render)

    @rounds.command("show", epilog=examples("genesis rounds show 42"))
    @handled
    def show_round(
        ctx: typer.Context, round_id: Annotated[int, typer.Argument(min=1)], json_out: JsonOpt = False
    ) -> None:
        """A round and what became of every submission."""
        cli = cli_of(ctx, json_out)
        answer = cli.api.get(f"/v1/world/rounds/{round_id}")
        rows = [
            [
                s["id"],
                s["agent_id"],
                s["member_id"],
                s["status"],
                s["error"] or "",
                s["reason"] or "",
                "; ".join(action_lines(s.get("actions"))),
            ]
            for s in answer["submissions"]
        ]

        def render() -> None:
            cli.console.print(f"round {answer['round_id']} {answer['state']} (receipt {answer['receipt_id'] or '-'})")
            columns = ["id", "agent", "member", "status", "error", "reason", "actions"]
            cli.console.print(table("submissions", columns, rows, whole=("reason", "actions")))

        cli.emit(answer, render)
