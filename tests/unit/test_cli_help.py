"""Every `genesis` command and group shows examples in its --help, and every example is a
command line that the CLI parses as written (its command exists, its options and arguments are
accepted)."""

from __future__ import annotations

import re
import shlex

import pytest
import typer
from typer.testing import CliRunner

from cli import app
from genesis.config import PROJECT_ROOT

EXAMPLE = re.compile(r"^\s*(?:.*\|\s*)?(genesis\s.*?)\s*$")


def command_paths(group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = [prefix]
    for name, command in sorted(getattr(group, "commands", {}).items()):
        paths += command_paths(command, (*prefix, name)) if hasattr(command, "commands") else [(*prefix, name)]
    return paths


ROOT = typer.main.get_command(app)
PATHS = command_paths(ROOT)


def unparsed(context) -> list[str]:
    """What a group left for its subcommand (click names the first part protected_args; typer's
    vendored click keeps it private)."""
    return [*getattr(context, "protected_args", getattr(context, "_protected_args", [])), *context.args]


def examples_of(help_text: str) -> list[str]:
    after = help_text.split("Examples:", 1)[1]
    lines = [line.strip(" │") for line in after.splitlines()]
    return [m.group(1) for line in lines if (m := EXAMPLE.match(line))]


def test_the_command_tree_is_the_documented_one():
    names = {" ".join(p) for p in PATHS}
    for command in ("traits", "tasks", "whoami", "status", "world stats", "mutations list", "agents register"):
        assert command in names, sorted(names)


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "genesis")
def test_every_help_has_examples_that_parse(path, monkeypatch):
    monkeypatch.chdir(PROJECT_ROOT)  # examples name files of the checkout (tests/histories/...)
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "Examples:" in result.output, f"`genesis {' '.join(path)} --help` shows no examples"
    lines = examples_of(result.output)
    assert lines, result.output
    for line in lines:
        words = shlex.split(line)[1:]
        context = ROOT.make_context("genesis", list(words))  # global options, then the command path
        command, args = ROOT, unparsed(context)
        while hasattr(command, "commands"):
            name, command, args = command.resolve_command(context, args)
            context = command.make_context(name, list(args), parent=context)
            args = unparsed(context) if hasattr(command, "commands") else context.args
        assert not args, f"{line!r}: unexpected arguments {args}"
        if path:  # an example of a command runs that command (or, for a group, one of its commands)
            assert context.command_path.split()[1 : 1 + len(path)] == list(path), (line, context.command_path)
