"""The WebSocket session: replies carry seq, newer prefixes cancel older work, late cloud
answers are pushed only while their prefix is the latest (events, no sleeps)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi import WebSocketDisconnect

from rtgate.apps.autocomplete.engine import MAX_PREFIX_CHARS
from rtgate.apps.autocomplete.tiers import BackgroundOnly, Reader
from rtgate.apps.autocomplete.web import MAX_MESSAGE_BYTES, _Session
from tests.apps.autocomplete.ac_helpers import GatedCloud, engine_with

COMPLEX_A = (
    "我想把房子装修的10万分24期，但是额度只有6万，能先提额再分期吗，提额需要哪些材料，"
    "分期手续费有没有优惠"
)
COMPLEX_B = (
    "我在国外刷卡被拒了，回来发现卡被冻结了，还扣了一笔年费，我想解冻，退年费，"
    "再问下境外交易怎么开通"
)
BAD = (
    "not json",
    "[1]",
    json.dumps({"seq": "x", "prefix": "a"}),
    json.dumps({"seq": 1, "prefix": 5}),
    json.dumps({"seq": 1, "prefix": "x" * (MAX_PREFIX_CHARS + 1)}),
    json.dumps({"seq": 1, "prefix": "ok", "pause": "yes"}),
)


class FakeSocket:
    """What ``_Session`` needs of a WebSocket: messages in from a queue, out to a list."""

    def __init__(self) -> None:
        self.inbox: asyncio.Queue[str | bytes | None] = asyncio.Queue()
        self.sent: list[dict[str, Any]] = []
        self.arrived = asyncio.Event()
        self.closed: int | None = None

    async def receive(self) -> dict[str, Any]:
        msg = await self.inbox.get()
        if msg is None:
            raise WebSocketDisconnect()
        key = "bytes" if isinstance(msg, bytes) else "text"
        return {"type": "websocket.receive", key: msg}

    async def close(self, code: int) -> None:
        self.closed = code

    async def send_text(self, text: str) -> None:
        self.sent.append(json.loads(text))
        self.arrived.set()

    async def next(self, kind: str, seq: int | None = None) -> dict[str, Any]:
        """Wait for the first sent message of ``kind`` (and ``seq``) not yet consumed."""
        while True:
            for m in self.sent:
                if m["type"] == kind and (seq is None or m["seq"] == seq) and not m.get("_seen"):
                    m["_seen"] = True
                    return m
            self.arrived.clear()
            await self.arrived.wait()

    def put(self, seq: int, prefix: str, pause: bool = False) -> None:
        msg: dict[str, Any] = {"seq": seq, "prefix": prefix}
        if pause:
            msg["pause"] = True
        self.inbox.put_nowait(json.dumps(msg))


async def test_newer_prefix_cancels_the_older_cloud_job_and_only_the_latest_is_pushed(
    reader: Reader, cloud: GatedCloud, gated: BackgroundOnly
) -> None:
    async with engine_with(reader, cloud=gated) as engine:
        sock = FakeSocket()
        session = _Session(sock, engine)  # type: ignore[arg-type]
        runner = asyncio.create_task(session.run())
        sock.put(1, COMPLEX_A, pause=True)
        first = await sock.next("suggestions", 1)
        assert first["route"] == "cloud_async" and first["seq"] == 1
        sock.put(2, COMPLEX_B, pause=True)
        second = await sock.next("suggestions", 2)
        assert second["route"] == "cloud_async" and second["job_id"] != first["job_id"]
        job_a = await engine.gate.wait_job(first["job_id"])
        assert job_a.status == "cancelled"  # the newer prefix cancelled the older work
        sock.put(1, "我想把")  # an old seq arriving late is refused, not answered
        stale = await sock.next("stale")
        assert stale["seq"] == 1
        cloud.release.set()
        pushed = await sock.next("followup", 2)
        assert pushed["route"] == "cloud" and pushed["candidates"][0]["source"] == "cloud"
        sock.inbox.put_nowait(None)
        await runner
    assert not [m for m in sock.sent if m["type"] == "followup" and m["seq"] == 1]


async def test_late_cloud_answer_is_dropped_when_the_user_typed_on(
    reader: Reader, cloud: GatedCloud, gated: BackgroundOnly
) -> None:
    async with engine_with(reader, cloud=gated) as engine:
        sock = FakeSocket()
        session = _Session(sock, engine)  # type: ignore[arg-type]
        runner = asyncio.create_task(session.run())
        sock.put(1, COMPLEX_A, pause=True)
        first = await sock.next("suggestions", 1)
        sock.put(2, "我想把")
        second = await sock.next("suggestions", 2)
        assert second["route"] == "template" and "job_id" not in second
        assert (await engine.gate.wait_job(first["job_id"])).status == "cancelled"
        cloud.release.set()
        sock.put(3, "我想把积")
        await sock.next("suggestions", 3)
        sock.inbox.put_nowait(None)
        await runner
    assert [m["type"] for m in sock.sent] == ["suggestions"] * 3


async def test_a_pause_is_answered_unless_the_cloud_already_has_the_text(
    reader: Reader, cloud: GatedCloud, gated: BackgroundOnly
) -> None:
    ask = "I lost my card abroad, can you block it and also raise my limit and split my bill"
    async with engine_with(reader, cloud=gated) as engine:
        sock = FakeSocket()
        runner = asyncio.create_task(_Session(sock, engine).run())  # type: ignore[arg-type]
        sock.put(1, ask)
        typing = await sock.next("suggestions", 1)
        assert "job_id" not in typing  # inside a word: not sent to the cloud
        sock.put(2, ask, pause=True)
        paused = await sock.next("suggestions", 2)
        assert paused["route"] == "cloud_async" and paused["job_id"]
        sock.put(3, ask, pause=True)  # the same text again: the cloud already has it
        sock.put(4, "我想把")
        await sock.next("suggestions", 4)
        assert (await engine.gate.wait_job(paused["job_id"])).status == "cancelled"
        cloud.release.set()
        sock.inbox.put_nowait(None)
        await runner
    assert not [m for m in sock.sent if m.get("seq") == 3]


async def test_bad_messages_get_an_error_and_the_session_goes_on(
    reader: Reader, gated: BackgroundOnly
) -> None:
    async with engine_with(reader, cloud=gated) as engine:
        sock = FakeSocket()
        runner = asyncio.create_task(_Session(sock, engine).run())  # type: ignore[arg-type]
        for bad in BAD:
            sock.inbox.put_nowait(bad)
            err = await sock.next("error")
            assert err["error"]["message"]
        sock.put(1, "我想把")
        ok = await sock.next("suggestions", 1)
        sock.inbox.put_nowait(None)
        await runner
    assert ok["route"] == "template"


async def test_unusable_frames_get_an_error_and_a_close_code(reader: Reader) -> None:
    """A lone surrogate or a huge nested frame: an error in the one shape, and the session
    goes on;
    a binary frame: an error, then close 1003."""
    async with engine_with(reader) as engine:
        sock = FakeSocket()
        session = _Session(sock, engine)  # type: ignore[arg-type]
        task = asyncio.create_task(session.run())
        sock.inbox.put_nowait('{"seq": 1, "prefix": "\\ud800"}')
        err = await sock.next("error")
        assert (
            err["error"]["type"] == "invalid_request_error"
            and "surrogate" in err["error"]["message"]
        )
        deep = MAX_MESSAGE_BYTES // 2 + 1
        sock.inbox.put_nowait("[" * deep + "]" * deep)  # refused by size before parsing
        assert (await sock.next("error"))["error"]["code"] == "invalid_request"
        sock.inbox.put_nowait(b"\x00\x01")
        assert (await sock.next("error"))["error"]["code"] == "unsupported_frame"
        await task
        assert sock.closed == 1003


async def test_a_long_message_gets_the_placeholder_not_an_error(
    reader: Reader, gated: BackgroundOnly
) -> None:
    story = "我上个月在国外住酒店被重复扣了一笔押金，前台说是预授权会自动释放，"
    ask = story * 9 + "怎么申请退款？"
    assert 256 < len(ask) <= MAX_PREFIX_CHARS
    async with engine_with(reader, cloud=gated) as engine:
        sock = FakeSocket()
        runner = asyncio.create_task(_Session(sock, engine).run())  # type: ignore[arg-type]
        sock.put(1, ask)
        got = await sock.next("suggestions", 1)
        sock.inbox.put_nowait(None)
        await runner
    assert got["route"] == "cloud_async"
    assert not [m for m in sock.sent if m["type"] == "error"]
