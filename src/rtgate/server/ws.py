"""``WS /v1/ws``: an interactive session over one WebSocket.

Client to server (JSON text frames)::

    {"seq": 7, "input": "...", "budget_ms": 150, "stream": true, "delegate": null}
    {"type": "cancel", "seq": 8}                     # stop the work in flight and follow-ups

``seq`` must grow; a newer request cancels the one in flight (its tier streams are
closed). Server to client, each tagged with the ``seq`` it belongs to::

    {"type": "token", "seq", "text", "t_ms"}         # when stream is true
    {"type": "answer", "seq", "answer", "route", "placeholder", "job_id", "data", "trace"}
    {"type": "cancelled", "seq", "job_id"?}          # superseded or cancelled
    {"type": "followup", "seq", "stale", "job": {...}}   # a delegated answer, pushed late
    {"type": "error", "seq"?, "error": {"code", "message"}}

Follow-ups are pushed even for older ``seq`` values, with ``stale: true`` when a newer
request has arrived since. Bounds: outgoing messages wait in a queue of
``server.ws_queue`` (when full the producer waits: back-pressure on this session only);
at most ``server.ws_max_followups`` follow-ups are watched at once (beyond that the answer
says ``"followup": false`` and the client polls ``GET /v1/jobs/{id}``).

Delegated jobs: a job id is sent once the job is safely queued. A request superseded
before its answer (with the id) was queued for sending cancels its job; a ``cancel``
message also cancels the follow-ups being watched (one ``cancelled`` message each, with
``job_id``); closing the socket cancels them too. A job the client polls for
(``"followup": false``) is left to run.

With API keys, the key (``Authorization``, ``X-API-Key`` or ``?api_key=``) is checked at
the handshake; each request message is then charged to the key's rate limit (``429``-like
``rate_limited`` error message) and checked against its caps (``key_limit_exceeded``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from fastapi import APIRouter, WebSocket
from pydantic import ValidationError
from starlette.websockets import WebSocketDisconnect

from rtgate.core.errors import ApiError, RtgateError
from rtgate.gate import DoneEvent, TokenEvent
from rtgate.security.keys import KeyRecord, KeyStore
from rtgate.server import jobs
from rtgate.server.error_responses import error_body
from rtgate.server.schemas import WsRequest
from rtgate.server.state import ServerState, api_key, get_state, key_store, owner_of
from rtgate.server.streams import answer_dict, dumps

__all__ = ["Session", "router"]

log = logging.getLogger("rtgate.server")
router = APIRouter(tags=["gate"])


@router.websocket("/v1/ws")
async def ws_session(websocket: WebSocket) -> None:
    try:
        st = get_state(websocket)
    except ApiError:
        await websocket.close(1013)  # try again later
        return
    await websocket.accept()
    await Session(websocket, st, api_key(websocket), key_store(websocket)).run()


class Session:
    """One client's requests, newest first; owns every task it starts."""

    def __init__(
        self,
        websocket: WebSocket,
        st: ServerState,
        key: KeyRecord | None = None,
        keys: KeyStore | None = None,
    ) -> None:
        self.ws = websocket
        self.st = st
        self.key = key
        self.keys = keys
        self.out: asyncio.Queue[str] = asyncio.Queue(st.config.server.ws_queue)
        self.latest = -1
        self.current: tuple[int, asyncio.Task[None]] | None = None
        self.followups: dict[asyncio.Task[None], tuple[int, str]] = {}

    async def run(self) -> None:
        writer = asyncio.create_task(self._write())
        try:
            while True:
                msg = await self.ws.receive()
                if msg["type"] == "websocket.disconnect":
                    break
                raw = msg.get("text")
                if raw is None:  # a binary frame: this protocol is JSON text
                    await self._close(1003, "unsupported_frame", "send JSON text frames")
                    break
                limit = self.st.config.server.max_body_bytes
                if len(raw) > limit:
                    await self._close(1009, "body_too_large", f"frame over {limit} bytes")
                    break
                await self._handle(raw)
        except (WebSocketDisconnect, RuntimeError):
            pass  # the client went away, or the socket closed under us
        finally:
            await self._cancel_current(notify=False)
            tasks = [writer, *self.followups]  # a follow-up cancelled here cancels its job
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _write(self) -> None:
        while True:
            await self.ws.send_text(await self.out.get())
            self.out.task_done()

    async def send(self, obj: dict[str, Any]) -> None:
        await self.out.put(dumps(obj).decode())

    async def _error(
        self, code: str, message: str, seq: int | None = None, status: int = 400
    ) -> None:
        body: dict[str, Any] = {"type": "error", **error_body(status, code, message)}
        if seq is not None:
            body["seq"] = seq
        await self.send(body)

    async def _close(self, code: int, error: str, message: str) -> None:
        """Say why in an error message, then close with ``code`` (the frame is unusable)."""
        await self._error(error, message)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):  # the writer has sent it (or the peer is gone)
                await self.out.join()
        await self.ws.close(code)

    async def _handle(self, raw: str) -> None:
        try:
            msg = WsRequest.model_validate(json.loads(raw))
        except RecursionError:
            await self._error("invalid_request", "JSON nested too deeply")
            return
        except (ValueError, ValidationError) as e:
            await self._error("invalid_request", _brief(e))
            return
        if msg.seq <= self.latest:
            await self._error(
                "stale_seq", f"seq must be greater than {self.latest}, got {msg.seq}", msg.seq
            )
            return
        self.latest = msg.seq
        await self._cancel_current(notify=True)
        if msg.type == "cancel":
            await self._cancel_followups()
            return
        if not msg.input:
            await self._error("invalid_request", "input must not be empty", msg.seq)
            return
        if self.key is not None and self.keys is not None:
            wait_s = self.keys.take(self.key)
            if wait_s > 0:
                text = f"too many requests for this API key; retry in {wait_s:.1f} s"
                await self._error("rate_limited", text, msg.seq, status=429)
                return
        try:
            budget = self.st.budget_ms(None, msg.budget_ms, self.key)
            req = self.st.request(
                msg.input, max_tokens=msg.max_tokens, delegate=msg.delegate, key=self.key
            )
        except (ApiError, RtgateError) as e:
            code = getattr(e, "code", "invalid_request")
            await self._error(code, getattr(e, "message", str(e)), msg.seq)
            return
        task = asyncio.create_task(self._serve(msg.seq, req, budget, msg.stream))
        self.current = (msg.seq, task)

    async def _cancel_current(self, notify: bool) -> None:
        if self.current is None:
            return
        seq, task = self.current
        self.current = None
        if task.done():
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if notify:
            await self.send({"type": "cancelled", "seq": seq})

    async def _cancel_followups(self) -> None:
        """Stop watching every follow-up and cancel their jobs (a ``cancel`` message)."""
        watched = list(self.followups.items())
        for task, _ in watched:
            task.cancel()
        await asyncio.gather(*(t for t, _ in watched), return_exceptions=True)
        for _, (seq, job_id) in watched:
            await self.send({"type": "cancelled", "seq": seq, "job_id": job_id})

    async def _serve(self, seq: int, req: Any, budget: float, stream: bool) -> None:
        gate = self.st.gate
        unclaimed: str | None = None  # a job whose id has not been queued for the client
        try:
            async with contextlib.aclosing(gate.stream(req, budget)) as events:
                async for ev in events:
                    if isinstance(ev, TokenEvent):
                        if stream:
                            tok = {"type": "token", "seq": seq, "text": ev.text, "t_ms": ev.t_ms}
                            await self.send(tok)
                    elif isinstance(ev, DoneEvent):
                        unclaimed = ev.result.job_id
                        result = await jobs.confirm_job(self.st, ev.result)
                        unclaimed = result.job_id
                        answer = {"type": "answer", "seq": seq, **answer_dict(result)}
                        if result.job_id is not None:
                            answer["followup"] = self._watch(seq, result.job_id)
                        await self.send(answer)
                        unclaimed = None
        except Exception as e:
            log.exception("ws request failed")
            await self._error("internal_error", f"request failed: {type(e).__name__}", seq)
        finally:
            if unclaimed is not None:  # superseded, cancelled or closed before the id went
                jobs.cancel(self.st, unclaimed)

    def _watch(self, seq: int, job_id: str) -> bool:
        if len(self.followups) >= self.st.config.server.ws_max_followups:
            return False
        task = asyncio.create_task(self._followup(seq, job_id))
        self.followups[task] = (seq, job_id)
        task.add_done_callback(lambda t: self.followups.pop(t, None))
        return True

    async def _followup(self, seq: int, job_id: str) -> None:
        try:
            job = await jobs.wait(self.st, job_id, owner_of(self.key))
        except asyncio.CancelledError:
            jobs.cancel(self.st, job_id)  # the client cancelled or left: nobody will read it
            raise
        stale = seq != self.latest
        await self.send({"type": "followup", "seq": seq, "stale": stale, "job": job.to_dict()})


def _brief(e: Exception) -> str:
    if isinstance(e, ValidationError):
        first = e.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ()))
        return f"{loc}: {first.get('msg')}" if loc else str(first.get("msg"))
    return "the message is not valid JSON"
