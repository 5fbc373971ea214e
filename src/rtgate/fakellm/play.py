"""Playing one request's fault over raw ASGI messages (the fake server's responses)."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from rtgate.fakellm.faults import Timing

if TYPE_CHECKING:
    from rtgate.fakellm.faults import FakeLLMConfig

__all__ = ["ConnectionDropped", "FakeLLMState", "FaultResponse", "Job"]

_WORDS = (
    "This is a fake reply from rtgate fake-llm, streamed one word at a time so that "
    "clients, gates and budgets can be tested against a server that misbehaves on purpose."
).split()


class ConnectionDropped(Exception):
    """Raised after a partial body so the ASGI server drops the connection (``reset``).

    Not in :mod:`rtgate.core.errors`: it is this server's signal to its own ASGI server,
    never raised to a caller (the client sees a reset socket) and kept out of the logs.
    """


@dataclass(slots=True)
class FakeLLMState:
    """Mutable server state: the plan in force, the generator, the counters."""

    config: FakeLLMConfig
    rng: random.Random
    counts: Counter[str] = field(default_factory=Counter)
    in_flight: int = 0
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def stats(self) -> dict[str, Any]:
        return {
            "requests": sum(self.counts.values()),
            "by_mode": dict(self.counts),
            "in_flight": self.in_flight,
            "plan": self.config.plan.spec(),
        }


def _sse(obj: Any) -> bytes:
    text = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
    return f"data: {text}\n\n".encode()


@dataclass(slots=True)
class Job:
    """One parsed request and what it will suffer."""

    chat: bool
    stream: bool
    model: str
    n_tokens: int
    mode: str
    timing: Timing
    rng: random.Random
    rid: str

    def word(self, i: int) -> str:
        w = _WORDS[i % len(_WORDS)]
        return w if i == 0 else " " + w

    def chunk(self, text: str | None, finish: str | None = None) -> dict[str, Any]:
        if self.chat:
            delta: dict[str, Any] = {} if text is None else {"content": text}
            if text == "" and finish is None:
                delta = {"role": "assistant", "content": ""}
            choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
            kind = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": text or "", "finish_reason": finish}
            kind = "text_completion"
        return {
            "id": self.rid,
            "object": kind,
            "created": int(time.time()),
            "model": self.model,
            "choices": [choice],
        }

    def whole(self) -> dict[str, Any]:
        text = "".join(self.word(i) for i in range(self.n_tokens))
        finish = "length" if self.n_tokens < self.timing.tokens else "stop"
        if self.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish,
            }
            kind = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "finish_reason": finish}
            kind = "text_completion"
        usage = {
            "prompt_tokens": 1,
            "completion_tokens": self.n_tokens,
            "total_tokens": self.n_tokens + 1,
        }
        return {
            "id": self.rid,
            "object": kind,
            "created": int(time.time()),
            "model": self.model,
            "choices": [choice],
            "usage": usage,
        }


class FaultResponse(Response):
    """Plays one job over raw ASGI messages, watching for the client to leave."""

    def __init__(self, job: Job, state: FakeLLMState) -> None:
        super().__init__()
        self.job = job
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.state.in_flight += 1
        dropped = False
        try:
            async with anyio.create_task_group() as tg:

                async def watch() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    tg.cancel_scope.cancel()

                tg.start_soon(watch)
                dropped = await self._play(send)
                tg.cancel_scope.cancel()
        finally:
            self.state.in_flight -= 1
        if dropped:
            raise ConnectionDropped(self.job.rid)

    async def _sleep(self, ms: float) -> None:
        await asyncio.sleep(self.job.timing.delay_s(ms, self.job.rng))

    async def _play(self, send: Send) -> bool:
        job, t = self.job, self.job.timing
        if job.mode == "hang":
            await anyio.sleep_forever()
        if not job.stream:
            return await self._whole(send)
        head = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
        await send({"type": "http.response.start", "status": 200, "headers": head})

        async def emit(data: bytes) -> None:
            await send({"type": "http.response.body", "body": data, "more_body": True})

        if job.chat:
            await emit(_sse(job.chunk("")))
        faulty = job.mode in ("stall", "reset", "malformed", "truncate")
        for i in range(job.n_tokens):
            if faulty and i == t.fault_at:
                return await self._fault(emit, send)
            if i == 0:
                await self._sleep(t.slow_ms if job.mode == "slow" else t.ttft_ms)
            else:
                await self._sleep(t.trickle_ms if job.mode == "trickle" else t.tpot_ms)
            await emit(_sse(job.chunk(job.word(i))))
        if faulty:
            return await self._fault(emit, send)
        finish = "length" if job.n_tokens < t.tokens else "stop"
        await emit(_sse(job.chunk(None, finish)) + _sse("[DONE]"))
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return False

    async def _fault(self, emit: Callable[[bytes], Awaitable[None]], send: Send) -> bool:
        mode = self.job.mode
        if mode == "stall":
            await anyio.sleep_forever()
        if mode == "reset":
            return True
        if mode == "malformed":
            await emit(b'data: {"choices": [{"delta": {"content": "bro\n\n')
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return False

    async def _whole(self, send: Send) -> bool:
        job, t = self.job, self.job.timing
        mode = job.mode
        if mode in ("stall",):
            await anyio.sleep_forever()
        first = t.slow_ms if mode == "slow" else t.ttft_ms
        gap = t.trickle_ms if mode == "trickle" else t.tpot_ms
        await self._sleep(first + gap * max(0, job.n_tokens - 1))
        body = json.dumps(job.whole()).encode()
        if mode in ("malformed", "truncate"):
            body = body[: len(body) // 2]
        head = [(b"content-type", b"application/json")]
        head.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": 200, "headers": head})
        if mode == "reset":
            await send(
                {"type": "http.response.body", "body": body[: len(body) // 2], "more_body": True}
            )
            return True
        await send({"type": "http.response.body", "body": body, "more_body": False})
        return False
