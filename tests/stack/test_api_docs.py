"""The API's reference pages work on a machine without internet: ``/docs`` (Swagger UI) and
``/redoc`` (ReDoc) name no other host and load every script, style and icon from the API itself;
in a real headless Chromium whose every request to another origin is refused, the world viewer's
"API docs" link opens Swagger UI with every operation and the request examples, and ReDoc renders
too, with no script error and nothing blocked by the pages' Content-Security-Policy but ReDoc's
footer logo (an image on Redocly's host)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from playwright.async_api import BrowserContext

from api.mutations.schemas import EXAMPLE_PROPOSAL

EXTERNAL_URL = re.compile(r"(https?:)?//")
SWAGGER_SPEC_URL = re.compile(r"url: '([^']+)'")
PROPOSE_BLOCK = "#operations-mutations-propose_api_mutations_propose_post"
# The only thing a page tries to load from elsewhere, refused by its Content-Security-Policy.
REDOC_FOOTER_LOGO = "cdn.redoc.ly/redoc/logo-mini.svg"
CONTENT_TYPES = {".js": "text/javascript", ".css": "text/css", ".png": "image/png", ".json": "application/json"}


class PageLinks(HTMLParser):
    """The URLs a page loads (src, href, ReDoc's spec-url) and its links by their text."""

    def __init__(self, html: str):
        super().__init__()
        self.loads: list[str] = []
        self.anchors: dict[str, str] = {}
        self._anchor: str | None = None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "a":
            self._anchor = attrs.get("href")
            return
        for name in ("src", "href", "spec-url"):
            if attrs.get(name):
                self.loads.append(attrs[name])

    def handle_data(self, data):
        if self._anchor is not None and data.strip():
            self.anchors[data.strip()] = self._anchor

    def handle_endtag(self, tag):
        if tag == "a":
            self._anchor = None


async def test_docs_pages_load_everything_from_the_api_itself(http):
    viewer = PageLinks((await http.get("/")).text)
    assert viewer.anchors["API docs"] == "/docs"
    for path in ("/docs", "/redoc"):
        page = await http.get(path)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert not EXTERNAL_URL.search(page.text), f"{path} names another host: {page.text}"
        policy = page.headers["content-security-policy"]
        assert policy.startswith("default-src 'none'; script-src 'self' ") or policy.startswith(
            "default-src 'none'; script-src 'self';"
        )
        assert "http" not in policy and "*" not in policy and "unsafe-eval" not in policy
        loads = PageLinks(page.text).loads + SWAGGER_SPEC_URL.findall(page.text)
        assert len(loads) >= (4 if path == "/docs" else 3), loads  # script(s), style, icon, schema
        assert "/openapi.json" in loads
        for url in loads:
            assert url.startswith("/") and not url.startswith("//"), url
            asset = await http.get(url)
            assert asset.status_code == 200, (path, url)
            suffix = url[url.rfind(".") :]
            assert asset.headers["content-type"].startswith(CONTENT_TYPES[suffix]), (url, asset.headers)
            assert len(asset.content) > 1000, url


async def refuse_other_origins(context: BrowserContext, api_url: str) -> list[str]:
    """Every request of the context that leaves the API is aborted and listed (as if offline)."""
    refused: list[str] = []

    async def only_the_api(route):
        url = route.request.url
        if url.startswith((api_url + "/", "data:", "blob:")):
            await route.continue_()
        else:
            refused.append(url)
            await route.abort()

    await context.route("**/*", only_the_api)
    return refused


async def test_the_viewer_link_opens_swagger_ui_and_redoc_renders_offline(browser, api_url, http):
    operations = sum(
        method in ("get", "post", "put", "patch", "delete")
        for operation in (await http.get("/openapi.json")).json()["paths"].values()
        for method in operation
    )
    context = await browser.new_context(viewport={"width": 1400, "height": 1000})
    refused = await refuse_other_origins(context, api_url)
    console_errors: list[str] = []  # of the docs pages (the viewer's, without an engine, are not ours here)

    def on_console(message):
        page_url = message.page.url if message.page is not None else ""
        if message.type == "error" and page_url in (api_url + "/docs", api_url + "/redoc"):
            console_errors.append(f"{page_url}: {message.text}")

    context.on("console", on_console)
    script_errors: list[str] = []
    context.on("weberror", lambda error: script_errors.append(str(error.error)))
    try:
        viewer = await context.new_page()
        await viewer.goto(api_url + "/")
        async with context.expect_page() as opened:
            await viewer.get_by_role("link", name="API docs").click()
        docs = await opened.value
        await docs.wait_for_selector(PROPOSE_BLOCK, timeout=20_000)
        assert docs.url == api_url + "/docs"
        assert await docs.title() == "Genesis API — Swagger UI"
        assert "Genesis" in await docs.locator(".info .title").inner_text()
        assert await docs.locator(".opblock").count() == operations
        await docs.click(f"{PROPOSE_BLOCK} .opblock-summary")
        example = await docs.locator(f"{PROPOSE_BLOCK} .body-param__example").inner_text(timeout=10_000)
        assert f'"trait_name": "{EXAMPLE_PROPOSAL["trait_name"]}"' in example

        redoc = await context.new_page()
        await redoc.goto(api_url + "/redoc")
        await redoc.wait_for_selector("[data-section-id]", timeout=20_000)
        assert await redoc.title() == "Genesis API — ReDoc"
        assert await redoc.locator("[data-section-id^='operation/']").count() == operations
        assert "HungryForagerTrait" in await redoc.locator("body").inner_text()  # a request sample
    finally:
        await context.close()
    assert refused == []
    assert script_errors == []
    blocked = [text for text in console_errors if "Content Security Policy" in text]
    assert all(REDOC_FOOTER_LOGO in text for text in blocked), blocked
    assert len(console_errors) == len(blocked), console_errors  # no other error, e.g. a failed load
