"""Mutation commands: propose (and follow it live to its verdict), status, list, rollback, retry."""

from __future__ import annotations

import re
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from cli.client import (
    EXIT_AWAITING_APPROVAL,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_REJECTED,
    EXIT_ROLLED_BACK,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    CliError,
    segment,
)
from cli.governance import shadow_table
from cli.identity import me
from cli.output import Cli, cli_of, examples, group, handled, styled, table, versioned, when, when_short

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document (for scripts)")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", min=0.1, help="Give up following after this many seconds")]

# The pipeline in order; a verdict ends it.
PIPELINE = ["queued", "validating", "sandbox_ok", "activated"]
VERDICT_EXIT = {
    "kept": EXIT_OK,
    "extinct": EXIT_OK,  # kept, then taken out by selection
    "rolled_back": EXIT_ROLLED_BACK,
    "rejected": EXIT_REJECTED,
    "failed": EXIT_FAILED,
    # not a verdict, but following stops there: an operator decides, within the manifest's TTL
    "awaiting_approval": EXIT_AWAITING_APPROVAL,
}
UNTIL = {"verdict": set(), "activated": {"activated"}, "sandbox_ok": {"sandbox_ok", "activated"}}
POLL_S = 0.1
_MUTATION_ID = re.compile(r"^mut_[0-9a-f]{6,32}$")


def check_mutation_id(value: str | None) -> str | None:
    if value is not None and not _MUTATION_ID.match(value):
        raise typer.BadParameter(f"{value!r} is not a mutation id: ids look like 'mut_' followed by hex digits")
    return value


MutationId = Annotated[str, typer.Argument(help="mutation id (mut_…)", callback=check_mutation_id)]
LatestOrMutationId = Annotated[
    str | None,
    typer.Argument(
        help="mutation id (mut_…); left out: the latest mutation of your agent (the key's)",
        callback=check_mutation_id,
        show_default=False,
    ),
]


def answered_mutation_id(value: Any, where: str) -> str:
    """A mutation id taken from an answer of the API, before a URL is built from it."""
    if not isinstance(value, str) or not _MUTATION_ID.match(value):
        raise CliError(f"{where} answered {value!r} as a mutation_id, which is not one (mut_ and hex digits)")
    return value


def status_path(mutation_id: str) -> str:
    return f"/api/mutations/{segment(mutation_id, 'mutation id')}/status"


def latest_of_mine(cli: Cli) -> str:
    """The id of the newest mutation of the configured key's agent (``genesis status`` without an id)."""
    if not cli.api_key:
        raise CliError(
            "give a MUTATION_ID (`genesis mutations list` shows them), or configure your agent's key "
            "(--api-key or GENESIS_API_KEY) to see its latest mutation",
            code=EXIT_USAGE,
        )
    agent_id = me(cli)["agent_id"]
    newest = cli.api.get("/api/mutations", params={"agent_id": agent_id, "limit": 1}, expect=("mutations",))
    if not newest["mutations"]:
        raise CliError(
            f"your agent {agent_id} has proposed no mutation yet: propose one with `genesis propose FILE --name NAME`"
        )
    latest = newest["mutations"][0]
    mutation_id = answered_mutation_id(
        latest.get("mutation_id") if isinstance(latest, dict) else None, "GET /api/mutations"
    )
    cli.say(f"[dim]the latest mutation of your agent {agent_id}:[/] {mutation_id}")
    return mutation_id


def say_options_for(err: CliError, name: str) -> None:
    """A TRAIT_EXISTS refusal names the API's JSON field: say it as the command's options too."""
    if err.error == "TRAIT_EXISTS":
        live = (err.body or {}).get("live_version") if isinstance(err.body, dict) else None
        err.message += (
            f" — with this command: add --replaces {name}@{live if live is not None else 'VERSION'} "
            "to modify your own live trait, or choose another --name"
        )


def parse_replaces(value: str | None, trait_name: str) -> dict | None:
    """``--replaces``: ``live`` / ``NAME`` (whatever version is live), ``V`` / ``vV`` / ``NAME@V`` (that version)."""
    if value is None:
        return None
    name, _, version = value.rpartition("@") if "@" in value else ("", "", value)
    if not name and not re.fullmatch(r"v?\d+", version):  # 'live' or a bare name
        name, version = ("" if version == "live" else version), ""
    if name and name != trait_name:
        raise typer.BadParameter(
            f"--replaces names trait {name!r} but --name is {trait_name!r}: "
            "a modification is a new version of the same trait"
        )
    if version and not re.fullmatch(r"v?\d+", version):
        raise typer.BadParameter(f"--replaces version {version!r} is not a number (e.g. 3 or {trait_name}@3)")
    ref: dict[str, Any] = {"trait_name": trait_name}
    if version:
        ref["version"] = int(version.lstrip("v"))
    return ref


def follow(
    cli: Cli, mutation_id: str, *, timeout_s: float, until: str = "verdict", started: float | None = None
) -> tuple[dict, list[dict], int]:
    """Poll the mutation's status until a verdict (or ``until``), printing each stage as it is
    reached with its time since ``started``; stages passed between two polls are shown as such.
    Returns (final status, stages, exit code)."""
    started = time.monotonic() if started is None else started
    stop_at = UNTIL[until]
    stages: list[dict] = []
    printed: list[str] = []
    deadline = time.monotonic() + timeout_s
    status: dict = {}

    def reach(name: str, observed: bool) -> None:
        at = round(time.monotonic() - started, 3)
        if stages and stages[-1]["status"] == name:
            return
        stages.append({"status": name, "at_s": at, "observed": observed})
        mark = f"+{at:.2f}s" if observed else f"≤+{at:.2f}s (passed between polls)"
        cli.say(f"  [bold]●[/] {styled(name, 12)} {mark}")

    with cli.err_console.status("following…", spinner="dots") if not cli.json else nullcontext() as spinner:
        while True:
            status = cli.api.get(status_path(mutation_id), expect=("status",))
            current = status["status"]
            implied = _implied_stage(status)  # the last pipeline stage this status must have passed
            if implied is not None:  # fill in the stages passed since the last poll
                last = PIPELINE.index(stages[-1]["status"]) if stages and stages[-1]["status"] in PIPELINE else -1
                for skipped in PIPELINE[last + 1 : PIPELINE.index(implied) + 1]:
                    if skipped != current:
                        reach(skipped, observed=False)
            reach(current, observed=True)
            log = status.get("validation_log") or []
            for i, line in enumerate(log):  # new lines, and lines rewritten in place ("Sandbox: running" → "OK")
                if i >= len(printed) or printed[i] != line:
                    cli.say(f"      [dim]{escape(line)}[/]")
            printed = log
            if current in VERDICT_EXIT or current in stop_at:
                break
            if time.monotonic() > deadline:
                raise CliError(
                    f"{mutation_id} is still {current} after {timeout_s:.0f}s; follow it with "
                    f"`genesis status {mutation_id} --follow`",
                    code=EXIT_TIMEOUT,
                )
            if spinner is not None:
                spinner.update(f"{current} — {time.monotonic() - started:.1f}s")
            time.sleep(POLL_S)
    for i, stage in enumerate(stages):  # each stage's duration: until the next one was seen
        nxt = stages[i + 1]["at_s"] if i + 1 < len(stages) else None
        stage["duration_s"] = round(nxt - stage["at_s"], 3) if nxt is not None else None
    return status, stages, VERDICT_EXIT.get(status["status"], EXIT_OK)


def _implied_stage(status: dict) -> str | None:
    """The furthest pipeline stage a status implies was passed (itself, for a pipeline stage)."""
    current = status["status"]
    if current in PIPELINE:
        return current
    if current in ("kept", "rolled_back"):
        return "activated" if status.get("trait_version") else "sandbox_ok"
    if current == "awaiting_approval":
        return "sandbox_ok"
    if current == "rejected":
        report = status.get("sandbox_report") or {}
        return "sandbox_ok" if report.get("verdict") == "ok" else "validating"
    return None


def shown_status(record: dict) -> str:
    """The status, styled, marked when the engine quarantined the trait (if it is not rolled_back
    yet, its rollback follows within seconds)."""
    return styled(record.get("status")) + (" [bold red](quarantined)[/]" if record.get("quarantine") else "")


def render_verdict(cli: Cli, status: dict, stages: list[dict]) -> None:
    path = " → ".join(
        f"{s['status']} ({s['duration_s']:.2f}s)" if s.get("duration_s") is not None else s["status"] for s in stages
    )
    cli.console.print(f"  {path}")
    final = status["status"]
    if final == "rejected":
        cli.console.print(f"[bold red]Rejected:[/] {status.get('failure_reason_code')}")
        failed = [line for line in status.get("validation_log") or [] if "FAILED" in line]
        for line in failed or (status.get("validation_log") or [])[-1:]:
            cli.console.print(f"  [red]{escape(line)}[/]")
    elif final == "failed":
        cli.console.print(
            f"[bold magenta]Failed (infrastructure, not a verdict on the code):[/] "
            f"retry it with `genesis mutations retry {status.get('mutation_id')}`"
        )
    elif final == "awaiting_approval":
        cli.console.print(
            f"[bold yellow]Awaiting approval:[/] an operator decides (`genesis status {status.get('mutation_id')}` "
            "shows its shadow report; `genesis mutations approve|reject` decide, with an operator key)"
        )
        for line in (status.get("validation_log") or [])[-2:]:
            cli.console.print(f"  [yellow]{escape(line)}[/]", soft_wrap=True)
    elif final == "rolled_back":
        cli.console.print(
            f"[yellow]Rolled back:[/] {escape(status.get('rollback_reason') or '')} "
            f"(fitness {status.get('fitness_verdict') or 'n/a'})"
        )
    else:
        version = f" v{status['trait_version']}" if status.get("trait_version") else ""
        verdict = f", fitness {status['fitness_verdict']}" if status.get("fitness_verdict") else ""
        cli.console.print(f"[bold green]{final}:[/] {status.get('trait_name')}{version}{verdict}")
        if status.get("verdict_reason"):
            colour = "yellow" if status.get("fitness_verdict") == "inconclusive" else "dim"
            cli.console.print(f"  [{colour}]{escape(status['verdict_reason'])}[/]", soft_wrap=True)


def verdict_table(report: dict) -> Any:
    """A verdict's experiment: each effect with its 95 % interval."""
    title = (
        f"verdict {report['verdict']}: {report['replicates']} replicates, {report['ticks']:,} ticks "
        f"(margin ±{report['margin']:.0%})"
    )
    percent = {"fitness", "others_fitness", "population"}
    rows = []
    for name, e in sorted(report.get("effects", {}).items()):
        shown = (lambda v: f"{v:+.1%}") if name in percent else (lambda v: f"{v:+.2f}")
        rows.append([name, shown(e["mean"]), f"{shown(e['low'])} … {shown(e['high'])}"])
    return table(title, ["effect", "mean", "95 % interval"], rows)


def _follow_and_report(
    cli: Cli, mutation_id: str, timeout: float, until: str, started: float, extra: dict | None = None
) -> None:
    status, stages, code = follow(cli, mutation_id, timeout_s=timeout, until=until, started=started)
    cli.emit(
        {**(extra or {}), **status, "stages": stages, "elapsed_s": round(time.monotonic() - started, 3)},
        lambda: render_verdict(cli, status, stages),
    )
    raise typer.Exit(code)


ROLLBACK_WAIT_S = 120.0  # a rollback takes a second or two; past this the command stops following


def register(app: typer.Typer) -> None:
    mutations = group(
        app,
        "mutations",
        "List, retry and inspect mutations",
        "genesis mutations list",
        "genesis mutations list --status rejected --trait energy_hoarder",
        "genesis mutations retry mut_3f9c2a1b7d40",
    )

    @app.command(
        epilog=examples(
            'genesis propose trait.py --name energy_hoarder --goal "Hoard energy when it runs low"',
            "genesis propose v2.py --name energy_hoarder --replaces energy_hoarder@1",
            "genesis propose trait.py --name energy_hoarder --until activated",
            "cat trait.py | genesis propose - --name energy_hoarder --task task_5d0c2e9a41f3 --no-follow --json",
        )
    )
    @handled
    def propose(
        ctx: typer.Context,
        file: Annotated[Path, typer.Argument(help="the trait's Python source ('-' reads stdin)", allow_dash=True)],
        name: Annotated[str, typer.Option("--name", "-n", help="trait_name (snake_case)")],
        goal: Annotated[str, typer.Option(help="what the trait is for")] = "",
        replaces: Annotated[
            str | None,
            typer.Option(help="modify a live trait: 'live' (whatever version is live) or a version: 3, or NAME@3"),
        ] = None,
        task: Annotated[str | None, typer.Option("--task", help="the task_id this answers")] = None,
        agent_id: Annotated[
            str | None, typer.Option(envvar="GENESIS_AGENT_ID", help="only without a key (GENESIS_AUTH=open)")
        ] = None,
        notify_url: Annotated[str | None, typer.Option(help="webhook for every status change")] = None,
        idempotency_key: Annotated[str | None, typer.Option(help="same key, same mutation (safe to retry)")] = None,
        no_follow: Annotated[bool, typer.Option("--no-follow", help="print the mutation id and return")] = False,
        until: Annotated[
            str,
            typer.Option(
                help="follow until: verdict (kept/rolled_back), activated, or sandbox_ok "
                "(use it when the API runs with GENESIS_ACTIVATE_MUTATIONS=false)"
            ),
        ] = "verdict",
        timeout: TimeoutOpt = 900.0,
        json_out: JsonOpt = False,
    ) -> None:
        """Propose a trait and follow it live to its verdict.

        queued → validating → sandbox_ok → activated → kept/rolled_back, or rejected with its
        failure code and validation log; a mutation the approval rules hold stops the follow at
        awaiting_approval. Exit code 0 kept/live, 3 rejected, 4 rolled back, 5 failed, 6 timeout,
        8 awaiting an operator's approval."""
        cli = cli_of(ctx, json_out)
        if until not in UNTIL:
            raise typer.BadParameter(f"--until must be one of {', '.join(UNTIL)}")
        try:
            code = sys.stdin.read() if str(file) == "-" else file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CliError(f"cannot read {file}: {exc}") from exc
        body: dict[str, Any] = {"trait_name": name, "code": code, "goal": goal}
        if (ref := parse_replaces(replaces, name)) is not None:
            body["replaces"] = ref
        for key, value in (("task_id", task), ("agent_id", agent_id), ("notify_url", notify_url)):
            if value is not None:
                body[key] = value
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        started = time.monotonic()
        try:
            accepted = cli.api.post(
                "/api/mutations/propose", json=body, headers=headers, expect=("mutation_id", "status", "workflow_id")
            )
        except CliError as err:
            say_options_for(err, name)
            raise
        mutation_id = answered_mutation_id(accepted["mutation_id"], "POST /api/mutations/propose")
        if no_follow:
            cli.emit(
                accepted,
                lambda: cli.console.print(
                    f"{mutation_id} {styled(accepted['status'])} (follow: genesis status {mutation_id} --follow)"
                ),
            )
            return
        cli.say(f"Proposed [bold]{name}[/] as [bold]{mutation_id}[/] (workflow {accepted['workflow_id']})")
        _follow_and_report(cli, mutation_id, timeout, until, started, {"workflow_id": accepted["workflow_id"]})

    @app.command(
        epilog=examples(
            "genesis status",
            "genesis status mut_3f9c2a1b7d40",
            "genesis status mut_3f9c2a1b7d40 --follow",
            "genesis status mut_3f9c2a1b7d40 --json",
        )
    )
    @handled
    def status(
        ctx: typer.Context,
        mutation_id: LatestOrMutationId = None,
        follow_it: Annotated[bool, typer.Option("--follow", "-f", help="follow it live until its verdict")] = False,
        timeout: TimeoutOpt = 900.0,
        json_out: JsonOpt = False,
    ) -> None:
        """A mutation's status and validation log (default: your latest mutation).

        Without an id: the latest mutation of your agent (the one your key belongs to).
        --follow follows it live until its verdict."""
        cli = cli_of(ctx, json_out)
        if mutation_id is None:
            mutation_id = latest_of_mine(cli)
        if follow_it:
            _follow_and_report(cli, mutation_id, timeout, "verdict", time.monotonic())
        record = cli.api.get(status_path(mutation_id), expect=("status",))

        def render() -> None:
            quarantine = record.get("quarantine") or {}
            rows = [
                ["status", shown_status(record)],
                ["trait", record.get("trait_name")],
                ["agent", record.get("agent_id")],
                ["failure code", record.get("failure_reason_code")],
                ["version", record.get("trait_version")],
                ["fitness", record.get("fitness_verdict")],
                ["verdict reason", escape(record["verdict_reason"]) if record.get("verdict_reason") else None],
                # a quarantine's reason may quote the trait's own exception text: never markup
                ["rollback reason", escape(record["rollback_reason"]) if record.get("rollback_reason") else None],
                [
                    "quarantined",
                    f"{when(quarantine['quarantined_at'])}: {escape(quarantine['reason'])}" if quarantine else None,
                ],
                ["workflow", record.get("workflow_id")],
                ["created", when(record.get("created_at"))],
                ["updated", when(record.get("updated_at"))],
            ]
            cli.console.print(table(mutation_id, ["field", "value"], [r for r in rows if r[1] is not None]))
            for line in record.get("validation_log") or []:
                cli.console.print(f"  [dim]{escape(line)}[/]")
            if record.get("shadow_report"):
                cli.console.print(shadow_table(record["shadow_report"]))
                if record.get("status") == "awaiting_approval" and record["shadow_report"].get("report_hash"):
                    cli.console.print(
                        f"report hash: {record['shadow_report']['report_hash']}  "
                        "(what `genesis mutations approve --report-hash` names)",
                        soft_wrap=True,
                    )
            if record.get("verdict_report"):
                cli.console.print(verdict_table(record["verdict_report"]))
                cli.console.print(f"  [dim]forked from snapshot {record['verdict_report']['plan']['snapshot']}[/]")

        cli.emit(record, render)
        raise typer.Exit(VERDICT_EXIT.get(record["status"], EXIT_OK))  # scripts: 3 rejected, 4 rolled back, 5 failed

    @app.command(
        epilog=examples(
            "genesis rollback mut_3f9c2a1b7d40",
            'genesis rollback mut_3f9c2a1b7d40 --reason "starves the newborns"',
            'genesis --operator-key genop_… rollback mut_3f9c2a1b7d40 --reason "operator said so"',
        )
    )
    @handled
    def rollback(
        ctx: typer.Context,
        mutation_id: MutationId,
        reason: Annotated[str, typer.Option(help="why (recorded as rollback_reason)")] = "manual",
        wait: Annotated[bool, typer.Option(help="follow it until the mutation is rolled back")] = True,
        json_out: JsonOpt = False,
    ) -> None:
        """Take a live trait out of the world (the previous version comes back). Needs the proposer's key.

        Follows the rollback until the mutation is rolled_back (--no-wait: only ask for it)."""
        cli = cli_of(ctx, json_out)
        path = f"/api/mutations/{segment(mutation_id, 'mutation id')}"
        answer = cli.api.post(f"{path}/rollback", json={"reason": reason}, expect=("message", "status"))
        was = answer.get("previous_status", answer["status"])
        cli.say(f"{mutation_id}: {escape(str(answer['message']))} (was {styled(was)})", soft_wrap=True)
        if wait and answer["status"] != "rolled_back":
            deadline = time.monotonic() + ROLLBACK_WAIT_S
            with cli.console.status("rolling back ..."):
                while (record := cli.api.get(f"{path}/status", expect=("status",)))["status"] != "rolled_back":
                    if time.monotonic() > deadline:
                        raise CliError(f"{mutation_id} is still {record['status']}: follow it with `genesis status`")
                    time.sleep(0.5)
            answer = {**answer, "status": "rolled_back", "rollback_reason": record.get("rollback_reason")}
        cli.emit(answer, lambda: cli.console.print(f"{mutation_id}: {styled(answer['status'])}", soft_wrap=True))

    @app.command(epilog=examples("genesis revive mut_3f2a9c1b7d4e"))
    @handled
    def revive(ctx: typer.Context, mutation_id: MutationId, json_out: JsonOpt = False) -> None:
        """Bring an extinct trait back into the live set (kept again). Needs the proposer's key.

        Selection takes a kept trait out when no Molbot carried it for the manifest's
        extinction_ticks, or to make room in a full live set. It comes back as it was; newborns
        may gain it again."""
        cli = cli_of(ctx, json_out)
        answer = cli.api.post(f"/api/mutations/{segment(mutation_id, 'mutation id')}/revive", expect=("message",))
        cli.emit(answer, lambda: cli.console.print(f"{mutation_id}: {escape(str(answer['message']))}", soft_wrap=True))

    @mutations.command(
        "list",
        epilog=examples(
            "genesis mutations list",
            "genesis mutations list --status rejected --limit 50",
            "genesis mutations list --agent agt_5c0e9a41d2b7 --trait energy_hoarder --json",
        ),
    )
    @handled
    def list_(
        ctx: typer.Context,
        status_: Annotated[str | None, typer.Option("--status", help="only this status")] = None,
        agent: Annotated[str | None, typer.Option("--agent", help="only this agent_id")] = None,
        trait: Annotated[str | None, typer.Option("--trait", help="only this trait_name")] = None,
        limit: Annotated[int, typer.Option(min=1, max=200, help="at most this many, newest first")] = 20,
        json_out: JsonOpt = False,
    ) -> None:
        """Recorded mutations, newest first, with their full ids (to copy into `genesis status ID`)."""
        cli = cli_of(ctx, json_out)
        params = {k: v for k, v in (("status", status_), ("agent_id", agent), ("trait_name", trait)) if v}
        answer = cli.api.get("/api/mutations", params={**params, "limit": limit}, expect=("mutations",))
        rows = [
            [
                m.get("mutation_id"),
                versioned(m.get("trait_name"), m.get("trait_version")),
                shown_status(m) + (f"\n{m['failure_reason_code']}" if m.get("failure_reason_code") else ""),
                m.get("agent_id"),
                when_short(m.get("created_at")),
            ]
            for m in answer["mutations"]
        ]
        cli.emit(
            answer,
            lambda: cli.console.print(
                table(
                    f"{len(rows)} mutation(s)",
                    ["id", "trait", "status", "agent", "created"],
                    rows,
                    whole=("id", "status", "agent"),
                )
            ),
        )

    @mutations.command(
        epilog=examples(
            "genesis mutations retry mut_3f9c2a1b7d40",
            "genesis mutations retry mut_3f9c2a1b7d40 --no-follow --json",
        )
    )
    @handled
    def retry(
        ctx: typer.Context,
        mutation_id: MutationId,
        no_follow: Annotated[bool, typer.Option("--no-follow", help="return once the new run has started")] = False,
        timeout: TimeoutOpt = 900.0,
        json_out: JsonOpt = False,
    ) -> None:
        """Re-run a mutation that failed for an infrastructure reason.

        Its workflow Failed, TimedOut, was Terminated, or is stuck with no running workflow;
        never one with a verdict (409)."""
        cli = cli_of(ctx, json_out)
        started = time.monotonic()
        answer = cli.api.post(f"/api/mutations/{segment(mutation_id, 'mutation id')}/retry", expect=("message",))
        if no_follow:
            cli.emit(answer, lambda: cli.console.print(f"{mutation_id}: {answer['message']}"))
            return
        cli.say(f"{mutation_id}: {answer['message']}")
        _follow_and_report(cli, mutation_id, timeout, "verdict", started, {"retry": answer})

    def _decide(
        ctx: typer.Context, mutation_id: str, decision: str, reason: str, json_out: bool, report_hash: str | None = None
    ) -> None:
        cli = cli_of(ctx, json_out)
        path = f"/api/mutations/{segment(mutation_id, 'mutation id')}/approval"
        body = {"decision": decision, "reason": reason}
        if report_hash:
            body["report_hash"] = report_hash
        answer = cli.api.post(path, json=body)
        cli.emit(answer, lambda: cli.console.print(f"{mutation_id}: {decision} sent (it was {answer['status']})"))

    @mutations.command(
        epilog=examples(
            "genesis mutations approve mut_3f9c2a1b7d40",
            "genesis mutations approve mut_3f9c2a1b7d40 --report-hash HASH",
        )
    )
    @handled
    def approve(
        ctx: typer.Context,
        mutation_id: MutationId,
        reason: Annotated[str, typer.Option(help="a note")] = "",
        report_hash: Annotated[
            str | None,
            typer.Option(
                "--report-hash",
                help="the shadow report you read (`genesis status ID` shows it): required when it has one, "
                "refused if it is not its",
            ),
        ] = None,
        json_out: JsonOpt = False,
    ) -> None:
        """Approve a mutation awaiting approval (operator): it goes live."""
        _decide(ctx, mutation_id, "approve", reason, json_out, report_hash)

    @mutations.command(epilog=examples("genesis mutations reject mut_3f9c2a1b7d40 --reason 'starves its neighbours'"))
    @handled
    def reject(
        ctx: typer.Context,
        mutation_id: MutationId,
        reason: Annotated[str, typer.Option(help="why")] = "",
        json_out: JsonOpt = False,
    ) -> None:
        """Reject a mutation awaiting approval (operator): it ends rejected, APPROVAL_REJECTED."""
        _decide(ctx, mutation_id, "reject", reason, json_out)

    @mutations.command(
        "status", epilog=examples("genesis mutations status", "genesis mutations status mut_3f9c2a1b7d40 --json")
    )
    @handled
    def status_alias(ctx: typer.Context, mutation_id: LatestOrMutationId = None, json_out: JsonOpt = False) -> None:
        """Same as `genesis status [ID]`."""
        ctx.invoke(status, ctx=ctx, mutation_id=mutation_id, json_out=json_out)
