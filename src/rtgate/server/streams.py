"""Streaming plumbing: SSE framing, JSON bodies, and cancelling work when a client leaves.

A streamed response is cancelled by Starlette when the client disconnects (its
``listen_for_disconnect`` task), which closes our generators and with them the gate's
tier streams. A plain request/response endpoint is not, so :func:`unless_disconnected`
watches for the client's ``http.disconnect`` and cancels the work when it comes.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive

from rtgate.core.errors import ClientGone
from rtgate.gate import GateResult
from rtgate.gate.jobs import Job

__all__ = [
    "SSE_HEADERS",
    "answer_dict",
    "dumps",
    "follow_job",
    "json_response",
    "sse",
    "sse_response",
    "unless_disconnected",
    "watch_disconnect",
]

T = TypeVar("T")

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
PING = b": ping\n\n"


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON; infinities and NaN (which JSON lacks) become ``null``."""
    try:
        text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError:
        text = json.dumps(_finite(obj), ensure_ascii=False, separators=(",", ":"))
    return text.encode()


def json_response(
    obj: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(dumps(obj), status, headers=headers, media_type="application/json")


def sse(event: str | None, data: Any) -> bytes:
    """One server-sent event; ``data`` is JSON-encoded (a string is sent as is)."""
    payload = data.encode() if isinstance(data, str) else dumps(data)
    head = b"event: " + event.encode() + b"\n" if event else b""
    return head + b"data: " + payload + b"\n\n"


def sse_response(body: AsyncIterator[bytes], headers: Mapping[str, str] | None = None) -> Response:
    return StreamingResponse(
        body, media_type="text/event-stream", headers={**SSE_HEADERS, **(headers or {})}
    )


def answer_dict(result: GateResult) -> dict[str, Any]:
    """The JSON form of an in-budget answer (see ``schemas.GateAnswer``)."""
    return {
        "answer": result.text,
        "route": result.route,
        "placeholder": result.placeholder,
        "job_id": result.job_id,
        "data": [dict(d) for d in result.data],
        "trace": result.trace.to_dict(),
    }


async def follow_job(job: Awaitable[Job], ping_s: float) -> AsyncIterator[bytes]:
    """Yield SSE comments every ``ping_s`` while the job runs (``job`` waits for it to
    finish), then its ``followup`` event."""
    waiter = asyncio.ensure_future(job)
    try:
        while True:
            done, _ = await asyncio.wait({waiter}, timeout=ping_s)
            if done:
                yield sse("followup", waiter.result().to_dict())
                return
            yield PING
    finally:
        waiter.cancel()


async def _cancel_on_disconnect(
    receive: Receive, task: asyncio.Task[Any], gone: list[bool]
) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    gone.append(True)
    task.cancel()


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """``await work``, cancelling it and raising :class:`ClientGone` if the client leaves
    first. Call it after the body has been read."""
    return await watch_disconnect(request.receive, work)


async def watch_disconnect(receive: Receive, work: Awaitable[T]) -> T:
    """:func:`unless_disconnected` on an ASGI ``receive``.

    One watcher task per request, which cancels the request's own task on
    ``http.disconnect`` (cheaper than racing two tasks: this is on the hot path).
    """
    task = asyncio.current_task()
    assert task is not None
    gone: list[bool] = []
    watcher = asyncio.ensure_future(_cancel_on_disconnect(receive, task, gone))
    try:
        return await work
    except asyncio.CancelledError:
        if gone and task.uncancel() == 0:
            raise ClientGone from None
        raise
    finally:
        watcher.cancel()
