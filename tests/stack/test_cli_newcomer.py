"""A new user's first hour with the `genesis` command line, against the suite's real API, worker,
Temporal, Postgres, Redis, Docker and a running engine: the README walkthrough run twice (the
second run is refused clearly, without a traceback or a request for an empty id), a key hint that
pastes at any terminal width, full ids in lists at 80 columns, `genesis status` without an id,
a readable `world stats`, and the commands `traits`, `tasks` and `whoami`."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path

import httpx
import pytest

from cli.processes import api_process, engine_process, wait_for_api, worker_process
from genesis.config import PROJECT_ROOT
from tests import agents, traits
from tests.cli_runs import run_cli
from tests.own_stack import own_settings
from tests.pipeline_steps import wait_for_status, wait_until
from tests.task_board import publish

README = PROJECT_ROOT / "README.md"
EXPORT_LINE = re.compile(r"^export GENESIS_API_KEY=(gen_\S+)$", re.M)


def lines_of(output: str) -> list[str]:
    """The lines as a terminal shows them (a table pads its rows with spaces)."""
    return [line.rstrip() for line in output.splitlines()]


async def register(api_url: str, name: str, columns: int) -> tuple[str, str, str]:
    """`genesis agents register` in a terminal ``columns`` wide: (agent_id, the export line, all output)."""
    code, out, err = await run_cli(api_url, "agents", "register", "--name", name, columns=columns)
    assert code == 0, out + err
    agent_id = re.search(r"agent (agt_[0-9a-f]+) registered", out).group(1)
    [line] = [m.group(0) for m in EXPORT_LINE.finditer(out)]
    return agent_id, line, out


async def test_the_key_hint_pastes_whole_at_40_and_80_columns(api_url, tmp_path):
    for columns in (40, 80):
        agent_id, line, out = await register(api_url, f"narrow-{columns}", columns)
        key = EXPORT_LINE.search(out).group(1)
        assert f"API key (shown only this once): {key}" in lines_of(out), out
        # Paste the line into a shell, exactly as printed, and ask who the key belongs to.
        script = f"{line}\nexec {sys.executable} -m cli whoami --json\n"
        env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_")} | {"GENESIS_API_URL": api_url}
        shell = await asyncio.create_subprocess_exec(
            "bash", "-c", script, cwd=PROJECT_ROOT, env=env, stdout=asyncio.subprocess.PIPE
        )
        whoami, _ = await asyncio.wait_for(shell.communicate(), 60)
        assert shell.returncode == 0 and json.loads(whoami)["agent_id"] == agent_id, whoami


async def test_whoami_names_the_key_s_agent_and_refuses_without_one(api_url, http):
    agent = await agents.register(http, "whoami-agent", "checks its identity")
    code, out, err = await run_cli(api_url, "whoami", key=agent.api_key, columns=80)
    assert code == 0, out + err
    assert out.splitlines()[0] == f"{agent.agent_id} whoami-agent — checks its identity", out
    assert f"gen_{agent.api_key.split('_')[1]}_…" in out and "0 proposed" in out and "proposals this hour" in out
    code, out, err = await run_cli(api_url, "whoami", columns=80)
    assert code == 1 and "API_KEY_REQUIRED" in err and "genesis agents register" in err
    code, out, err = await run_cli(api_url, "whoami", key="gen_00000000_not-a-key", columns=80)
    assert code == 1 and "INVALID_API_KEY" in err and "Traceback" not in err


async def test_mutations_list_shows_whole_ids_at_80_columns(api_url, http):
    lister = await agents.register(http, "list-at-80")
    ids = []
    for variant in (1, 2):  # rejected at once: a forbidden import
        body = {
            "trait_name": f"a_rather_long_trait_name_number_{variant}",
            "code": traits.FORBIDDEN_IMPORT.replace("hi", f"eighty {variant}"),
        }
        response = await http.post("/api/mutations/propose", json=body, headers=lister.headers)
        assert response.status_code == 202, response.text
        ids.append(response.json()["mutation_id"])
    for mutation_id in ids:
        await wait_for_status(http, mutation_id, {"rejected"})
    for columns in (80, 40):
        code, out, err = await run_cli(api_url, "mutations", "list", "--agent", lister.agent_id, columns=columns)
        assert code == 0, out + err
        assert all(len(line) <= columns for line in lines_of(out)), out
        for mutation_id in ids:
            assert re.search(rf"(^|\s){mutation_id}(\s|$)", out, re.M), (columns, out)
        assert lister.agent_id in out and "AST_IMPORT_FORBIDDEN" in out
    # the id as copied from the list opens the mutation
    copied = re.search(r"^(mut_[0-9a-f]+)\s", out, re.M).group(1)
    code, out, err = await run_cli(api_url, "status", copied, columns=80)
    assert code == 3 and copied in out, out + err


async def test_status_without_an_id_shows_your_latest_mutation(api_url, http):
    newcomer = await agents.register(http, "status-newcomer")
    code, out, err = await run_cli(api_url, "status", key=newcomer.api_key, columns=80)
    assert code == 1 and f"your agent {newcomer.agent_id} has proposed no mutation yet" in err, out + err
    code, out, err = await run_cli(api_url, "status", columns=80)
    assert code == 2 and "give a MUTATION_ID" in err and "Traceback" not in err

    body = {"trait_name": "status_latest", "code": traits.FORBIDDEN_IMPORT.replace("hi", "latest")}
    first = (await http.post("/api/mutations/propose", json=body, headers=newcomer.headers)).json()["mutation_id"]
    body = {"trait_name": "status_latest_2", "code": traits.FORBIDDEN_IMPORT.replace("hi", "latest 2")}
    latest = (await http.post("/api/mutations/propose", json=body, headers=newcomer.headers)).json()["mutation_id"]
    await wait_for_status(http, latest, {"rejected"})
    code, out, err = await run_cli(api_url, "status", key=newcomer.api_key, columns=80)
    assert code == 3, out + err  # rejected, like `genesis status ID`
    assert out.startswith(f"the latest mutation of your agent {newcomer.agent_id}: {latest}\n"), out
    assert first not in out and "AST_IMPORT_FORBIDDEN" in out
    code, out, err = await run_cli(api_url, "--json", "mutations", "status", key=newcomer.api_key)
    assert code == 3 and json.loads(out)["mutation_id"] == latest  # stdout stays one JSON document
    assert f"the latest mutation of your agent {newcomer.agent_id}: {latest}" in err


async def test_world_stats_traits_and_tasks_read_clearly(api_url, http, engine_proc, operator_http):
    owner = await agents.register(http, "traits-owner")
    body = {"trait_name": "cli_seeker", "code": traits.seeker(7101), "goal": "for genesis traits"}
    mutation_id = (await http.post("/api/mutations/propose", json=body, headers=owner.headers)).json()["mutation_id"]
    await wait_for_status(http, mutation_id, {"activated", "kept"})

    async def engine_runs_it() -> bool:
        return "cli_seeker" in (await http.get("/api/stats")).json()["active_traits"]

    await wait_until(engine_runs_it, timeout_s=30, what="the engine to load the trait")
    code, out, err = await run_cli(api_url, "world", "stats", columns=80)
    assert code == 0, out + err
    assert "['" not in out and "{'" not in out, out  # no Python list or dict reprs
    assert re.search(r"^population\s+\d[\d,]* Molbots, average energy \d", out, re.M), out
    # the list of live traits may wrap onto indented lines at 80 columns
    live = re.search(r"^live traits\s+(\d+): (.*(?:\n {3,}\S.*)*)", out, re.M)
    assert live and re.search(r"\bcli_seeker\b", live.group(2)), out
    assert re.search(r"^world\s+running, tick [\d,]+ at [\d.]+ ticks/s", out, re.M), out

    code, out, err = await run_cli(api_url, "traits", columns=80)
    assert code == 0, out + err
    lines = lines_of(out)
    [at] = [i for i, line in enumerate(lines) if line.startswith("cli_seeker v1 ")] or [out]
    assert mutation_id in lines[at].split() and owner.agent_id in lines[at].split(), out
    # The verdict may wrap onto the row's next lines (a long trait name in the list widens the
    # first column): they start with spaces, where a new row starts with its trait.
    row = lines[at]
    for line in lines[at + 1 :]:
        if not line.startswith(" ") or not line.strip():
            break
        row += " " + line.strip()
    assert re.search(r"\s(observing|kept, \w+)$", row), (row, out)
    code, out, err = await run_cli(api_url, "traits", "--json")
    [listed] = [t for t in json.loads(out)["traits"] if t["trait_name"] == "cli_seeker"]
    assert listed["mutation_id"] == mutation_id and listed["agent_id"] == owner.agent_id
    assert listed["version"] == 1 and listed["quarantined"] is False and listed["quarantine"] is None
    assert listed["mutation_status"] in ("activated", "kept")
    assert isinstance(listed["carriers"], int) or listed["carriers"] is None

    task = await publish(operator_http, task_id=f"task_cli_{mutation_id[4:]}", description="Energy is low. " * 8)
    code, out, err = await run_cli(api_url, "tasks", columns=80)
    assert code == 0, out + err
    assert re.search(rf"(^|\s){task['task_id']}(\s|$)", out, re.M) and "starvation" in out, out
    assert "genesis propose FILE --name NAME --task TASK_ID" in out
    code, out, err = await run_cli(api_url, "tasks", "--json")
    assert task["task_id"] in {t["task_id"] for t in json.loads(out)["tasks"]}
    await operator_http.post(f"/api/agents/tasks/{task['task_id']}/resolve", json={"reason": "test over"})
    await http.post(f"/api/mutations/{mutation_id}/rollback", json={"reason": "test over"}, headers=owner.headers)
    await wait_for_status(http, mutation_id, {"rolled_back"}, timeout_s=90)


def walkthrough_script() -> str:
    """The README's walkthrough as a new user types it into a shell in the checkout: step 1 (minus
    the venv, which the test's interpreter stands for), `genesis agents register` (then the export
    line it printed, pasted), `genesis check`, `genesis propose`, and the curl commands of step 5."""
    readme = README.read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", readme, re.S)
    step1 = next(b for b in blocks if "examples/traits/" in b and "curl" not in b)
    step2 = next(b for b in blocks if "genesis agents register" in b)
    step4 = next(b for b in blocks if "curl" in b and "/api/mutations/propose" in b)
    check = re.search(r"^\$ (genesis check .*)$", readme, re.M).group(1)
    propose = re.search(r"^\$ (genesis propose .*--goal .*)$", readme, re.M).group(1)
    register = next(line for line in step2.splitlines() if line.startswith("genesis agents register"))
    return "\n".join(
        [
            'genesis() { "$GENESIS_PYTHON" -m cli "$@"; }',
            "\n".join(line for line in step1.splitlines() if not line.startswith(". .venv")),
            f'{register} > "$WALK_DIR/register.out"; echo "register exit $?"; cat "$WALK_DIR/register.out"',
            'eval "$(grep "^export GENESIS_API_KEY=" "$WALK_DIR/register.out")"',  # the line the user pastes
            f'{check}; echo "check exit $?"',
            f'{propose}; echo "propose exit $?"',
            step4.replace("localhost:8000", "$GENESIS_API_URL"),
            'echo "curl exit $?"',
        ]
    )


async def run_walkthrough(api_url: str, scratch: Path) -> tuple[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_")}
    env.update({"GENESIS_API_URL": api_url, "GENESIS_PYTHON": sys.executable, "COLUMNS": "80"})
    env["WALK_DIR"] = str(scratch)
    shell = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        walkthrough_script(),
        cwd=PROJECT_ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(shell.communicate(), 240)
    return out.decode(), err.decode()


@pytest.fixture
async def walkthrough_stack(settings):
    """A stack of its own (database, Redis db, worker, API, engine) as `make run` gives a
    newcomer: the README's traits go live and stay in its world, not in the session's, whose
    other tests propose the same example files. Its rollback threshold no window reaches keeps
    every trait, so the first run's verdicts do not depend on how the world happened to go."""
    own = await own_settings(settings, "walkthrough", rollback_threshold=-1000.0)
    processes = [worker_process(own, "walkthrough-worker"), engine_process(own, "walkthrough-engine")]
    api = api_process(own, "walkthrough-api")
    for process in [*processes, api]:
        process.start()
    try:
        yield await asyncio.to_thread(wait_for_api, api)
    finally:
        for process in [api, *processes]:
            process.stop()


async def test_the_readme_walkthrough_twice(walkthrough_stack, tmp_path):
    """The second run registers another agent and proposes the same traits: both are live, so
    both proposals are refused (409 TRAIT_EXISTS) with a clear line, no traceback, and no status
    request for an empty mutation id."""
    api_url = walkthrough_stack
    cli_trait = re.search(r"^\$ genesis propose \S+ --name (\w+)", README.read_text(), re.M).group(1)
    out, err = await run_walkthrough(api_url, tmp_path)
    assert "register exit 0" in out and "propose exit 0" in out and "curl exit 0" in out, out + err
    assert "check exit 0" in out and f"Passed: {cli_trait} would pass" in out, out + err
    assert f"kept: {cli_trait} v1" in out, out
    first_key = EXPORT_LINE.search(out).group(1)
    curl_mutation = re.search(r'"mutation_id":"(mut_[0-9a-f]+)"', err).group(1)  # the answer tee'd to stderr
    assert f'"mutation_id": "{curl_mutation}"' in out  # then its status
    async with httpx.AsyncClient(base_url=api_url, timeout=30) as http:
        await wait_for_status(http, curl_mutation, {"activated", "kept"})  # a user reads the docs meanwhile

    out, err = await run_walkthrough(api_url, tmp_path)
    assert "register exit 0" in out and "propose exit 1" in out and "curl exit 1" in out, out + err
    assert "check exit 2" in out, out + err  # the check says what the proposal is told: TRAIT_EXISTS
    assert "Traceback" not in out + err and "KeyError" not in out + err
    assert f"Error: TRAIT_EXISTS: trait '{cli_trait}' is live as v1" in err
    hint = f"with this command: add --replaces {cli_trait}@1 to modify your own live trait, or choose another --name"
    assert hint in err
    assert "refused: TRAIT_EXISTS" in err and "Not Found" not in out + err  # no GET /api/mutations//status

    async with httpx.AsyncClient(base_url=api_url, timeout=30, headers={"X-API-Key": first_key}) as http:
        cli_mutation = (await http.get(f"/api/traits/{cli_trait}")).json()["live"]["mutation_id"]
        for mutation_id in (cli_mutation, curl_mutation):
            await wait_for_status(http, mutation_id, {"kept"}, timeout_s=90)
