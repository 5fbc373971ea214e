"""A client that disconnects cancels the upstream work it started (tier streams closed).

The app is called directly as ASGI, so the test decides when the client leaves: after
the tier has started, signalled by an event, never after a sleep.
"""

from __future__ import annotations

import asyncio

import pytest

from rtgate.gate import Gate
from rtgate.server import create_app
from rtgate.tiers.fake import FakeTier
from tests.server.server_helpers import AsgiCall, SignalTier, fake_gate, server_only_config

pytestmark = pytest.mark.looptime


def hanging_gate() -> tuple[Gate, SignalTier]:
    slow = SignalTier("local", 50, hang=True)
    gate = fake_gate([slow, FakeTier("template", 10, ["canned"])], local=10.0, template=1.0)
    return gate, slow


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/gate", {"input": "hi", "budget_ms": 60_000, "delegate": False}),
        ("/v1/gate", {"input": "hi", "budget_ms": 60_000, "stream": True}),
        (
            "/v1/chat/completions",
            {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "budget_ms": 60_000},
        ),
        (
            "/v1/chat/completions",
            {
                "model": "auto",
                "messages": [{"role": "user", "content": "hi"}],
                "budget_ms": 60_000,
                "stream": True,
            },
        ),
    ],
)
async def test_disconnect_cancels_the_tier(path: str, body: dict[str, object]) -> None:
    gate, slow = hanging_gate()
    app = create_app(server_only_config(), gate=gate, warmup=False)
    async with app.router.lifespan_context(app):
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        call = AsgiCall(app, path, body)
        task = call.start()
        await slow.started.wait()
        call.disconnect()
        await task
        await slow.closed.wait()
        # the request ended at the disconnect, not at its 60 s budget
        assert loop.time() - t0 < 1.0
    assert slow.calls == 1 and slow.cancelled == 1
    assert slow.completed == 0


async def test_streamed_answer_unaffected_when_the_client_stays() -> None:
    gate = fake_gate([FakeTier("local", 50, ["a", "b"], tpot_ms=5)], local=10.0)
    app = create_app(server_only_config(), gate=gate, warmup=False)
    async with app.router.lifespan_context(app):
        call = AsgiCall(app, "/v1/gate", {"input": "hi", "stream": True})
        await call.start()
    assert call.sent[0]["status"] == 200
    assert b"event: done" in call.body
