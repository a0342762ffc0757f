"""``genesis verify FILE|ID`` (receipts, checked on this machine) and ``genesis keys
init | rotate | list`` (the signing keys in the local key directory: an operator's tool on the
host that runs the worker and the engine)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from cli.client import CliError, segment
from cli.output import Cli, cli_of, examples, group, handled, table
from genesis import signing
from genesis.config import get_settings

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (for scripts)")]


def keys_of(answer: Any, source: str) -> dict[str, bytes]:
    """Public keys from a ``GET /v1/keys`` answer (each checked against its id)."""
    try:
        return signing.keys_of_listing(answer)
    except ValueError as exc:
        raise CliError(f"{source}: {exc}", code=2) from exc


TrustOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--trust",
        envvar="GENESIS_TRUSTED_KEY_IDS",
        help="a signing key id you confirmed on the signing host (`genesis keys list`); the API's key of that id "
        "is used (an id is the hash of its key). Repeatable",
    ),
]
KeysOpt = Annotated[
    Path | None, typer.Option(help="a GET /v1/keys answer saved from a source you trust (the keys are pinned)")
]


def pinned_keys(cli: Cli, path: Path | None, trusted: list[str] | None) -> dict[str, bytes]:
    """The public keys a check may use: those of a saved ``GET /v1/keys`` answer, or the API's keys
    of the ids the user confirmed. Never the API's keys on its own word: a server that forged a
    receipt would serve the key that verifies it."""
    if path is not None:
        try:
            answer = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CliError(f"{path}: not a saved GET /v1/keys answer: {exc}", code=2) from exc
        return keys_of(answer, str(path))
    served = keys_of(cli.api.get("/v1/keys", expect=("keys",)), "GET /v1/keys")
    wanted = {key_id for entry in trusted or [] for key_id in entry.replace(",", " ").split()}
    if not wanted:
        raise CliError(
            "no key is pinned, and the API's keys would only vouch for the API: give --keys FILE (a GET /v1/keys "
            "answer saved from a source you trust) or --trust KEY_ID for each id you confirmed with `genesis keys "
            f"list` on the signing host. The API serves: {', '.join(sorted(served)) or 'no key'}",
            code=2,
        )
    missing = sorted(wanted - set(served))
    if missing:
        raise CliError(f"the API serves no key {', '.join(missing)} (it serves {', '.join(sorted(served))})", code=2)
    return {key_id: raw for key_id, raw in served.items() if key_id in wanted}


def _receipts_in(text: str) -> tuple[list[Any], Any]:
    """The receipts of a file, and the chain's signed head when it carries one: one receipt (JSON),
    a list, a ``GET /v1/receipts`` answer ``{"receipts": [...], "head": {...}}``, or NDJSON."""
    stripped = text.strip()
    try:
        data = json.loads(stripped)
    except json.JSONDecodeError:
        try:
            return [json.loads(line) for line in stripped.splitlines() if line.strip()], None
        except json.JSONDecodeError as exc:
            raise CliError(f"neither JSON nor NDJSON: {exc}", code=2) from exc
    if isinstance(data, dict) and isinstance(data.get("receipts"), list):
        return data["receipts"], data.get("head")
    return (data if isinstance(data, list) else [data]), None


WHOLE_CHAIN_PAGE = 500
WHOLE_CHAIN_TRIES = 5


def whole_chain(cli: Cli) -> tuple[list[Any], Any]:
    """Every receipt the caller may read, page after page, and the chain's newest signed head
    (read after each page). A receipt issued while the last page was read is fetched too: that
    page is read again until the head names its newest receipt (or a few tries have passed)."""
    items: list[Any] = []
    params: dict[str, Any] = {"limit": WHOLE_CHAIN_PAGE}
    tries = 0
    while True:
        answer = cli.api.get("/v1/receipts", params=params, expect=("receipts",))
        page, head = answer["receipts"], answer.get("head")
        if answer.get("next_cursor"):
            items.extend(page)
            params["cursor"] = answer["next_cursor"]
            cli.say(f"{len(items)} receipts fetched …")
            continue
        newest = page[-1].get("hash") if page else (items[-1].get("hash") if items else None)
        tries += 1
        if not isinstance(head, dict) or head.get("prev") == newest or tries >= WHOLE_CHAIN_TRIES:
            return items + page, head


def verify_all(items: list[Any], keys: dict[str, bytes]) -> list[dict[str, Any]]:
    """Each item (a receipt in ``GET /v1/receipts/{id}``'s form) checked on this machine: its
    signature over its exact bytes, its domain tag, its fields against those bytes, its hash."""
    from audit import receipts

    results = []
    for item in items:
        rid = item.get("id") if isinstance(item, dict) else None
        try:
            if not isinstance(item, dict):
                raise signing.ReceiptInvalid("not a receipt: expected a JSON object")
            receipt = receipts.from_json(item)
            signing.verify(receipt, keys)
            claimed, actual = item.get("hash"), signing.receipt_hash(receipt)
            if claimed is not None and claimed != actual:
                raise signing.ReceiptInvalid(f"its hash is {actual}, the file says {claimed}")
            results.append({"id": rid, "ok": True, "kind": receipt["kind"], "key_id": receipt["key_id"]})
        except (signing.ReceiptInvalid, ValueError, TypeError) as exc:
            results.append({"id": rid, "ok": False, "reason": str(exc)})
    return results


def chain_of(items: list[Any], head: Any, keys: dict[str, bytes]) -> list[str]:
    """Where the receipts, in their order, do not form one unbroken run of the chain that ends at
    its signed head (which must verify with ``keys``): a receipt left out, moved, or cut at the end."""
    from audit import receipts

    run = [receipts.from_json(item) for item in items]
    breaks = signing.chain_breaks(run)
    if head is None:
        return [*breaks, "no signed chain head came with the receipts: a cut at their end would not show"]
    try:
        if not isinstance(head, dict):
            raise signing.ReceiptInvalid("not a signed head: expected a JSON object")
        statement = receipts.from_json(head)
        signing.verify(statement, keys)
        return breaks + signing.head_findings(run, statement)
    except (signing.ReceiptInvalid, ValueError, TypeError) as exc:
        return [*breaks, f"the chain's head does not verify: {exc}"]


def register(app: typer.Typer) -> None:
    @app.command(
        epilog=examples(
            "genesis verify rcpt_3f2a9c0d1e2b3c4d5e6f7a8b --trust k_1a2b3c4d5e6f7a8b",
            "genesis verify receipts.json --keys keys.json",
            "curl -s localhost:8000/v1/receipts?mutation_id=mut_ab12cd > r.json; genesis verify r.json",
            "genesis verify chain --trust k_1a2b3c4d5e6f7a8b",
        )
    )
    @handled
    def verify(
        ctx: typer.Context,
        what: Annotated[
            str,
            typer.Argument(
                help="a receipt id, a file of receipts (JSON, a list, a GET /v1/receipts answer, NDJSON), or 'chain': "
                "every receipt you may read, fetched from the API (implies --chain)"
            ),
        ],
        keys: KeysOpt = None,
        trust: TrustOpt = None,
        chain: Annotated[
            bool,
            typer.Option(
                "--chain",
                help="also require the receipts, in the file's order, to be one unbroken run of the chain that ends at "
                "its signed head",
            ),
        ] = False,
        json_out: JsonOpt = False,
    ) -> None:
        """Verify signed receipts on this machine.

        Each receipt's Ed25519 signature is checked here against pinned public keys (a saved
        GET /v1/keys answer, or the API's keys of the ids you confirmed with --trust: never the
        API's keys on its own word), under its kind's domain tag, over its exact canonical
        bytes, and the fields shown beside those bytes must say the same; nothing is taken on the
        server's word. With --chain, each receipt must also name the previous one's hash, and the
        last must be the newest of the chain's signed head (a receipt left out, reordered or cut
        at the end shows). `genesis verify chain` fetches every receipt you may read (an operator:
        the whole chain) and checks it so. Exit status 1 if any check fails."""
        cli = cli_of(ctx, json_out)
        path = Path(what)
        head = None
        if path.exists():
            try:
                items, head = _receipts_in(path.read_text())
            except (OSError, UnicodeDecodeError) as exc:
                raise CliError(f"{path}: cannot read it: {exc}", code=2) from exc
        elif what == "chain":
            if not cli.operator_key:
                cli.say(
                    "no operator key: only the receipts your key may read are fetched, a part of the chain whose "
                    "links break; give --operator-key (GENESIS_OPERATOR_KEY) to check the whole chain",
                    soft_wrap=True,
                )
            items, head = whole_chain(cli)
            chain = True
        elif signing.RECEIPT_ID_PATTERN.match(what):
            served = cli.api.get(f"/v1/receipts/{segment(what, 'receipt id')}", expect=("cbor",))
            if served.get("id") != what:
                raise CliError(f"asked for {what}, the API answered with {served.get('id')!r}")
            items = [served]
        else:
            raise CliError(
                f"{what}: no such file, not 'chain', and not a receipt id ('rcpt_' followed by 24 hex digits)", code=2
            )
        public = pinned_keys(cli, keys, trust)
        results = verify_all(items, public)
        ok = bool(results) and all(r["ok"] for r in results)
        breaks = chain_of(items, head, public) if chain and ok else []
        data = {"results": results, "verified_here": True, **({"chain_breaks": breaks} if chain and ok else {})}
        cli.emit(data, lambda: _render(cli, results, breaks if chain and ok else None))
        if not ok or breaks:
            raise typer.Exit(1)

    keys_group = group(
        app, "keys", "The keys that sign receipts (on the worker's and engine's host)", "genesis keys list"
    )

    @keys_group.command("init", epilog=examples("genesis keys init"))
    @handled
    def keys_init(ctx: typer.Context, json_out: JsonOpt = False) -> None:
        """Create the signing key if there is none (`make run` does it once)."""
        cli = cli_of(ctx, json_out)
        keyring = signing.ensure_keyring(get_settings().receipt_keys_path)
        _publish(keyring)
        cli.emit({"current": keyring.current, "directory": str(keyring.directory)}, lambda: _show(cli, keyring))

    @keys_group.command("rotate", epilog=examples("genesis keys rotate"))
    @handled
    def keys_rotate(ctx: typer.Context, json_out: JsonOpt = False) -> None:
        """Make a new signing key; the old ones stay and still verify what they signed.

        Restart the worker and the engine to sign with it."""
        cli = cli_of(ctx, json_out)
        directory = get_settings().receipt_keys_path
        signing.ensure_keyring(directory)
        signing.rotate(directory)
        keyring = signing.load_keyring(directory)
        _publish(keyring)
        cli.emit({"current": keyring.current, "directory": str(directory)}, lambda: _show(cli, keyring))

    @keys_group.command("list", epilog=examples("genesis keys list", "genesis keys list --json"))
    @handled
    def keys_list(ctx: typer.Context, json_out: JsonOpt = False) -> None:
        """The signing keys of the local key directory."""
        cli = cli_of(ctx, json_out)
        try:
            keyring = signing.load_keyring(get_settings().receipt_keys_path)
        except (FileNotFoundError, ValueError) as exc:
            raise CliError(str(exc)) from exc
        data = {"current": keyring.current, "keys": sorted(keyring.public_keys()), "directory": str(keyring.directory)}
        cli.emit(data, lambda: _show(cli, keyring))


def _publish(keyring: signing.Keyring) -> None:
    """The public keys into Postgres (what GET /v1/keys serves)."""
    from audit import receipts
    from genesis.db.session import get_engine, get_sessionmaker

    settings = get_settings()

    async def run() -> None:
        try:
            await receipts.publish_public_keys(get_sessionmaker(settings.database_url), keyring)
        finally:
            await get_engine(settings.database_url).dispose()

    try:
        asyncio.run(run())
    except Exception as exc:  # the key exists; only its publication failed
        raise CliError(f"the key is in {keyring.directory}, but publishing it to Postgres failed: {exc}") from exc


def _show(cli: Cli, keyring: signing.Keyring) -> None:
    rows = [[kid, "current" if kid == keyring.current else "verifies only"] for kid in sorted(keyring.public_keys())]
    cli.console.print(table(f"keys in {keyring.directory}", ["key id", "use"], rows, whole=("key id",)))


def _render(cli: Cli, results: list[dict[str, Any]], breaks: list[str] | None) -> None:
    for r in results:
        if r["ok"]:
            cli.console.print(f"[green]ok[/] {r['id']} ({r['kind']}, key {r['key_id']})")
        else:
            cli.console.print(f"[red]FAILED[/] {escape(str(r['id']))}: {escape(r['reason'])}", soft_wrap=True)
    good = sum(r["ok"] for r in results)
    if not results:  # an empty listing fails: nothing was shown to be genuine
        cli.console.print(
            "no receipt to verify: the listing is empty (a mutation id with no receipts, or a filter that "
            "matched nothing: GET /v1/receipts?mutation_id=… lists a mutation's)"
        )
        return
    cli.console.print(f"{good} of {len(results)} receipt(s) verified here, with the public keys only")
    if breaks is not None:
        for line in breaks:
            cli.console.print(f"[red]CHAIN BROKEN[/] {escape(line)}", soft_wrap=True)
        if breaks:
            cli.console.print(
                "(a listing filtered by mutation, agent or kind is not a run of the chain: other receipts sit "
                "between its own; and one page of several (its next_cursor set) ends before the head: --chain "
                "fails on either though nothing was changed. Check such a file without --chain, and the chain "
                "itself with `genesis verify chain`)",
                soft_wrap=True,
            )
        if not breaks:
            cli.console.print(f"the {len(results)} receipt(s) form one unbroken run of the chain, to its signed head")
