"""The README's first-trait walkthrough stays true: the example trait files it names exist, each
passes the gatekeeper under the name it checks or proposes it with (or is rejected with the
verdict and log line the README shows), and the commands it shows exist on the command line."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from cli import app
from gatekeeper import validate
from tests.example_traits import ROOT, example

README = ROOT / "README.md"
TEXT = README.read_text(encoding="utf-8")

NAMED = re.compile(r"examples/traits/\w+\.py")
CLI_PROPOSE = re.compile(r"genesis propose (examples/traits/\w+\.py) --name (\w+)")
CURL_PROPOSE = re.compile(r'"trait_name": "(\w+)"[^\n]*open\("(examples/traits/\w+\.py)"\)')
REJECTED = re.compile(r"^Rejected: ([A-Z_]+)\n  (.+)$", re.M)
CLI_CHECK = re.compile(r"genesis check (examples/traits/\w+\.py)(?: --name (\w+))?")
PASSED = re.compile(r"^Passed: (\w+) would pass validation and the sandbox test", re.M)


def test_the_example_traits_the_readme_names_exist():
    named = set(NAMED.findall(TEXT))
    assert {"examples/traits/energy_saver.py", "examples/traits/forager.py"} <= named, named
    for path in named:
        assert (ROOT / path).is_file(), f"README names {path}, which does not exist"


def test_the_readme_proposals_get_the_verdicts_it_shows():
    proposals = CLI_PROPOSE.findall(TEXT) + [(path, name) for name, path in CURL_PROPOSE.findall(TEXT)]
    assert {name for _, name in proposals} >= {"energy_saver", "forager", "snooper"}, proposals
    shown_rejections = {code: line for code, line in REJECTED.findall(TEXT)}
    for path, trait_name in proposals:
        result = validate(trait_name, (ROOT / path).read_text(encoding="utf-8"))
        assert result.failure_code == example(ROOT / path).failure_code, (path, result.validation_log)
        if not result.ok:
            assert shown_rejections.get(result.failure_code) == result.validation_log[-1], (path, result.validation_log)


def test_the_readme_checks_come_before_proposing_and_get_the_verdicts_it_shows():
    checks = [(path, name or Path(path).stem) for path, name in CLI_CHECK.findall(TEXT)]
    assert {path for path, _ in checks} >= {"examples/traits/energy_saver.py", "examples/traits/forager.py"}, checks
    assert TEXT.index("genesis check examples/traits/") < TEXT.index("genesis propose examples/traits/")
    for path, trait_name in checks:  # the name genesis check takes from the file
        result = validate(trait_name, (ROOT / path).read_text(encoding="utf-8"))
        assert result.failure_code == example(ROOT / path).failure_code, (path, result.validation_log)
    shown = set(PASSED.findall(TEXT))
    assert shown and shown <= {name for path, name in checks if example(ROOT / path).failure_code is None}, shown


def test_the_readme_commands_exist():
    assert "genesis agents register --name my-first-agent" in TEXT
    assert "genesis propose examples/traits/energy_saver.py --name energy_saver --goal" in TEXT
    runner = CliRunner()
    for command in (["agents", "register", "--help"], ["check", "--help"], ["propose", "--help"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 0, (command, result.output)
    assert "--name" in runner.invoke(app, ["agents", "register", "--help"]).output
    propose_help = runner.invoke(app, ["propose", "--help"]).output
    assert "--name" in propose_help and "--goal" in propose_help
