"""Agent commands: ``genesis agents register`` (an agent and its key) and ``genesis whoami``
(the agent the configured key belongs to)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from cli.audit import render_events
from cli.client import segment
from cli.output import Cli, cli_of, examples, group, handled

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (for scripts)")]


def me(cli: Cli) -> dict:
    """``GET /v1/agents/me``: the agent of the configured key (401 with a hint without one)."""
    return cli.api.get("/v1/agents/me", expect=("agent_id",))


def render_agent(cli: Cli, agent: dict) -> None:
    reputation = agent.get("reputation") or {}
    limits = agent.get("rate_limits") or {}
    counts = ", ".join(
        f"{reputation.get(key, 0)} {label}"
        for key, label in (
            ("proposed", "proposed"),
            ("active", "in flight"),
            ("activated", "went live"),
            ("kept", "kept"),
            ("rolled_back", "rolled back"),
            ("rejected", "rejected"),
            ("failed", "failed"),
        )
    )
    lines = [
        f"[bold]{agent['agent_id']}[/] {escape(str(agent.get('name', '')))}"
        + (f" — {escape(agent['description'])}" if agent.get("description") else ""),
        f"  key        gen_{agent.get('key_prefix', '?')}_… (registered {agent.get('registered_at', '?')})",
        f"  mutations  {counts}",
    ]
    if limits:
        lines.append(
            f"  limits     {limits.get('active_mutations')}/{limits.get('active_limit')} in flight, "
            f"{limits.get('proposals_this_hour')}/{limits.get('hourly_limit')} proposals this hour "
            f"(resets in {limits.get('hour_resets_in_sec')} s)"
        )
    for line in lines:
        cli.console.print(line, soft_wrap=True)


def register(app: typer.Typer) -> None:
    agents = group(
        app,
        "agents",
        "Agents and their API keys (`genesis whoami` shows the agent of your key)",
        "genesis agents register --name my-agent",
        "genesis agents register --name ci-bot --json",
    )

    @agents.command(
        "register",
        epilog=examples(
            "genesis agents register --name my-agent",
            'genesis agents register --name ci-bot --description "proposes from CI" --json',
        ),
    )
    @handled
    def agents_register(
        ctx: typer.Context,
        name: Annotated[str, typer.Option("--name", "-n", help="1-64 characters")],
        description: Annotated[str, typer.Option(help="what the agent is")] = "",
        invitation: Annotated[
            str | None, typer.Option(help="an operator's invitation (servers that register by invitation)")
        ] = None,
        json_out: JsonOpt = False,
    ) -> None:
        """Register an agent; its API key is shown once (export it as GENESIS_API_KEY)."""
        cli = cli_of(ctx, json_out)
        body = {"name": name, "description": description}
        if invitation is not None:
            body["invitation"] = invitation
        answer = cli.api.post("/v1/agents/register", json=body, expect=("agent_id", "api_key"))

        def render() -> None:
            # soft_wrap: the key and the export line stay one line each at any terminal width, so
            # a copied line is exactly what was printed (a wrapped one pastes as two commands)
            cli.console.print(f"agent [bold]{answer['agent_id']}[/] registered", soft_wrap=True)
            cli.console.print(f"API key (shown only this once): [bold]{answer['api_key']}[/]", soft_wrap=True)
            cli.console.print(f"export GENESIS_API_KEY={answer['api_key']}", soft_wrap=True, markup=False)

        cli.emit(answer, render)

    @agents.command("invite", epilog=examples("genesis agents invite --note 'for Ann'", "genesis agents invite --json"))
    @handled
    def invite(
        ctx: typer.Context,
        note: Annotated[str, typer.Option(help="who it is for (kept with it)")] = "",
        ttl: Annotated[int, typer.Option("--ttl", min=60, help="seconds until it expires unused")] = 7 * 86_400,
        json_out: JsonOpt = False,
    ) -> None:
        """An invitation to register one agent (operator key); shown once."""
        cli = cli_of(ctx, json_out)
        answer = cli.api.post("/v1/agents/invitations", json={"note": note, "ttl_sec": ttl}, expect=("invitation",))
        cli.emit(
            answer,
            lambda: cli.console.print(
                f"invitation (single use, until {answer['expires_at']}): [bold]{answer['invitation']}[/]\n"
                f"genesis agents register --name NAME --invitation {answer['invitation']}",
                soft_wrap=True,
            ),
        )

    @agents.command("release-member", epilog=examples("genesis agents release-member"))
    @handled
    def release_member(ctx: typer.Context, json_out: JsonOpt = False) -> None:
        """Give your agent's member back to the pool; your next action takes a new one."""
        cli = cli_of(ctx, json_out)
        answer = cli.api.delete("/v1/agents/me/member", expect=("agent_id",))
        released = answer.get("released")
        said = f"member {released} given back to the pool" if released is not None else "your agent held no member"
        cli.emit(answer, lambda: cli.console.print(said))

    @agents.command(
        "timeline", epilog=examples("genesis agents timeline", "genesis agents timeline --agent AGENT_ID --json")
    )
    @handled
    def timeline(
        ctx: typer.Context,
        agent: Annotated[str | None, typer.Option(help="another agent's id (operator key); default: yours")] = None,
        limit: Annotated[int, typer.Option(min=1, max=1000)] = 100,
        json_out: JsonOpt = False,
    ) -> None:
        """Your agent's history in the world, oldest first: its trait versions going live and
        leaving (rolled back, quarantined, replaced), rollbacks its mutations caused, the receipts
        of its mutations' stages."""
        cli = cli_of(ctx, json_out)
        agent_id = agent or me(cli)["agent_id"]
        path = f"/v1/agents/{segment(agent_id, 'agent id')}/timeline"
        answer = cli.api.get(path, params={"limit": limit}, expect=("events",))
        more = " (more: --limit)" if answer.get("next_cursor") else ""
        cli.emit(answer, lambda: render_events(cli, answer["events"], f"timeline of {agent_id}{more}"))

    @app.command(epilog=examples("genesis whoami", "genesis --api-key gen_… whoami --json"))
    @handled
    def whoami(ctx: typer.Context, json_out: JsonOpt = False) -> None:
        """The agent your key belongs to.

        The agent of --api-key or GENESIS_API_KEY: its id and name, its mutations so far, and
        where it stands against the proposal rate limits."""
        cli = cli_of(ctx, json_out)
        agent = me(cli)
        cli.emit(agent, lambda: render_agent(cli, agent))
