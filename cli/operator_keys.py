"""``genesis operator create-key | list-keys | revoke-key``: operator keys, written straight to
Postgres (no endpoint makes one). Run on the API's host, or wherever GENESIS_DATABASE_URL and
GENESIS_API_KEY_PEPPER (or GENESIS_STATE_DIR with its pepper file) are the API's: a key hashed
with another pepper opens nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import typer
from rich.markup import escape
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from cli.client import CliError
from cli.output import Cli, cli_of, examples, group, handled, table, when
from genesis.config import get_settings
from genesis.db.models import OperatorKey
from genesis.db.session import get_engine, get_sessionmaker
from identity import apikeys, operators

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (for scripts)")]


def _described(row: OperatorKey) -> dict[str, Any]:
    return {
        "key_prefix": row.key_prefix,
        "name": row.name,
        "created_at": row.created_at.timestamp(),
        "revoked_at": row.revoked_at.timestamp() if row.revoked_at else None,
    }


def show_created_key(cli: Cli, row: OperatorKey, key: str) -> None:
    # soft_wrap: the key and the export line stay whole at any width (a wrapped line pastes as two)
    cli.console.print(f"operator key [bold]{row.key_prefix}[/] ({escape(row.name)}) created", soft_wrap=True)
    cli.console.print(f"key (shown only this once): [bold]{key}[/]", soft_wrap=True)
    cli.console.print(f"export GENESIS_OPERATOR_KEY={key}", soft_wrap=True, markup=False)


def _run(action: Callable[[Any, bytes], Awaitable[Any]]) -> Any:
    """``action(sessions, pepper)`` against the configured database, with failures as CliErrors."""
    settings = get_settings()
    where = make_url(settings.database_url).render_as_string(hide_password=True)

    async def run() -> Any:
        pepper = apikeys.load_pepper(settings.api.key_pepper.get_secret_value(), settings.state_dir)
        try:
            return await action(get_sessionmaker(settings.database_url), pepper)
        finally:
            await get_engine(settings.database_url).dispose()

    try:
        return asyncio.run(run())
    except operators.OperatorKeyError as exc:
        raise CliError(str(exc)) from exc
    except (SQLAlchemyError, OSError) as exc:
        raise CliError(
            f"cannot use the database at {where} ({type(exc).__name__}): run this on the API's host, "
            "or set GENESIS_DATABASE_URL (and GENESIS_API_KEY_PEPPER) to the API's"
        ) from exc


def register(app: typer.Typer) -> None:
    operator = group(
        app,
        "operator",
        "Operator keys (written to the database directly; run on the API's host)",
        "genesis operator create-key --name me",
        "genesis operator list-keys",
        "genesis operator revoke-key 3f9c2a1b",
    )

    @operator.command(
        "create-key",
        epilog=examples("genesis operator create-key --name me", "genesis operator create-key -n ci --json"),
    )
    @handled
    def create_key(
        ctx: typer.Context,
        name: Annotated[str, typer.Option("--name", "-n", help="who or what holds the key (1-64 characters)")],
        json_out: JsonOpt = False,
    ) -> None:
        """Create an operator key; it is shown once (export it as GENESIS_OPERATOR_KEY)."""
        cli = cli_of(ctx, json_out)
        issued, row = _run(lambda sessions, pepper: operators.create_key(sessions, pepper, name))
        answer = {
            **_described(row),
            "operator_key": issued.key,
            "message": "Store the operator_key now: it is shown only once. Send it as the X-Operator-Key header.",
        }
        cli.emit(
            answer,
            lambda: show_created_key(cli, row, issued.key),
        )

    @operator.command("list-keys", epilog=examples("genesis operator list-keys", "genesis operator list-keys --json"))
    @handled
    def list_keys(ctx: typer.Context, json_out: JsonOpt = False) -> None:
        """Every operator key (prefix, name, created, revoked); never the keys themselves."""
        cli = cli_of(ctx, json_out)
        rows = [_described(row) for row in _run(lambda sessions, _pepper: operators.list_keys(sessions))]
        cli.emit(
            {"keys": rows},
            lambda: cli.console.print(
                table(
                    None,
                    ["prefix", "name", "created", "revoked"],
                    [[r["key_prefix"], escape(r["name"]), when(r["created_at"]), when(r["revoked_at"])] for r in rows],
                    whole=("prefix",),
                )
            ),
        )

    @operator.command("revoke-key", epilog=examples("genesis operator revoke-key 3f9c2a1b"))
    @handled
    def revoke_key(
        ctx: typer.Context,
        key_prefix: Annotated[str, typer.Argument(help="the key's 8-hex prefix (genesis operator list-keys)")],
        json_out: JsonOpt = False,
    ) -> None:
        """Revoke an operator key: from now on it opens nothing (the row stays, for the record)."""
        cli = cli_of(ctx, json_out)
        row = _run(lambda sessions, _pepper: operators.revoke_key(sessions, key_prefix))
        cli.emit(_described(row), lambda: cli.console.print(f"operator key {row.key_prefix} ({row.name}) revoked"))
