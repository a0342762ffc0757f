"""Every `genesis` command the README and docs/ show exists as written: its subcommands resolve
on the command line and each option it passes is one that command takes. (What the commands do
against a running world is the stack layer's: test_cli.py, test_cli_newcomer.py, ....)"""

from __future__ import annotations

import re
import shlex
from typing import Any

import pytest
import typer

from cli import app
from genesis.config import PROJECT_ROOT

PAGES = [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
INLINE = re.compile(r"`(genesis [^`]+)`")
NOT_COMMANDS = {"genesis genesis_test"}  # GENESIS_PG_DATABASES' default value (docs/operations.md)


def shown_commands() -> list[tuple[str, str]]:
    """(page:line, command) for each `genesis ...` in a code block or an inline code span."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        name = page.relative_to(PROJECT_ROOT)
        for block in FENCE.finditer(text):
            first = text.count("\n", 0, block.start(1)) + 1
            joined = block.group(1).replace("\\\n", " ")
            for offset, line in enumerate(joined.splitlines()):
                line = line.strip().removeprefix("$ ")
                for part in re.split(r"\s*(?:&&|\|\||;|\|)\s*", line.split("  #")[0]):
                    if part.startswith("genesis "):
                        found.append((f"{name}:{first + offset}", part))
        for span in INLINE.finditer(text):
            if span.group(1) not in NOT_COMMANDS:
                found.append((f"{name}:{text.count(chr(10), 0, span.start()) + 1}", span.group(1)))
    return found


def resolve(tokens: list[str]) -> tuple[Any, list[str]]:
    """The (sub)command the tokens name, and the tokens left for it (Typer's own click: a group
    is what has ``commands``)."""
    command = typer.main.get_command(app)
    rest = tokens
    while hasattr(command, "commands") and rest and rest[0] in command.commands:
        command, rest = command.commands[rest[0]], rest[1:]
    return command, rest


COMMANDS = shown_commands()


def test_the_docs_show_commands():
    assert len(COMMANDS) > 100, len(COMMANDS)


@pytest.mark.parametrize(("where", "line"), COMMANDS, ids=[w for w, _ in COMMANDS])
def test_a_command_the_docs_show_exists(where, line):
    try:
        tokens = shlex.split(line)[1:]
    except ValueError:  # an unclosed quote: an excerpt of a longer line
        tokens = line.split()[1:]
    command, rest = resolve(tokens)
    if hasattr(command, "commands"):
        placeholder = rest and (rest[0].startswith("-") or rest[0] in ("…", "...") or rest[0].isupper())
        assert not rest or placeholder, f"{where}: no command {rest[0]!r}"
        return
    known = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)} | {"--help"}
    unknown = [t.split("=")[0] for t in rest if t.startswith("--") and t.split("=")[0] not in known]
    assert not unknown, f"{where}: `{line}` passes {unknown}; `genesis {command.name}` takes {sorted(known)}"
