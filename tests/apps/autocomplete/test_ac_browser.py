"""The page in Debian's chromium (Playwright drives the system browser, none downloaded):
type "我想把" and see suggestions with their source and latency."""

from __future__ import annotations

import asyncio
import shutil
import socket
from pathlib import Path

import pytest

from rtgate.apps.autocomplete.tiers import BackgroundOnly, Reader
from rtgate.apps.autocomplete.web import make_router
from tests.apps.autocomplete.ac_helpers import engine_with

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="apt-get install -y chromium")
async def test_typing_shows_suggestions(reader: Reader, gated: BackgroundOnly) -> None:
    import uvicorn
    from fastapi import FastAPI
    from playwright.async_api import async_playwright

    app = FastAPI()
    app.include_router(make_router(lambda: engine_with(reader, cloud=gated)))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = int(sock.getsockname()[1])
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            page = await browser.new_page()
            await page.goto(f"http://127.0.0.1:{port}/")
            await page.wait_for_function(
                "document.querySelector('#status').textContent === 'connected'", timeout=10_000
            )
            await page.fill("#q", "我想把")  # one IME commit: one input event
            await page.wait_for_function(
                "document.querySelectorAll('#suggestions li').length >= 3", timeout=10_000
            )
            items = await page.locator("#suggestions li").all_inner_texts()
            status = await page.inner_text("#status")
            await browser.close()
    finally:
        server.should_exit = True
        await serving
    assert items[0].startswith("我想把")
    assert "template" in items[0] and " ms" in items[0]  # source and latency are shown
    assert status.startswith("route: template")
