"""WS /v1/ws: sequence numbers, a newer message cancels older work, late follow-ups.

Starlette's TestClient runs the app in its own thread, so the tiers signal the test with
threading events (and wait for the test's go-ahead the same way): no sleeps.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

from starlette.testclient import TestClient, WebSocketTestSession

from rtgate.config.loader import Config
from rtgate.core.budget import Budget
from rtgate.core.request import Piece, Request
from rtgate.gate import Gate
from rtgate.server import create_app
from rtgate.tiers.base import Tier
from rtgate.tiers.fake import FakeTier
from tests.server.server_helpers import SignalTier, fake_gate, server_only_config


class HeldTier(Tier):
    """Answers only once the test sets ``release`` (a delegated cloud tier)."""

    name = "cloud"
    quality = 80
    delegable = True

    def __init__(self) -> None:
        self.release = threading.Event()

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        await asyncio.to_thread(self.release.wait, 30)
        yield f"deep:{request.input}"


@contextmanager
def session(gate: Gate, config: Config | None = None) -> Iterator[WebSocketTestSession]:
    app = create_app(config or server_only_config(), gate=gate, warmup=False)
    with TestClient(app) as client, client.websocket_connect("/v1/ws") as ws:
        yield ws


def until(ws: WebSocketTestSession, kind: str) -> list[dict[str, Any]]:
    """Messages up to and including the first of type ``kind``."""
    out: list[dict[str, Any]] = []
    while True:
        msg = ws.receive_json()
        out.append(msg)
        if msg["type"] == kind:
            return out


def test_tokens_then_answer_tagged_with_seq() -> None:
    gate = fake_gate([FakeTier("local", 50, ["a", "b"])], local=5.0)
    with session(gate) as ws:
        ws.send_json({"seq": 1, "input": "hi", "budget_ms": 100})
        msgs = until(ws, "answer")
    assert [m["type"] for m in msgs] == ["token", "token", "answer"]
    assert {m["seq"] for m in msgs} == {1}
    assert msgs[-1]["answer"] == "ab" and msgs[-1]["route"] == "local"


def test_newer_seq_cancels_older_work_in_flight() -> None:
    local = SignalTier("local", 50, ["quick"], hang_on="slow")
    gate = fake_gate([local, FakeTier("template", 10, ["canned"])], local=5.0, template=1.0)
    with session(gate) as ws:
        ws.send_json({"seq": 1, "input": "slow", "budget_ms": 60_000, "delegate": False})
        assert local.started_t.wait(10)
        ws.send_json({"seq": 2, "input": "fast", "budget_ms": 60_000, "stream": False})
        msgs = until(ws, "answer")
        assert local.closed_t.wait(10)
    assert msgs[0] == {"type": "cancelled", "seq": 1}
    assert msgs[-1]["seq"] == 2 and msgs[-1]["answer"] == "quick"
    assert [m["type"] for m in msgs] == ["cancelled", "answer"]  # stream false: no tokens
    assert local.cancelled == 1  # the older request's tier stream was closed


def test_late_followups_are_pushed_and_marked_stale() -> None:
    cloud = HeldTier()
    gate = fake_gate([cloud, FakeTier("local", 50, ["now"])], cloud=1800.0, local=5.0)
    with session(gate) as ws:
        ws.send_json({"seq": 1, "input": "one", "budget_ms": 100})
        first = until(ws, "answer")[-1]
        ws.send_json({"seq": 2, "input": "two", "budget_ms": 100})
        second = until(ws, "answer")[-1]
        cloud.release.set()
        followups = [until(ws, "followup")[-1], until(ws, "followup")[-1]]
    assert first["job_id"] and first["followup"] is True
    by_seq = {f["seq"]: f for f in followups}
    assert by_seq[1]["stale"] is True and by_seq[1]["job"]["text"] == "deep:one"
    assert by_seq[2]["stale"] is False and by_seq[2]["job"]["id"] == second["job_id"]


def test_bad_messages_get_errors_and_the_session_goes_on() -> None:
    gate = fake_gate([FakeTier("local", 50, ["ok"])], local=5.0)
    with session(gate) as ws:
        ws.send_text("{not json")
        bad_json = ws.receive_json()
        ws.send_json({"seq": "x", "input": "hi"})
        bad_seq = ws.receive_json()
        ws.send_json({"seq": 5, "input": "hi", "stream": False})
        ok = until(ws, "answer")[-1]
        ws.send_json({"seq": 5, "input": "again"})
        stale = ws.receive_json()
        ws.send_json({"seq": 6, "input": ""})
        empty = ws.receive_json()
        ws.send_json({"seq": 7, "input": "hi", "budget_ms": 10**9})
        budget = ws.receive_json()
    assert bad_json["type"] == "error" and bad_json["error"]["code"] == "invalid_request"
    assert bad_seq["error"]["code"] == "invalid_request" and "seq" in bad_seq["error"]["message"]
    assert ok["answer"] == "ok"
    assert stale == {
        "type": "error",
        "seq": 5,
        "error": {
            "code": "stale_seq",
            "message": "seq must be greater than 5, got 5",
            "type": "invalid_request_error",
        },
    }
    assert empty["error"]["code"] == "invalid_request" and empty["seq"] == 6
    assert budget["error"]["code"] == "invalid_budget"


def test_cancel_message_stops_the_work() -> None:
    local = SignalTier("local", 50, ["quick"], hang_on="slow")
    gate = fake_gate([local], local=5.0)
    with session(gate) as ws:
        ws.send_json({"seq": 1, "input": "slow", "budget_ms": 60_000, "delegate": False})
        assert local.started_t.wait(10)
        ws.send_json({"type": "cancel", "seq": 2})
        msg = ws.receive_json()
        assert local.closed_t.wait(10)
    assert msg == {"type": "cancelled", "seq": 1}
    assert local.cancelled == 1


def test_closing_the_socket_cancels_work_in_flight() -> None:
    local = SignalTier("local", 50, ["quick"], hang_on="slow")
    gate = fake_gate([local], local=5.0)
    with session(gate) as ws:
        ws.send_json({"seq": 1, "input": "slow", "budget_ms": 60_000, "delegate": False})
        assert local.started_t.wait(10)
        ws.close()
        assert local.closed_t.wait(10)
    assert local.cancelled == 1
