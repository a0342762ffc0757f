"""The README's first-trait walkthrough stays true: its trait files pass the gatekeeper under the
names it proposes them with, and the commands it shows exist on the command line."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from gatekeeper import validate
from genesis.cli import app

README = Path(__file__).resolve().parents[2] / "README.md"


def heredocs(text: str) -> dict[str, str]:
    """``cat > NAME.py <<'EOF' ... EOF`` blocks: file name -> content."""
    return {name: body for name, body in re.findall(r"cat > (\w+\.py) <<'EOF'\n(.*?)\nEOF\n", text, re.S)}


def test_the_readme_traits_pass_the_gatekeeper():
    files = heredocs(README.read_text(encoding="utf-8"))
    assert set(files) == {"slow_burner.py", "food_seeker.py"}, sorted(files)
    for file_name, code in files.items():
        result = validate(file_name.removesuffix(".py"), code + "\n")
        assert result.ok, (file_name, result.failure_code, result.validation_log)


def test_the_readme_commands_exist():
    text = README.read_text(encoding="utf-8")
    assert "genesis agents register --name my-first-agent" in text
    assert "genesis propose slow_burner.py --name slow_burner --goal" in text
    runner = CliRunner()
    for command in (["agents", "register", "--help"], ["propose", "--help"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 0, (command, result.output)
    assert "--name" in runner.invoke(app, ["agents", "register", "--help"]).output
    propose_help = runner.invoke(app, ["propose", "--help"]).output
    assert "--name" in propose_help and "--goal" in propose_help
