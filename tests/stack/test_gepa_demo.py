"""The offline GEPA quickstart as docs/gepa.md gives it: `make run`'s launcher with
GENESIS_GEPA_DEMO=true (a worker and an API of its own, on a task queue nobody else polls), then
`examples/gepa_optimize.py --demo`, which finds the demo's program, examples and scripted LM in
demo.json and optimises the program to a perfect score."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import httpx

from cli.processes import free_port, launcher_process, wait_for_api
from genesis.config import PROJECT_ROOT


async def test_the_offline_quickstart_optimises_the_demo_program(gepa_stack, tmp_path):
    settings = gepa_stack.settings.override(
        gepa_demo=True,
        run_processes="worker,api",
        state_dir=tmp_path / "state",
        task_queue=f"genesis-test-gepa-demo-{free_port()}",
        api_port=free_port(),
        gepa_gateway_port=free_port(),
        gepa_workspace_dir=tmp_path / "workspace",
    )
    launcher = launcher_process(settings, "launcher-gepa-demo")
    launcher.start()
    try:
        url = await asyncio.to_thread(wait_for_api, launcher, 90)
        demo_file = tmp_path / "state" / "gepa-demo" / "demo.json"
        demo = json.loads(demo_file.read_text())
        assert demo["api"] == url and demo["entry_point"] == "qa.QA"
        env = {k: v for k, v in os.environ.items() if k != "GENESIS_API_KEY"}  # the script registers its agent
        done = await asyncio.to_thread(
            subprocess.run,
            [
                sys.executable,
                str(PROJECT_ROOT / "examples" / "gepa_optimize.py"),
                "--demo",
                str(demo_file),
                "--max-metric-calls",
                "12",
                "--workers",
                "2",
            ],
            capture_output=True,
            text=True,
            timeout=400,
            env=env,
        )
        assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
        assert "registered agent agt_" in done.stdout
        summary = json.loads(done.stdout[done.stdout.rindex('{\n  "best_score"') :])  # after gepa's own lines
        assert summary["best_score"] == 1.0, summary
        assert "PREFIX=ANSWER:" in summary["best_candidate"]["answer"], summary
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            key = done.stdout.split("GENESIS_API_KEY=", 1)[1].split(" ", 1)[0].rstrip(")")
            program = (await http.get(f"/program/{summary['program_id']}", headers={"X-API-Key": key})).json()
        assert program["status"] == "completed"
    finally:
        launcher.stop()
