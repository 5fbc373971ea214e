"""The HTTP API and the page, in process (httpx ASGITransport)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

from rtgate.apps.autocomplete.tiers import BackgroundOnly, Reader
from rtgate.apps.autocomplete.web import make_router
from tests.apps.autocomplete.ac_helpers import engine_with


@pytest.fixture
async def client(reader: Reader, gated: BackgroundOnly) -> AsyncIterator[httpx.AsyncClient]:
    app = FastAPI()
    app.include_router(make_router(lambda: engine_with(reader, cloud=gated)))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            yield c


async def test_complete_answers_in_the_documented_shape(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/complete", json={"prefix": "我想把", "budget_ms": 150})
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {"candidates", "route", "elapsed_ms", "partial", "trace"}
    assert body["route"] == "template" and 1 <= len(body["candidates"]) <= 5
    assert body["partial"] is False
    assert body["elapsed_ms"] < 150 and body["trace"]["budget_ms"] == 150


async def test_cloud_answer_has_a_job_that_can_be_polled(client: httpx.AsyncClient) -> None:
    ask = "我想把剩下的积分换成年费抵扣，同时申请把主卡额度降到2万，再把副卡注销，这些能一起办吗"
    typing = (await client.post("/v1/complete", json={"prefix": ask})).json()
    assert typing["route"] == "silent" and "job_id" not in typing  # not whole yet: it waits
    r = await client.post("/v1/complete", json={"prefix": ask, "pause": True})
    body = r.json()
    assert body["route"] == "cloud_async" and body["job_id"]
    poll = await client.get(f"/v1/complete/jobs/{body['job_id']}")
    assert poll.status_code == 202 and poll.json()["status"] in ("queued", "running")
    assert (await client.get("/v1/complete/jobs/nope")).status_code == 404


async def test_a_long_message_is_delegated_not_refused(client: httpx.AsyncClient) -> None:
    story = "my card was charged twice at the same hotel last week and I still see both "
    ask = story * 5 + "how do I dispute it?"
    r = await client.post("/v1/complete", json={"prefix": ask})
    assert r.status_code == 200 and len(ask) > 256
    body = r.json()
    assert body["route"] == "cloud_async" and body["job_id"]


@pytest.mark.parametrize(
    ("payload", "status", "code"),
    [
        (b"{not json", 400, "invalid_json"),
        (b'{"budget_ms": 150}', 400, "invalid_request"),
        (b'{"prefix": 12}', 400, "invalid_request"),
        (b'{"prefix": "abc", "budget_ms": -1}', 400, "invalid_budget"),
        (b'{"prefix": "abc", "budget_ms": "fast"}', 400, "invalid_budget"),
        (('{"prefix": "' + "x" * 4097 + '"}').encode(), 400, "invalid_request"),
        (b'{"prefix": "' + b"x" * 30_000 + b'"}', 413, "body_too_large"),
        (b'{"prefix": "ok", "pause": 1}', 400, "invalid_request"),
    ],
)
async def test_bad_input_is_a_clear_json_error(
    client: httpx.AsyncClient, payload: bytes, status: int, code: str
) -> None:
    r = await client.post("/v1/complete", content=payload)
    assert r.status_code == status
    assert r.json()["error"]["code"] == code and r.json()["error"]["message"]


async def test_page_and_its_files_are_served_without_a_cdn(client: httpx.AsyncClient) -> None:
    page = await client.get("/")
    assert page.status_code == 200 and 'id="q"' in page.text
    assert "http" not in page.text.replace("http-equiv", "")  # nothing from elsewhere
    js = await client.get("/autocomplete/app.js")
    assert js.status_code == 200 and "/v1/complete/ws" in js.text
    assert (await client.get("/autocomplete/style.css")).status_code == 200
    assert (await client.get("/autocomplete/../web.py")).status_code == 404
