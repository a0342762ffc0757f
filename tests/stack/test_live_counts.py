"""Every surface counts the same live traits at one moment: `GET /api/stats` (``live_traits``),
`GET /api/traits`, the registry the engine loads from, `genesis world stats`, `genesis traits`,
the viewer's header and trait list — and once it has loaded them, what the engine runs
(``active_traits``, each trait's ``running``). Real API, worker, engine and trait host; the CLI
in this process; the viewer in headless Chromium."""

from __future__ import annotations

import json
import re
import uuid

import httpx

from genesis.redis_keys import REGISTRY_TRAITS, REGISTRY_VERSION
from tests import agents, traits
from tests.cli_runs import invoke
from tests.pipeline_steps import wait_for_status, wait_until
from tests.viewer_pages import viewer, wait_js

TRAITS = 3


async def test_every_surface_counts_the_same_live_traits(
    http, engine_proc, start_api, browser, redis_client, temporal_client
):
    # An endless window: the traits stay under observation (live) while the surfaces are read.
    endless = await start_api("live-counts", observation_window_ticks=1_000_000_000)
    agent = await agents.register(http, "live-counts")
    names = sorted(f"live_count_{i}_{uuid.uuid4().hex[:6]}" for i in range(TRAITS))
    mutation_ids = []
    async with httpx.AsyncClient(base_url=endless, timeout=30) as client:
        for name in names:
            body = {"trait_name": name, "goal": "counted", "code": traits.unique_seeker()}
            response = await client.post("/api/mutations/propose", json=body, headers=agent.headers)
            assert response.status_code == 202, response.text
            mutation_ids.append(response.json()["mutation_id"])
    try:
        for mutation_id in mutation_ids:
            assert (await wait_for_status(http, mutation_id, {"activated", "rejected", "failed"}, 120))[
                "status"
            ] == "activated"

        async def settled() -> dict | None:
            """/api/stats once the engine runs what is live (it loads a new trait within a second or two)."""
            stats = (await http.get("/api/stats")).json()
            live = stats["live_traits"]
            return stats if set(names) <= set(live) and sorted(stats["active_traits"]) == live else None

        await wait_until(settled, timeout_s=60, what="the engine to run the live traits")
        async with viewer(browser, str(http.base_url)) as page:
            await wait_js(
                page, f"document.querySelectorAll('#traits li[data-trait-name^=\"live_count_\"]').length === {TRAITS}"
            )
            # One moment: no activation or rollback between the first read and the last.
            version = await redis_client.get(REGISTRY_VERSION)
            stats = await settled()
            listed = (await http.get("/api/traits")).json()
            registry = sorted(name.decode() for name in await redis_client.hkeys(REGISTRY_TRAITS))
            code, out, err = await invoke(str(http.base_url), "traits", "--json")
            assert code == 0, err
            cli_traits = json.loads(out)["traits"]
            code, out, err = await invoke(str(http.base_url), "world", "stats", "--json")
            assert code == 0, err
            cli_stats = json.loads(out)
            code, text, err = await invoke(str(http.base_url), "world", "stats")
            assert code == 0, err
            await page.evaluate("window.genesisViewer.traits.refresh()")
            header = await page.locator("#stats").text_content()
            viewer_traits = await page.eval_on_selector_all(
                "#traits li:not([data-quarantined]):not([data-departed])",
                "rows => rows.map(row => row.dataset.traitName)",
            )
            assert await redis_client.get(REGISTRY_VERSION) == version, "the live set changed while it was read"
            assert page.errors == []

        assert stats is not None
        live = stats["live_traits"]
        assert set(names) <= set(live)
        assert [t["trait_name"] for t in listed["traits"]] == live
        assert registry == live  # the registry the engine loads from (nothing is quarantined here)
        assert sorted(stats["active_traits"]) == live  # ... and what the engine runs, once loaded
        assert all(t["running"] is True for t in listed["traits"]), listed["traits"]
        assert [t["trait_name"] for t in cli_traits if not t["quarantined"]] == live
        assert cli_stats["live_traits"] == live
        assert re.search(rf"^live traits\s+{len(live)}: ", text, re.M) and not re.search(r"^running", text, re.M), text
        assert f"live traits {len(live)} ·" in header and "running" not in header, header
        assert sorted(viewer_traits) == live
        for name in names:
            [row] = [t for t in listed["traits"] if t["trait_name"] == name]
            assert row["mutation_status"] == "activated" and row["fitness_verdict"] is None
    finally:
        for mutation_id in mutation_ids:
            await http.post(f"/api/mutations/{mutation_id}/rollback", json={"reason": "counted"}, headers=agent.headers)
