"""Jobs belong to their caller: unguessable ids, bound to the API key that created them
(any other key gets 404, exactly as for an id that never existed), cancelled by DELETE."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from rtgate.core.budget import Budget
from rtgate.core.request import Piece, Request
from rtgate.gate.jobs import Job, new_job_id
from rtgate.security import KeyPolicy, KeyStore
from rtgate.server import create_app
from rtgate.server.middleware_stack import server_middleware
from rtgate.tiers.base import Tier
from rtgate.tiers.fake import FakeTier
from tests.server.server_helpers import fake_gate
from tests.server.test_server_security import PEPPER, bearer, keyed_config, serving


class HeldCloud(Tier):
    """A delegable tier that answers only once released."""

    name, quality, delegable = "cloud", 80, True

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        await self.release.wait()
        yield "deep answer"


def test_ids_are_random_not_counted() -> None:
    ids = [new_job_id() for _ in range(1000)]
    assert len(set(ids)) == 1000
    assert all(len(i) >= 4 + 22 for i in ids)  # "job-" + 16 random bytes, url-safe base64
    assert not any(i.endswith(("-1", "-2")) for i in ids[:2])


def test_the_owner_is_read_from_the_request_in_either_form() -> None:
    req = Request("hi", meta={"owner": "key:abc"})
    assert Job("j", "cloud", req, 1.0).owner == "key:abc"
    assert Job("j", "cloud", {"meta": {"owner": "key:abc"}}, 1.0).owner == "key:abc"
    assert Job("j", "cloud", Request("hi"), 1.0).owner is None


async def test_another_key_cannot_read_or_cancel_a_job(tmp_path: Path) -> None:
    store = KeyStore(PEPPER)
    key_a, _ = store.create("a", KeyPolicy())
    key_b, _ = store.create("b", KeyPolicy())
    store.save(tmp_path / "keys.json")
    config = keyed_config(tmp_path / "keys.json")
    config.server.discover_routers = False
    cloud = HeldCloud()
    gate = fake_gate([cloud, FakeTier("template", 10, ["quick"])], cloud=1800.0, template=2.0)
    app = create_app(config, gate=gate, warmup=False, middleware=server_middleware(config))
    async with serving(app) as client:
        r = await client.post(
            "/v1/gate", json={"input": "hi", "budget_ms": 300}, headers=bearer(key_a)
        )
        job_id = r.json()["job_id"]
        assert job_id is not None
        mine = await client.get(f"/v1/jobs/{job_id}", headers=bearer(key_a))
        theirs = await client.get(f"/v1/jobs/{job_id}", headers=bearer(key_b))
        never = await client.get("/v1/jobs/job-never-existed", headers=bearer(key_b))
        assert mine.status_code == 200 and mine.json()["status"] in ("queued", "running")
        assert theirs.status_code == never.status_code == 404
        assert theirs.json()["error"]["code"] == never.json()["error"]["code"]
        assert (await client.delete(f"/v1/jobs/{job_id}", headers=bearer(key_b))).status_code == 404
        gone = await client.delete(f"/v1/jobs/{job_id}", headers=bearer(key_a))
        assert gone.status_code == 200 and gone.json()["status"] == "cancelled"
        after = await client.get(f"/v1/jobs/{job_id}", headers=bearer(key_a))
        assert after.json()["status"] == "cancelled"
