"""No traceback reaches a user of `genesis`: whatever a server answers (a body without the fields
the command needs, a list where an object belongs, a proxy's HTML page, text that is not JSON),
the command ends with one clear line on stderr and a non-zero exit, and no URL is ever built
with an empty path parameter. The server is a small HTTP server of this test that answers what
each case needs (an API of another version, or something else listening on its port). And the
CLI's tables keep ids whole at any terminal width."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
from rich.console import Console

from cli.output import table
from tests.cli_runs import OddServer, run


@pytest.fixture
def odd() -> Iterator[OddServer]:
    server = OddServer()
    yield server
    server.close()


def one_clear_line(code: int, err: str, exception: BaseException | None) -> str:
    assert code not in (0, None), err
    assert exception is None or isinstance(exception, SystemExit), exception  # no uncaught exception
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    return lines[0]


def test_a_proposal_answer_without_its_id_is_reported_and_never_followed(odd, tmp_path):
    trait = tmp_path / "t.py"
    trait.write_text("class BaseTrait:\n    pass\n")
    odd.json("POST /api/mutations/propose", {"status": "queued"}, status=202)
    code, _, err, exc = run(odd, "propose", str(trait), "--name", "t")
    line = one_clear_line(code, err, exc)
    assert code == 1 and "POST /api/mutations/propose answered 202 without mutation_id, workflow_id" in line
    assert odd.requests == ["POST /api/mutations/propose"]  # no /api/mutations//status

    odd.json("POST /api/mutations/propose", {"mutation_id": "", "status": "queued", "workflow_id": "w"}, status=202)
    code, _, err, exc = run(odd, "propose", str(trait), "--name", "t")
    assert code == 1 and "without mutation_id" in one_clear_line(code, err, exc)

    odd.json("POST /api/mutations/propose", {"mutation_id": "../x", "status": "queued", "workflow_id": "w"}, 202)
    code, _, err, exc = run(odd, "propose", str(trait), "--name", "t")
    assert code == 1 and "'../x' as a mutation_id, which is not one" in one_clear_line(code, err, exc)
    assert not any("//" in r or "/x/" in r for r in odd.requests), odd.requests


def test_odd_bodies_end_in_one_line_and_a_nonzero_exit(odd):
    odd.text("GET /api/mutations/mut_00000000beef/status", "<html><body><h1>502 Bad Gateway</h1></body></html>", 502)
    code, _, err, exc = run(odd, "status", "mut_00000000beef")
    assert code == 1 and "HTTP 502: <html><body><h1>502 Bad Gateway</h1></body></html>" in one_clear_line(
        code, err, exc
    )

    odd.text("GET /api/stats", "tick=5", kind="text/plain")
    code, _, err, exc = run(odd, "world", "stats")
    assert code == 1 and "GET /api/stats answered 200 with a body that is not JSON: tick=5" in one_clear_line(
        code, err, exc
    )

    odd.json("GET /api/traits", [{"trait_name": "x"}])
    code, _, err, exc = run(odd, "traits")
    assert code == 1 and "GET /api/traits answered 200 without traits" in one_clear_line(code, err, exc)

    odd.json("GET /v1/agents/me", {"name": "no id"})
    code, _, err, exc = run(odd, "whoami")
    assert code == 1 and "without agent_id" in one_clear_line(code, err, exc)
    code, _, err, exc = run(odd, "status")  # the latest mutation of the key's agent needs its id too
    assert code == 1 and "without agent_id" in one_clear_line(code, err, exc)


def test_a_bug_is_one_line_too_and_debug_shows_its_traceback(odd):
    odd.json("GET /api/mutations", {"mutations": [17]})  # an item that is not an object
    code, _, err, exc = run(odd, "mutations", "list")
    line = one_clear_line(code, err, exc)
    assert "unexpected AttributeError in genesis mutations list: " in line and "--debug" in line
    code, _, err, exc = run(odd, "--debug", "mutations", "list")
    assert isinstance(exc, AttributeError)  # propagated for its traceback


def test_an_empty_path_parameter_is_refused_before_any_request(odd):
    for args in (["schedule", "pause", ""], ["schedule", "delete", " "]):
        code, _, err, exc = run(odd, *args)
        assert code == 2 and "the schedule id is empty" in one_clear_line(code, err, exc)
    code, _, err, _ = run(odd, "status", "")
    assert code == 2 and "is not a mutation id" in err
    assert odd.requests == []


def test_status_without_an_id_needs_a_key(odd):
    code, _, err, exc = run(odd, "status", key="")
    line = one_clear_line(code, err, exc)
    assert code == 2 and "give a MUTATION_ID" in line and "GENESIS_API_KEY" in line
    assert odd.requests == []


def rendered(records, width: int) -> list[str]:
    console = Console(file=io.StringIO(), width=width, highlight=False, color_system=None)
    console.print(records)
    return console.file.getvalue().splitlines()


@pytest.mark.parametrize("width", [120, 80, 60, 40])
def test_ids_stay_whole_at_any_width(width):
    ids = ["mut_0123456789abcdef0123", "mut_fedcba987654"]
    rows = [
        [
            ids[0],
            "a_rather_long_trait_name_for_a_list v12",
            "rejected\nAST_IMPORT_FORBIDDEN",
            "agt_5c0e9a41d2b7",
            "21:52",
        ],
        [ids[1], "slow_burner v1", "[bold green]kept[/] [bold red](quarantined)[/]", "agt_0000aaaa1111", "11-25"],
    ]
    lines = rendered(
        table("2 mutation(s)", ["id", "trait", "status", "agent", "created"], rows, ("id", "status", "agent")), width
    )
    assert all(len(line) <= width for line in lines), lines
    for whole in (*ids, "agt_5c0e9a41d2b7", "agt_0000aaaa1111", "AST_IMPORT_FORBIDDEN"):
        assert any(whole in line for line in lines), (whole, lines)
    assert any("(quarantined)" in line for line in lines) and "[bold" not in "\n".join(lines)


@pytest.mark.parametrize("width", [80, 60])
def test_a_column_of_ids_stays_whole_without_being_named(width):
    rows = [["sub_d99f629fbbfd8f18", "agt_362c4f12e53d", "accepted: moved 3 Molbots", "-"]]
    rows.append(["sub_0a1b2c3d4e5f6a7b", "agt_77d47a255230", "refused: rules forbid it", "mut_1e828d8e3a2f"])
    lines = rendered(table("round 150", ["submission", "agent", "fate", "mutation"], rows), width)
    for whole in ("sub_d99f629fbbfd8f18", "agt_362c4f12e53d", "agt_77d47a255230", "mut_1e828d8e3a2f"):
        assert any(whole in line for line in lines), (whole, lines)


def test_numbers_in_tables_are_rounded_for_people():
    rows = [["population_mean", 99.761667, 101.0], ["energy_end", 12345.678, None], ["share", 0.0123456, 0.0]]
    text = "\n".join(rendered(table("shadow", ["", "baseline", "candidate"], rows), 80))
    for shown in ("99.76", "101", "12,345.68", "0.0123", "-"):
        assert shown in text, (shown, text)
    assert "99.761667" not in text and "101.0" not in text and "0.0123456" not in text
