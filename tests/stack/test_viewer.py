"""The world viewer at ``/`` in a real headless Chromium (Debian's ``chromium`` driven by
Playwright, no downloaded browser) against the suite's real API, worker and a real engine process:
the page loads, the world canvas changes with the engine's frames, the chart draws, a trait
proposed in the form is listed with its Temporal UI link, API errors are shown as the API gave
them, and a trait's family tree is drawn; a click on a Molbot opens its inspector, the charts
draw the stored history on labelled axes, a mutation's trait name opens the trait's panel, and
the agent's tally follows its proposals. Also ``GET /api/mutations``, ``GET /api/world/history``
and ``GET /api/world/entities/{id}`` (what the page reads) over HTTP."""

from __future__ import annotations

import asyncio
import colorsys
import re
import uuid
from dataclasses import dataclass

import httpx
import pytest
from playwright.async_api import Page, TimeoutError as PlaywrightTimeout
from sqlalchemy import delete, insert

from genesis.db.models import WorldSnapshot
from genesis.db.session import get_engine
from genesis.effects import WorldSample
from tests import agents, traits
from tests.pipeline_steps import wait_for_status
from tests.viewer_pages import viewer, wait_js

# The integer columns of a world_snapshots row a test fills with zeros.
SNAPSHOT_INT_COLUMNS = (
    "births_last_period",
    "deaths_last_period",
    "death_starvation",
    "death_age",
    "death_collision",
    "resource_count",
    "trait_diversity",
    "tick_overruns",
)


# Sum of the RGB of every pixel of a canvas: changes when anything drawn on it changes.
CANVAS_CHECKSUM = """(id) => {
  const c = document.getElementById(id);
  const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  let sum = 0;
  for (let i = 0; i < d.length; i += 4) sum += d[i] * 3 + d[i + 1] * 5 + d[i + 2] * 7;
  return sum;
}"""

# How many pixels of a canvas are close to an RGB colour.
PIXELS_OF_COLOUR = """([id, r, g, b]) => {
  const c = document.getElementById(id);
  const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  let n = 0;
  for (let i = 0; i < d.length; i += 4)
    if (Math.abs(d[i] - r) < 30 && Math.abs(d[i + 1] - g) < 30 && Math.abs(d[i + 2] - b) < 30) n++;
  return n;
}"""


@pytest.fixture
async def page(browser, api_url):
    async with viewer(browser, api_url) as page:
        yield page


async def wait_text(page: Page, element_id: str, text: str, timeout_s: float = 20) -> None:
    """Wait until the element's text contains ``text``; a timeout says what it showed instead."""
    try:
        await wait_js(page, f"document.getElementById({element_id!r}).textContent.includes({text!r})", timeout_s)
    except PlaywrightTimeout:
        shown = await page.locator(f"#{element_id}").text_content()
        raise AssertionError(f"#{element_id} never showed {text!r}; it shows {shown!r}") from None


async def test_the_legend_counts_every_carried_trait_and_shows_its_carriers(page):
    """Every carried trait is counted and can be shown, not only each lineage's oldest: a frame
    (the engine's form) where "forager" is every Molbot's newest trait and "saver" an older one."""
    await wait_js(page, "window.genesisViewer && window.genesisViewer.world")
    await page.evaluate(
        """() => {
          const world = window.genesisViewer.world;
          const frame = {tick: 1, traits: ["saver", "forager"], resources: [[5, 5]], entities: [
            [1, 10, 10, 50, "forager", [0, 1]], [2, 20, 20, 50, "forager", [0, 1]], [3, 30, 30, 50, "forager", [1]],
            [4, 40, 40, 50, null, []]]};
          Object.defineProperty(world, "frame", {get: () => frame, set: () => {}});  // live frames wait
          world.framesDrawn = 0; world.draw();
        }"""
    )
    saver = page.locator('#legend li[data-trait="saver"] button')
    assert await saver.text_content() == "saver 2 carriers"
    assert await page.locator('#legend li[data-trait="forager"]').text_content() == "forager 3 carriers (most carried)"
    assert await page.locator("#legend li", has_text="no trait 1").count() == 1
    await page.evaluate("() => { const w = window.genesisViewer.world; w.show('saver'); w.draw(); }")
    assert (await saver.text_content()).endswith("— shown") and await saver.get_attribute("aria-pressed") == "true"


async def test_world_canvas_and_chart_follow_the_engine(page, engine_proc, http):
    assert await page.title() == "Genesis — world viewer"
    await wait_js(page, "window.genesisViewer && window.genesisViewer.world.framesDrawn > 0")
    assert await page.locator("#world-link").text_content() == "world: live"

    first = await page.evaluate(CANVAS_CHECKSUM, "world")
    first_tick = await page.evaluate("window.genesisViewer.world.frame.tick")
    await wait_js(page, f"window.genesisViewer.world.frame.tick > {first_tick} + 10")
    await page.wait_for_timeout(100)  # the next animation frame draws it
    assert await page.evaluate(CANVAS_CHECKSUM, "world") != first, "the world canvas did not change"

    # Entities and resources are on the canvas: resources in green, the frame's entity count legend.
    frame = await page.evaluate("window.genesisViewer.world.frame")
    assert frame["entities"] and frame["resources"]
    assert await page.evaluate(PIXELS_OF_COLOUR, ["world", 0x3F, 0xAE, 0x5A]) > 0
    assert await page.locator("#legend li", has_text="resources").count() == 1
    assert await page.locator("#legend li").count() >= 2  # and at least one trait (or "no trait")

    # The chart: both lines drawn once a few samples are in.
    await wait_js(page, "window.genesisViewer.chart.samples.length >= 3")
    await page.wait_for_timeout(50)
    assert await page.evaluate(PIXELS_OF_COLOUR, ["chart", 0x6C, 0xB6, 0xFF]) > 20, "no population line"
    assert await page.evaluate(PIXELS_OF_COLOUR, ["chart", 0xE5, 0xB4, 0x54]) > 20, "no energy line"
    samples = await page.evaluate("window.genesisViewer.chart.samples")
    assert [s["tick"] for s in samples] == sorted(s["tick"] for s in samples)
    assert all(s["population"] > 0 for s in samples)

    # The header reads the engine's numbers; the Temporal UI link comes from the config endpoint.
    await wait_js(page, "document.getElementById('stats').textContent.includes('ticks/s')")
    config = (await http.get("/api/viewer/config")).json()
    assert await page.locator("#temporal-ui").get_attribute("href") == (
        f"{config['temporal_ui_url']}/namespaces/{config['temporal_namespace']}/workflows"
    )
    assert page.errors == []


async def test_a_proposal_made_in_the_form_is_listed_with_its_workflow(page, http, settings):
    # Register an agent in the page: its key is kept in localStorage.
    name = f"viewer-{uuid.uuid4().hex[:6]}"
    await page.fill("#register-name", name)
    await page.click("#register-form button")
    await wait_js(page, "document.getElementById('agent-state').textContent.startsWith('Proposing as')")
    key = await page.evaluate("localStorage.getItem('genesis.apiKey')")
    me = (await http.get("/v1/agents/me", headers={"X-API-Key": key})).json()
    assert me["name"] == name and me["agent_id"] in await page.locator("#agent-state").text_content()

    trait_name = f"viewer_saver_{uuid.uuid4().hex[:6]}"
    code = (
        "class BaseTrait:\n    pass\n\nclass ViewerSaver(BaseTrait):\n    async def execute(self, entity) -> None:\n"
        f"        if entity.energy < {uuid.uuid4().int % 10**6 / 10**4:.4f}:\n"
        "            entity.energy_consumption_rate *= 0.9\n"
    )
    await page.fill("#trait-name", trait_name)
    await page.fill("#goal", "proposed in the world viewer")
    await page.fill("#code", code)
    await page.click("#propose-form button[type=submit]")

    row = page.locator("#mutations li", has_text=trait_name)
    await row.wait_for(timeout=15_000)
    mutation_id = await row.get_attribute("data-mutation-id")
    status = (await http.get(f"/api/mutations/{mutation_id}/status")).json()
    assert status["agent_id"] == me["agent_id"] and status["trait_name"] == trait_name
    link = row.locator("a.workflow")
    assert await link.get_attribute("href") == (
        f"{settings.temporal.ui_url}/namespaces/{settings.temporal.namespace}/workflows/mutation-{mutation_id}"
    )

    # The form follows the proposal past validation and the sandbox test; so does the list.
    await wait_for_status(http, mutation_id, {"sandbox_ok", "activated", "kept", "rolled_back"})
    result = page.locator("#propose-result")
    await wait_js(
        page, "/: (sandbox_ok|activated|kept|rolled_back)/.test(document.getElementById('propose-result').textContent)"
    )
    assert "Sandbox: OK" in await result.text_content()
    await wait_js(
        page,
        f"""/^(sandbox_ok|activated|kept|rolled_back)$/.test(
        document.querySelector('#mutations li[data-mutation-id="{mutation_id}"] .status')?.textContent)""",
    )
    # Unfolding the row shows the validation log.
    await page.locator("#mutations li", has_text=trait_name).locator(".head").click()
    await (
        page.locator("#mutations li", has_text=trait_name)
        .locator(".log li", has_text="AST parse: OK")
        .wait_for(timeout=5_000)
    )

    # "only mine" lists this agent's mutations only.
    await page.check("#mine-filter")
    await wait_js(
        page,
        f"""[...document.querySelectorAll('#mutations li[data-mutation-id]')].length > 0 &&
        [...document.querySelectorAll('#mutations .head .note')]
          .every(n => n.textContent.startsWith('{me["agent_id"]} '))""",
    )
    assert page.errors == []
    # Leave the world as it was for the rest of the suite.
    rollback = await http.post(
        f"/api/mutations/{mutation_id}/rollback", json={"reason": "viewer test done"}, headers={"X-API-Key": key}
    )
    assert rollback.status_code in (200, 202), rollback.text


async def test_the_form_shows_api_errors_readably(page, http):
    agent = await agents.register(http, "viewer-errors")
    await page.fill("#key-input", agent.api_key)
    await page.click("#key-form button")
    await wait_js(page, f"document.getElementById('agent-state').textContent.includes('{agent.agent_id}')")
    assert await page.locator("#agent-message").text_content() == f"using the key of {agent.agent_id}"

    # A 422: the status code, the error code and the field that was wrong.
    await page.fill("#trait-name", "Not-Snake")
    await page.click("#propose-form button[type=submit]")
    result = page.locator("#propose-result")
    await wait_js(page, "document.getElementById('propose-result').textContent.includes('422')")
    text = await result.text_content()
    assert "422 VALIDATION_ERROR" in text and "trait_name:" in text
    assert "error" in (await result.get_attribute("class"))

    # A rejection by the pipeline: the failure code and the validation log line that failed.
    await page.fill("#trait-name", f"viewer_bad_{uuid.uuid4().hex[:6]}")
    await page.fill(
        "#code", "import os\n\nclass Bad:\n    async def execute(self, entity) -> None:\n        os.getcwd()\n"
    )
    await page.click("#propose-form button[type=submit]")
    await wait_js(page, "document.getElementById('propose-result').textContent.includes('AST_IMPORT_FORBIDDEN')")
    failed = result.locator("li.failed")
    assert "Forbidden import: os" in await failed.first.text_content()

    # An unknown key: 401 and the key is forgotten.
    await page.fill("#key-input", "gen_" + "0" * 40)
    await page.click("#key-form button")
    await wait_js(page, "document.getElementById('agent-message').textContent.includes('401')")
    assert await page.evaluate("localStorage.getItem('genesis.apiKey')") is None
    assert "INVALID_API_KEY" in await page.locator("#agent-message").text_content()

    # The feed panel: the messages of GET /api/feed, or a quiet note on an API without it.
    feed = await http.get("/api/feed", params={"limit": 50})
    if feed.status_code == 404:
        await wait_js(page, "document.getElementById('feed-note').textContent.includes('unavailable')")
    else:
        assert feed.status_code == 200, feed.text
        for message in feed.json()["messages"]:
            await page.locator(f"#feed li[data-feed-id='{message['id']}']").wait_for(timeout=5_000)
    assert page.errors == []


async def test_open_mode_proposes_without_a_key(browser, start_api, http):
    """With GENESIS_AUTH=open the page proposes keyless, as agent world-viewer."""
    url = await start_api("viewer-open", auth="open")
    async with viewer(browser, url) as page:
        await wait_js(page, "document.getElementById('agent-state').textContent.includes('GENESIS_AUTH=open')")
        trait_name = f"viewer_open_{uuid.uuid4().hex[:6]}"
        await page.fill("#trait-name", trait_name)
        await page.fill(
            "#code", "import socket\n\nclass Open:\n    async def execute(self, entity) -> None:\n        pass\n"
        )
        await page.click("#propose-form button[type=submit]")
        await wait_js(page, "document.getElementById('propose-result').textContent.includes('AST_IMPORT_FORBIDDEN')")
        row = page.locator("#mutations li", has_text=trait_name)
        await row.wait_for(timeout=10_000)
        assert (await row.locator(".head .note").text_content()).startswith("world-viewer ")
        assert page.errors == []


async def test_the_lineage_panel_shows_a_parent_above_its_child(page, http, start_api, temporal_client):
    """The Lineage panel, opened from the trait list: v1 (kept, fitness positive) above v2, which
    replaced it and is still observed, a line from one to the other; a mutation row opens it too.
    The versions come from an API with an endless observation window, so only this test's own
    reports (retried past the engine's) give v1 its verdict."""
    endless = await start_api("viewer-lineage", observation_window_ticks=1_000_000_000)
    agent = await agents.register(http, "viewer-lineage")
    name = f"viewer_lineage_{uuid.uuid4().hex[:6]}"
    async with httpx.AsyncClient(base_url=endless, timeout=30) as client:
        parent = await go_live(client, agent, name)
        await keep(http, temporal_client, parent)
        child = await go_live(client, agent, name, replaces={"trait_name": name, "version": 1})
    try:
        row = page.locator(f'#traits li[data-trait-name="{name}"]')
        await wait_js(  # the list refreshes every 5 s: it may show v1 first
            page,
            f"""document.querySelector('#traits li[data-trait-name="{name}"]')?.textContent.includes('{name} v2')""",
        )
        await row.locator("button.lineage-open").click()

        tree = page.locator("#lineage-tree")
        parent_card = tree.locator(f'.lineage-node[data-mutation-id="{parent}"]')
        child_card = tree.locator(f'.lineage-node[data-mutation-id="{child}"]')
        await parent_card.wait_for(timeout=10_000)
        assert await page.locator("#lineage-title").text_content() == name
        parent_text, child_text = await parent_card.text_content(), await child_card.text_content()
        assert f"{name} v1" in parent_text and "superseded" in parent_text and "fitness positive" in parent_text
        assert f"{name} v2" in child_text and "active" in child_text and "observing" in child_text
        assert "agent" in child_text
        above, below = await parent_card.bounding_box(), await child_card.bounding_box()
        assert above["y"] + above["height"] <= below["y"], (above, below)
        edge = tree.locator(f'path[data-parent="{parent}"][data-child="{child}"]')
        assert await edge.count() == 1 and await tree.locator("path").count() == 1
        assert (await edge.get_attribute("d")).startswith("M")

        # The mutation row of v2 names its parent and opens the same tree.
        await page.fill("#lineage-name", "")
        await page.evaluate("window.genesisViewer.lineage.tree.replaceChildren()")
        mutation_row = page.locator(f'#mutations li[data-mutation-id="{child}"]')
        await mutation_row.locator(".head").click()
        lineage_line = mutation_row.locator("p.lineage")
        await lineage_line.wait_for(timeout=5_000)
        assert f"from {name} v1" in await lineage_line.text_content()
        await lineage_line.locator("button").click()
        await child_card.wait_for(timeout=10_000)
        assert page.errors == []
    finally:  # leave no live trait behind: v2 first (v1 comes back), then v1
        for mutation_id in (child, parent):
            response = await http.post(
                f"/api/mutations/{mutation_id}/rollback", json={"reason": "viewer test done"}, headers=agent.headers
            )
            assert response.status_code in (200, 202), response.text


async def go_live(client, agent, name: str, replaces: dict | None = None) -> str:
    body = {"trait_name": name, "goal": "lineage in the viewer", "code": traits.unique_seeker()}
    if replaces:
        body["replaces"] = replaces
    response = await client.post("/api/mutations/propose", json=body, headers=agent.headers)
    assert response.status_code == 202, response.text
    mutation_id = response.json()["mutation_id"]
    status = await wait_for_status(client, mutation_id, {"activated", "rejected", "failed"}, 90)
    assert status["status"] == "activated", status
    return mutation_id


async def keep(http, temporal_client, mutation_id: str) -> None:
    """Close the observation window with a world that did well; a report of a running engine in
    between starts the window over (another run), so the pair is sent again until it lands."""
    handle = temporal_client.get_workflow_handle(f"mutation-{mutation_id}")
    trait = (await http.get(f"/api/mutations/{mutation_id}/status")).json()["trait_name"]
    carried = {trait: {"carriers": 20, "avg_energy": 55.0, "births": 0, "deaths": {}}}  # enough for a verdict
    first = WorldSample(
        tick=0, run_id="viewer-lineage", entity_count=100, avg_energy=50.0, period_starvation=5, trait_stats=carried
    )
    last = first.model_copy(update={"tick": 2_000_000_000, "entity_count": 110, "avg_energy": 55.0})
    for _ in range(20):
        await handle.signal("world_snapshot", first)
        await handle.signal("world_snapshot", last)
        try:
            await wait_for_status(http, mutation_id, {"kept"}, timeout_s=2)
            return
        except AssertionError:
            continue
    raise AssertionError(f"{mutation_id} was never kept")


async def test_mutation_list_endpoint(http):
    """GET /api/mutations: newest first, filtered by status and agent, every parameter validated."""
    lister = await agents.register(http, "viewer-lister")
    ids = []
    for i in range(3):
        body = {
            "trait_name": f"viewer_list_{uuid.uuid4().hex[:6]}",
            "goal": "list",
            "code": f"import os\nclass L{i}:\n    async def execute(self, entity) -> None:\n        pass\n",
        }
        response = await http.post("/api/mutations/propose", json=body, headers=lister.headers)
        assert response.status_code == 202, response.text
        ids.append(response.json()["mutation_id"])
        await asyncio.sleep(0.01)  # distinct created_at
    for mutation_id in ids:
        await wait_for_status(http, mutation_id, {"rejected"})

    mine = (await http.get("/api/mutations", params={"agent_id": lister.agent_id})).json()["mutations"]
    assert [m["mutation_id"] for m in mine] == ids[::-1]
    one = (await http.get(f"/api/mutations/{ids[0]}/status")).json()
    assert mine[-1] == one  # exactly the status shape, workflow_id included
    assert one["workflow_id"] == f"mutation-{ids[0]}"

    limited = (await http.get("/api/mutations", params={"agent_id": lister.agent_id, "limit": 2})).json()["mutations"]
    assert [m["mutation_id"] for m in limited] == ids[:0:-1]
    rejected = (await http.get("/api/mutations", params={"agent_id": lister.agent_id, "status": "rejected"})).json()
    assert len(rejected["mutations"]) == 3
    kept = (await http.get("/api/mutations", params={"agent_id": lister.agent_id, "status": "kept"})).json()
    assert kept == {"mutations": [], "next_cursor": None}
    everyone = (await http.get("/api/mutations", params={"status": "rejected", "limit": 200})).json()["mutations"]
    assert all(m["status"] == "rejected" for m in everyone) and set(ids) <= {m["mutation_id"] for m in everyone}
    created = [m["created_at"] for m in everyone]
    assert created == sorted(created, reverse=True)

    for params, field in (
        ({"status": "bogus"}, "status"),
        ({"limit": 0}, "limit"),
        ({"limit": 201}, "limit"),
        ({"agent_id": "bad id!"}, "agent_id"),
    ):
        response = await http.get("/api/mutations", params=params)
        assert response.status_code == 422, (params, response.text)
        body = response.json()
        assert body["error"] == "VALIDATION_ERROR" and [e["field"] for e in body["errors"]] == [f"query.{field}"]


def trait_rgb(name: str) -> tuple[int, int, int]:
    """The colour the viewer gives a trait (world.js traitColour: a hue from the name's hash,
    saturation 75 %, lightness 60 %) in RGB."""
    h = 0
    for ch in name:
        h = (h * 31 + ord(ch)) & 0xFFFFFFFF
    r, g, b = colorsys.hls_to_rgb((h % 360) / 360, 0.6, 0.75)
    return round(r * 255), round(g * 255), round(b * 255)


def names_of_distinct_colours(prefix: str, n: int) -> list[str]:
    """``n`` fresh trait names whose colours are far apart (so each line can be told by colour)."""
    names: list[str] = []
    while len(names) < n:
        name = f"{prefix}_{uuid.uuid4().hex[:6]}"
        rgb = trait_rgb(name)
        if all(sum(abs(a - b) for a, b in zip(rgb, trait_rgb(other), strict=True)) > 200 for other in names):
            names.append(name)
    return names


@dataclass(frozen=True)
class CarriedTraits:
    names: list[str]
    mutation_ids: list[str]
    agent: agents.TestAgent


@pytest.fixture(scope="module")
async def carried_traits(api_url, start_api, engine_proc, temporal_client):
    """Two traits live in the running world and carried by Molbots in its stored history: made
    through an API whose observation window never closes (so they stay live), the first then kept
    with a positive verdict. Both are rolled back at the end of the module."""
    endless = await start_api("viewer-carried", observation_window_ticks=1_000_000_000)
    async with httpx.AsyncClient(base_url=api_url, timeout=30) as http:
        agent = await agents.register(http, "viewer-carried")
        names = names_of_distinct_colours("viewer_carried", 2)
        async with httpx.AsyncClient(base_url=endless, timeout=30) as client:
            ids = [await go_live(client, agent, name) for name in names]
        try:
            await keep(http, temporal_client, ids[0])

            async def both_carried() -> bool:
                points = (await http.get("/api/world/history", params={"limit": 200})).json()["points"]
                return len(points) >= 2 and all(any(p["trait_usage"].get(n, 0) > 0 for p in points) for n in names)

            await wait_until(both_carried, 90, "Molbots carrying both traits in the history")
            yield CarriedTraits(names, ids, agent)
        finally:
            for mutation_id in ids:
                response = await http.post(
                    f"/api/mutations/{mutation_id}/rollback", json={"reason": "viewer test done"}, headers=agent.headers
                )
                assert response.status_code in (200, 202), response.text


async def wait_until(predicate, timeout_s: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.5)


# In the page: a Molbot carrying one of `names` with no other Molbot near it on the canvas, and
# the page coordinates of its centre (through the canvas' displayed box), or null.
ISOLATED_CARRIER = """([carriers]) => {
  const v = window.genesisViewer, canvas = document.getElementById("world");
  const box = canvas.getBoundingClientRect();
  const sx = canvas.width / v.world.world.width, sy = canvas.height / v.world.world.height;
  const ents = v.world.frame.entities.map(([id, x, y]) => ({ id, x: x * sx, y: y * sy }));
  for (const e of ents) {
    const inside = e.x > 10 && e.y > 10 && e.x < canvas.width - 10 && e.y < canvas.height - 10;
    if (!carriers.includes(e.id) || !inside) continue;
    if (ents.some((o) => o.id !== e.id && (o.x - e.x) ** 2 + (o.y - e.y) ** 2 < 20 ** 2)) continue;
    return { id: e.id, x: box.left + e.x * box.width / canvas.width, y: box.top + e.y * box.height / canvas.height };
  }
  return null;
}"""


async def test_clicking_a_molbot_opens_its_inspector(browser, api_url, http, carried_traits):
    """On a small screen with devicePixelRatio 2 (the canvas shown smaller than its pixels), a
    click on a Molbot opens the inspector: its energy, age, generation and traits, each trait with
    its version, verdict, observed effects and (folded) code."""
    kept_name = carried_traits.names[0]
    async with viewer(browser, api_url, width=700, height=900, scale=2) as page:
        await wait_js(page, "window.genesisViewer && window.genesisViewer.world.framesDrawn > 0")
        assert await page.evaluate("devicePixelRatio") == 2
        shown = await page.evaluate("document.getElementById('world').getBoundingClientRect().width")
        assert shown < 800 - 50, shown  # drawn on 800 pixels, shown on fewer

        target = None
        carriers: list[int] = []
        # carriers come and go (a newborn gains one of many live traits by chance), and a crowd
        # hides them from a click: keep looking for up to 90 s
        for _ in range(360):
            entities = (await http.get("/api/world/entities", params={"limit": 500})).json()["entities"]
            carriers = [e["id"] for e in entities if kept_name in e["traits"]]
            target = await page.evaluate(ISOLATED_CARRIER, [carriers])
            if target:
                await page.mouse.click(target["x"], target["y"])
                opened = await page.evaluate("window.genesisViewer.inspector.id")
                if opened == target["id"]:
                    break
            await page.wait_for_timeout(250)
        else:
            raise AssertionError(
                f"no click opened the inspector on an isolated carrier of {kept_name} "
                f"(last: {target}; {len(carriers)} carriers alive at the end)"
            )
        molbot = target["id"]
        assert await page.locator("#inspector").is_visible()
        assert await page.locator("#inspector-title").text_content() == f"#{molbot}"

        # The facts, as the engine published them.
        trait_row = page.locator(f'#inspector-traits li[data-trait-name="{kept_name}"]')
        await trait_row.wait_for(timeout=10_000)
        published = (await http.get(f"/api/world/entities/{molbot}")).json()["entity"]
        facts = {
            name: await page.locator(f'#inspector-facts dd[data-fact="{name}"]').text_content()
            for name in ("energy", "age", "generation", "state")
        }
        assert facts["generation"] == str(published["generation"]), facts
        assert re.fullmatch(r"\d+ ticks \(at tick \d+\)", facts["age"]), facts
        assert re.fullmatch(rf"\d+\.\d / {published['max_energy']:g}", facts["energy"]), facts
        assert facts["state"].startswith("alive at tick") or "died" in facts["state"], facts
        listed = await page.locator("#inspector-traits > li").evaluate_all(
            "(lis) => lis.map((li) => li.dataset.traitName)"
        )
        assert kept_name in listed and set(listed) <= set(published["traits"]) | {kept_name}, (listed, published)

        # The kept trait: v1, active, its positive verdict and the effects that decided it.
        head = await trait_row.locator(".head").text_content()
        assert f"{kept_name}" in head and "v1" in head and "active" in head and "fitness positive" in head, head
        effects = (await http.get(f"/api/mutations/{carried_traits.mutation_ids[0]}/effects")).json()["effects"]
        shown_delta = await trait_row.locator('dd[data-effect="fitness_delta"]').text_content()
        assert float(shown_delta) == pytest.approx(effects["fitness_delta"]), shown_delta
        assert carried_traits.mutation_ids[0] in await trait_row.text_content()

        # Its code, folded until asked for.
        code = trait_row.locator("details.code pre")
        assert not await code.is_visible()
        await trait_row.locator("details.code summary").click()
        assert "class SeekerTrait" in await code.text_content() and await code.is_visible()
        live = (await http.get(f"/api/traits/{kept_name}")).json()["live"]
        assert await code.text_content() == live["code"]

        # The trait's name opens its versions and verdicts.
        await trait_row.locator("button.trait-open").click()
        await page.locator(
            f'#lineage-tree .lineage-node[data-mutation-id="{carried_traits.mutation_ids[0]}"]'
        ).wait_for(timeout=10_000)
        assert await page.locator("#lineage-title").text_content() == kept_name

        await page.click("#inspector-close")
        assert not await page.locator("#inspector").is_visible()
        assert page.errors == []


async def test_the_charts_draw_the_stored_history_on_labelled_axes(page, http, carried_traits):
    """Both charts start from GET /api/world/history (ticks before the page was opened), have
    labelled axes, and the per-trait chart draws a line for each carried trait."""
    opened_at = (await http.get("/api/world/state")).json()["tick"]
    await wait_js(
        page, "window.genesisViewer.traitChart.axes !== null && window.genesisViewer.traitChart.series.length >= 2"
    )
    # The chart draws the most carried traits; the session's world may hold others that outnumber
    # this module's carriers (traits other modules left live): check this module's where drawn.
    series = await page.evaluate("window.genesisViewer.traitChart.series")
    names = ([n for n in carried_traits.names if n in series] + [n for n in series if n not in carried_traits.names])[
        :2
    ]
    points = await page.evaluate("window.genesisViewer.history.points")
    assert len(points) >= 2 and points[0]["tick"] < opened_at, (points[:2], opened_at)
    assert [p["tick"] for p in points] == sorted({p["tick"] for p in points})

    trait_axes = await page.evaluate("window.genesisViewer.traitChart.axes")
    assert trait_axes["titles"] == ["tick", "carriers"]
    assert len(trait_axes["labels"]["x"]) >= 2 and len(trait_axes["labels"]["left"]) >= 2, trait_axes
    await page.wait_for_timeout(50)
    for name in names:
        r, g, b = trait_rgb(name)
        assert await page.evaluate(PIXELS_OF_COLOUR, ["trait-chart", r, g, b]) > 20, f"no line of {name}"
        entry = page.locator(f'#trait-chart-legend li[data-trait-name="{name}"]')
        assert await entry.count() == 1

    # The population chart: the same history first, then the live frames; axes on both sides.
    await wait_js(page, "window.genesisViewer.chart.axes !== null")
    samples = await page.evaluate("window.genesisViewer.chart.samples")
    assert samples[0]["tick"] == points[0]["tick"] and samples[0]["population"] == points[0]["entity_count"]
    chart_axes = await page.evaluate("window.genesisViewer.chart.axes")
    assert chart_axes["titles"] == ["tick", "population", "avg energy"]
    assert all(len(chart_axes["labels"][side]) >= 2 for side in ("x", "left", "right")), chart_axes

    # A legend entry opens the trait's panel.
    await page.locator(f'#trait-chart-legend li[data-trait-name="{names[1]}"] button').click()
    await wait_js(page, f"document.getElementById('lineage-title').textContent === {names[1]!r}")
    assert page.errors == []


async def test_a_mutation_rows_trait_name_opens_the_trait_panel(page, carried_traits):
    kept = carried_traits.mutation_ids[0]
    await page.select_option("#status-filter", "kept")
    row = page.locator(f'#mutations li[data-mutation-id="{kept}"]')
    await row.wait_for(timeout=10_000)
    await row.locator("button.trait-link").click()
    card = page.locator(f'#lineage-tree .lineage-node[data-mutation-id="{kept}"]')
    await card.wait_for(timeout=10_000)
    assert await page.locator("#lineage-title").text_content() == carried_traits.names[0]
    assert "fitness positive" in await card.text_content() and "v1" in await card.text_content()
    assert await row.locator(".log").count() == 0  # the link does not unfold the row
    assert page.errors == []


async def test_your_agent_tally_counts_a_kept_proposal(browser, start_api, http, temporal_client):
    """The tally under "Your agent" follows the agent's proposals to their verdicts."""
    endless = await start_api("viewer-tally", observation_window_ticks=1_000_000_000)
    async with viewer(browser, endless) as page:
        await wait_js(page, "window.genesisViewer !== undefined")  # the forms are wired
        await page.fill("#register-name", f"viewer-tally-{uuid.uuid4().hex[:6]}")
        await page.click("#register-form button")
        await wait_text(page, "agent-state", "proposed 0, kept 0")
        key = await page.evaluate("localStorage.getItem('genesis.apiKey')")

        await page.fill("#trait-name", f"viewer_tally_{uuid.uuid4().hex[:6]}")
        await page.fill("#code", traits.unique_seeker())
        await page.click("#propose-form button[type=submit]")
        await wait_text(page, "agent-state", "proposed 1, kept 0")
        me = (await http.get("/v1/agents/me", headers={"X-API-Key": key})).json()
        [mine] = (await http.get("/api/mutations", params={"agent_id": me["agent_id"]})).json()["mutations"]
        mutation_id = mine["mutation_id"]
        status = await wait_for_status(http, mutation_id, {"activated", "rejected", "failed"}, 90)
        assert status["status"] == "activated", status
        try:
            await keep(http, temporal_client, mutation_id)
            await wait_text(page, "agent-state", "proposed 1, kept 1")
            assert page.errors == []
        finally:
            response = await http.post(
                f"/api/mutations/{mutation_id}/rollback",
                json={"reason": "viewer test done"},
                headers={"X-API-Key": key},
            )
            assert response.status_code in (200, 202), response.text


async def test_world_history_and_entity_endpoints(http, settings, engine_proc):
    """GET /api/world/history: the running engine's snapshots from Redis, a past run's from
    Postgres, paged by tick and limit; GET /api/world/entities/{id}: one published entity."""
    state = (await http.get("/api/world/state")).json()
    await asyncio.sleep(1)
    live = (await http.get("/api/world/history")).json()
    assert live["run_id"] == state["run_id"] and len(live["points"]) >= 2
    ticks = [p["tick"] for p in live["points"]]
    assert ticks == sorted(set(ticks)) and all(t % settings.engine.snapshot_interval == 0 for t in ticks)
    assert set(live["points"][0]) == {"tick", "timestamp", "entity_count", "avg_energy", "trait_usage"}
    newest_two = (await http.get("/api/world/history", params={"limit": 2, "to_tick": ticks[-1]})).json()
    assert [p["tick"] for p in newest_two["points"]] == ticks[-2:] and newest_two["truncated"] is True
    older = (await http.get("/api/world/history", params={"to_tick": ticks[-2] - 1, "from_tick": ticks[0]})).json()
    assert [p["tick"] for p in older["points"]] == ticks[:-2] and older["truncated"] is False

    # A past run lives in Postgres only (every GENESIS_ENGINE_POSTGRES_EVERY-th snapshot).
    run_id = f"viewerpast{uuid.uuid4().hex[:8]}"
    engine = get_engine(settings.database_url)
    try:
        async with engine.begin() as conn:
            for i, tick in enumerate((0, 9000, 18000)):
                snap = {"tick": tick, "trait_usage": {"past_trait": 10 + i}}
                await conn.execute(
                    insert(WorldSnapshot).values(
                        **{column: 0 for column in SNAPSHOT_INT_COLUMNS},
                        run_id=run_id,
                        tick=tick,
                        timestamp=1_700_000_000.0 + i,
                        entity_count=100 + i,
                        avg_energy=50.0 + i,
                        resource_density=0.5,
                        temperature=20.0,
                        ticks_per_second=60.0,
                        state_hash="0" * 64,
                        data=snap,
                    )
                )
        past = (await http.get("/api/world/history", params={"run_id": run_id})).json()
        assert past == {
            "run_id": run_id,
            "points": [
                {
                    "tick": t,
                    "timestamp": 1_700_000_000.0 + i,
                    "entity_count": 100 + i,
                    "avg_energy": 50.0 + i,
                    "trait_usage": {"past_trait": 10 + i},
                }
                for i, t in enumerate((0, 9000, 18000))
            ],
            "truncated": False,
        }
        paged = (await http.get("/api/world/history", params={"run_id": run_id, "limit": 1, "to_tick": 17999})).json()
        assert [p["tick"] for p in paged["points"]] == [9000] and paged["truncated"] is True
        ranged = (
            await http.get("/api/world/history", params={"run_id": run_id, "from_tick": 1, "to_tick": 9000})
        ).json()
        assert [p["tick"] for p in ranged["points"]] == [9000] and ranged["truncated"] is False
    finally:
        async with engine.begin() as conn:
            await conn.execute(delete(WorldSnapshot).where(WorldSnapshot.run_id == run_id))
        await engine.dispose()
    unknown = (await http.get("/api/world/history", params={"run_id": "nosuchrun"})).json()
    assert unknown == {"run_id": "nosuchrun", "points": [], "truncated": False}

    for params, field in (
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"from_tick": -1}, "from_tick"),
        ({"from_tick": 10, "to_tick": 9}, "from_tick"),
        ({"run_id": "bad id!"}, "run_id"),
        ({"to_tick": "soon"}, "to_tick"),
    ):
        response = await http.get("/api/world/history", params=params)
        assert response.status_code == 422, (params, response.text)
        body = response.json()
        assert body["error"] == "VALIDATION_ERROR" and [e["field"] for e in body["errors"]] == [f"query.{field}"], body

    # One entity, as the engine published it.
    [first] = (await http.get("/api/world/entities", params={"limit": 1})).json()["entities"]
    one = await http.get(f"/api/world/entities/{first['id']}")
    assert one.status_code == 200, one.text
    entity = one.json()["entity"]
    assert entity["id"] == first["id"] and {"age", "generation", "traits", "energy", "max_energy"} <= set(entity)
    missing = await http.get(f"/api/world/entities/{2**53}")
    assert missing.status_code == 404 and missing.json()["error"] == "ENTITY_NOT_FOUND", missing.text
    assert str(2**53) in missing.json()["detail"]
    for bad in ("-1", "abc", str(2**53 + 1)):
        response = await http.get(f"/api/world/entities/{bad}")
        assert response.status_code == 422, (bad, response.text)
        assert [e["field"] for e in response.json()["errors"]] == ["path.entity_id"], response.text


async def test_the_rules_panel_shows_proposals_and_their_shadow_reports(page, settings, tmp_path):
    """A proposal awaiting approval, with a real shadow report (of a journaled run), is listed with
    its status; opening it shows its ops and baseline and candidate side by side."""
    from engine.core.shadow import report_hash, shadow
    from governance import lifecycle, manifest as rules
    from governance.records import manifests, proposals
    from tests.journal_worlds import journal_settings, run_journaled

    await run_journaled(journal_settings(tmp_path, 12, journal_snapshot_interval=100), 300)
    report = await asyncio.to_thread(shadow, tmp_path, 150, {}, {"resource_energy": 44.0})
    database = get_engine(settings.database_url)
    async with database.begin() as conn:
        now = await manifests.current(conn, settings)
        document = rules.normalized({**now.document, "params": {"resource_energy": 44.0}})
        pid = await proposals.create(
            conn,
            author="viewer-test",
            author_role="operator",
            reason=f"richer food {uuid.uuid4().hex[:6]}",
            base_version=now.version,
            base_hash=now.hash,
            ops=[{"op": "add", "path": "/params/resource_energy", "value": 44.0}],
            document=document,
            candidate_hash=rules.manifest_hash(document),
            expires_at=now_plus_a_day(),
        )
        await proposals.move(conn, pid, lifecycle.SHADOWING)
        await proposals.move(conn, pid, lifecycle.AWAITING_APPROVAL, report=report, report_hash=report_hash(report))
    try:
        row = page.locator(f'#proposals li[data-proposal-id="{pid}"]')
        await row.wait_for(timeout=20_000)
        assert "awaiting approval" in await row.text_content()
        await wait_text(page, "manifest-version", f"rules v{now.version}")
        await row.get_by_role("button", name="show").click()
        await row.locator("table.shadow").wait_for(timeout=10_000)
        table = await row.locator("table.shadow").inner_text()
        assert "baseline" in table and "candidate" in table and str(report["candidate"]["population_end"]) in table
        assert "add /params/resource_energy = 44" in await row.text_content()
        assert report_hash(report) in await row.text_content()
        assert page.errors == []
    finally:
        async with database.begin() as conn:
            await proposals.move(conn, pid, lifecycle.EXPIRED)


def now_plus_a_day():
    from datetime import UTC, datetime, timedelta

    return datetime.now(UTC) + timedelta(days=1)


async def test_a_held_mutation_shows_its_shadow_and_an_operator_approves_it_in_the_viewer(
    page, http, settings, tmp_path
):
    """With an agent's first trait held for an operator, the mutation's row unfolds its shadow
    report side by side; the decision box takes an operator's key and approves it for that report,
    and it goes live. (The suite's worker has no journal to fork a shadow from, so the record gets
    the report of a real shadow run of the same trait on a journaled world, as the worker of a
    world with a journal writes it.)"""
    import docker
    from sqlalchemy import update

    from activities.trait_shadow import run_trait_shadow
    from engine.core.shadow import report_hash
    from genesis.db.models import Mutation
    from genesis.dto import TraitShadowRequest
    from governance.records import manifests
    from tests.journal_worlds import journal_settings, run_journaled

    database = get_engine(settings.database_url)
    async with database.begin() as conn:
        before = await manifests.current(conn, settings)
        held = {**before.document, "approvals": {**before.document["approvals"], "first_traits": 1}}
        now = await manifests.record(conn, held, "test: viewer approvals", before.hash)
    try:
        eve = await agents.register(http, "viewer-eve")
        code = traits.unique_seeker()
        body = {"trait_name": "viewer_held", "goal": "an operator decides", "code": code}
        answer = await http.post("/api/mutations/propose", json=body, headers=eve.headers)
        assert answer.status_code == 202, answer.text
        mutation_id = answer.json()["mutation_id"]
        await wait_for_status(http, mutation_id, {"awaiting_approval"})
        await run_journaled(journal_settings(tmp_path, 12, journal_snapshot_interval=100), 200)
        shadow_request = TraitShadowRequest(
            mutation_id=mutation_id,
            agent_id=eve.agent_id,
            trait_name="viewer_held",
            class_name="SeekerTrait",
            code=code,
        )
        client = docker.from_env()
        try:
            report = await asyncio.to_thread(
                run_trait_shadow, shadow_request, journal_settings(tmp_path, 12), client, [], 80
            )
        finally:
            client.close()
        report["report_hash"] = report_hash(report)
        async with database.begin() as conn:
            await conn.execute(update(Mutation).where(Mutation.mutation_id == mutation_id).values(shadow_report=report))

        row = page.locator(f'#mutations li[data-mutation-id="{mutation_id}"]')
        await row.wait_for(timeout=20_000)
        await row.locator(".head").click()
        await row.locator("table.shadow").wait_for(timeout=10_000)
        table = await row.locator("table.shadow").inner_text()
        assert "baseline" in table and "its carriers" in table and str(report["candidate"]["population_end"]) in table
        assert report["report_hash"] in await row.text_content()
        await row.get_by_role("button", name="decide…").click()
        assert mutation_id in await page.locator("#approval-title").text_content()
        await page.locator("#approval-approve").click()  # no key yet: the box says what is missing
        await wait_text(page, "approval-message", "an operator key is needed")
        operator = await agents.operator_headers(settings)
        await page.locator("#approval-key").fill(operator["X-Operator-Key"])
        await page.locator("#approval-reason").fill("its shadow looks harmless")
        await page.locator("#approval-approve").click()
        await wait_text(page, "approval-message", "approve sent")
        live = await wait_for_status(http, mutation_id, {"activated", "kept"})
        assert any(line.startswith("Approval: approved by ") for line in live["validation_log"])
        assert page.errors == []
        await http.post(f"/api/mutations/{mutation_id}/rollback", json={"reason": "test over"}, headers=eve.headers)
        await wait_for_status(http, mutation_id, {"rolled_back"}, timeout_s=90)
    finally:
        async with database.begin() as conn:
            await manifests.record(conn, before.document, "test: restored", now.hash)
