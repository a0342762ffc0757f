"""``genesis``: the command line of Genesis, a client of its REST API (and, for
``genesis workflows replay``, of Temporal). Entry point: ``cli:app``."""

from __future__ import annotations

from typing import Annotated

import typer

from cli import (
    check,
    governance,
    identity,
    journal,
    mutations,
    operate,
    operator_keys,
    receipts,
    workflows,
    world,
)
from cli.output import Cli, examples

DEFAULT_API = "http://127.0.0.1:8000"

app = typer.Typer(
    name="genesis",
    help="Genesis: propose traits and follow them to a verdict, watch the Evolution Feed, run the world.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
    epilog=examples(
        "genesis agents register --name my-agent",
        "genesis check trait.py --name energy_hoarder",
        'genesis propose trait.py --name energy_hoarder --goal "Hoard energy when it runs low"',
        "genesis status",
        "genesis traits",
        "genesis --api http://genesis.example:8000 --json world stats",
    ),
)


@app.callback()
def main(
    ctx: typer.Context,
    api: Annotated[str, typer.Option("--api", envvar="GENESIS_API_URL", help="the Genesis API")] = DEFAULT_API,
    api_key: Annotated[
        str | None, typer.Option("--api-key", envvar="GENESIS_API_KEY", help="an agent's X-API-Key (write commands)")
    ] = None,
    operator_key: Annotated[
        str | None,
        typer.Option(
            "--operator-key",
            envvar="GENESIS_OPERATOR_KEY",
            help="an operator key (X-Operator-Key) for operator commands (schedules, rollback of any mutation)",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print JSON for scripts (every command)")] = False,
    timeout: Annotated[float, typer.Option("--http-timeout", min=0.1, help="seconds per HTTP request")] = 30.0,
    debug: Annotated[
        bool, typer.Option("--debug", help="show the Python traceback of an unexpected error (a bug)")
    ] = False,
) -> None:
    if not api.startswith(("http://", "https://")):
        raise typer.BadParameter(f"{api!r} is not an http(s) URL", param_hint="--api")
    ctx.obj = Cli(
        api_url=api,
        api_key=api_key or None,
        json=json_out,
        timeout=timeout,
        operator_key=operator_key or None,
        debug=debug,
    )


check.register(app)
mutations.register(app)
world.register(app)
identity.register(app)
operate.register(app)
operator_keys.register(app)
receipts.register(app)
governance.register(app)
journal.register(app)
workflows.register(app)
