"""The world viewer in headless Chromium: one browser for the session (the ``browser`` fixture),
the viewer page of an API in a fresh context, waiting for a script's condition."""

from __future__ import annotations

import os
import shutil
from contextlib import asynccontextmanager

import pytest
from playwright.async_api import Page, async_playwright

CHROMIUM = os.environ.get("GENESIS_CHROMIUM", shutil.which("chromium") or "/usr/bin/chromium")


@pytest.fixture(scope="session")
async def browser():
    assert os.path.exists(CHROMIUM), f"{CHROMIUM} missing: `apt-get install chromium` (scripts/services.sh does)"
    async with async_playwright() as playwright:
        args = ["--no-sandbox"] if os.geteuid() == 0 else []  # Chromium's sandbox refuses root
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=args)
        yield browser
        await browser.close()


@asynccontextmanager
async def viewer(browser, api_url: str, width: int = 1400, height: int = 1000, scale: float = 1):
    """The viewer of the API at ``api_url`` in a fresh browser context (its own localStorage),
    with a viewport of ``width`` by ``height`` CSS pixels and a ``scale`` devicePixelRatio."""
    context = await browser.new_context(viewport={"width": width, "height": height}, device_scale_factor=scale)
    page = await context.new_page()
    page.errors = []  # uncaught exceptions of the page's scripts
    page.on("pageerror", lambda exc: page.errors.append(str(exc)))
    await page.goto(api_url + "/")
    try:
        yield page
    finally:
        await context.close()


async def wait_js(page: Page, expression: str, timeout_s: float = 20):
    await page.wait_for_function(expression, timeout=timeout_s * 1000)
