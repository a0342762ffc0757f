"""The example traits of ``examples/traits/`` as tests read them: each file's header says the
command that proposes it (``# Propose it: genesis propose <path> --name <trait_name> ...``) and
its verdict (``# Verdict: passes ...`` or ``# Verdict: rejected by the gatekeeper with <CODE>``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES_DIR = ROOT / "examples" / "traits"

VERDICT = re.compile(r"^# Verdict: (?:passes |rejected by the gatekeeper with ([A-Z_]+)\b)", re.M)
PROPOSE = re.compile(r"^# Propose it: genesis propose (\S+) --name (\w+)", re.M)


@dataclass(frozen=True)
class ExampleTrait:
    path: Path
    code: str
    trait_name: str
    failure_code: str | None  # None: it passes the gatekeeper and the sandbox test
    proposed_path: str  # as the header's command names it

    @property
    def header(self) -> str:
        """The leading comment, as one line of words (wrapped lines joined)."""
        lines = []
        for line in self.code.splitlines():
            if not line.startswith("#"):
                break
            lines.append(line.lstrip("#"))
        return " ".join(" ".join(lines).split())


def example(path: Path) -> ExampleTrait:
    code = path.read_text(encoding="utf-8")
    verdict, propose = VERDICT.search(code), PROPOSE.search(code)
    assert verdict and propose, f"{path.name}: the header needs a '# Verdict: ...' and a '# Propose it: ...' line"
    return ExampleTrait(path, code, propose.group(2), verdict.group(1), propose.group(1))


def examples() -> list[ExampleTrait]:
    return [example(path) for path in sorted(EXAMPLES_DIR.glob("*.py"))]
