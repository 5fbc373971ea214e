"""``POST /v1/gate`` and ``GET /v1/jobs/{id}``: the gate over HTTP.

Streamed answers are server-sent events::

    event: token      data: {"text": "...", "t_ms": 12.3, "data": {...}?}   (zero or more)
    event: done       data: {"answer", "route", "placeholder", "job_id", "data", "trace"}
    event: followup   data: {"id", "status", "text", ...}    (when a job was delegated)
    event: error      data: {"error": {"code", "message"}}    (only if something broke)

Comment lines (``: ping``) keep the connection alive while a follow-up is pending.

A job id is sent once the job is safely queued (:func:`rtgate.server.jobs.confirm_job`).
A client that leaves before it got the id, or while it waits for the ``followup`` on the
stream, cancels the job; ``GET /v1/jobs/{id}`` answers on any replica sharing the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from starlette.requests import Request as HttpRequest
from starlette.responses import Response

from rtgate.core.budget import Budget
from rtgate.core.request import Message, Request
from rtgate.gate import DoneEvent, GateResult, TokenEvent
from rtgate.server import jobs
from rtgate.server.error_responses import error_body
from rtgate.server.schemas import ErrorOut, GateAnswer, GateBody, JobOut
from rtgate.server.state import ServerState, api_key, get_state, owner_of, state
from rtgate.server.streams import (
    answer_dict,
    follow_job,
    json_response,
    sse,
    sse_response,
)

__all__ = ["router"]

log = logging.getLogger("rtgate.server")
router = APIRouter(tags=["gate"])

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorOut},
    404: {"model": ErrorOut},
    413: {"model": ErrorOut},
    503: {"model": ErrorOut},
}
_SSE_DOC = {"text/event-stream": {"schema": {"type": "string"}}}
BUDGET_HEADER = {
    "name": "X-Budget-Ms",
    "in": "header",
    "required": False,
    "schema": {"type": "number", "exclusiveMinimum": 0},
    "description": "Latency budget in ms (the tighter of this and budget_ms applies).",
}
ACCEPT_HEADER = {
    "name": "Accept",
    "in": "header",
    "required": False,
    "schema": {"type": "string"},
    "description": "text/event-stream for a streamed answer.",
}


def _result_headers(result: GateResult) -> dict[str, str]:
    headers = {"X-Rtgate-Route": result.route}
    if result.job_id is not None:
        headers["X-Rtgate-Job-Id"] = result.job_id
    return headers


@router.post(
    "/v1/gate",
    response_model=GateAnswer,
    responses={200: {"content": _SSE_DOC}, **_ERRORS},
    summary="Answer within a latency budget",
    openapi_extra={"parameters": [BUDGET_HEADER, ACCEPT_HEADER]},
)
async def gate_answer(body: GateBody, http: HttpRequest) -> Response:
    """The best answer that fits the budget. With ``stream`` (or ``Accept:
    text/event-stream``): tokens as they come, then ``done``, then ``followup``."""
    # headers and state are read directly, not as FastAPI parameters: this is the hot path
    st = get_state(http)
    headers = http.headers
    accept = headers.get("accept")
    key = api_key(http)  # its caps: over one -> 400 key_limit_exceeded
    budget = st.budget_ms(headers.get("x-budget-ms"), body.budget_ms, key)
    messages = [Message(m.role, m.content) for m in body.messages or ()]
    req = st.request(
        body.input, messages, max_tokens=body.max_tokens, delegate=body.delegate, key=key
    )
    if body.stream or (accept is not None and "text/event-stream" in accept):
        started = st.begin(http, req, budget)  # an overload error is raised before the stream
        return sse_response(_events(st, req, started, body.follow))
    result = await jobs.confirm_job(st, await st.answer(http, req, budget))
    return json_response(answer_dict(result), headers=_result_headers(result))


async def _events(
    st: ServerState, req: Request, started: Budget | GateResult, follow: bool
) -> AsyncIterator[bytes]:
    unclaimed: str | None = None  # a job whose id or follow-up has not reached the client
    try:
        async with contextlib.aclosing(st.events(req, started)) as events:
            async for ev in events:
                if isinstance(ev, TokenEvent):
                    token: dict[str, Any] = {"text": ev.text, "t_ms": round(ev.t_ms, 3)}
                    if ev.data is not None:
                        token["data"] = dict(ev.data)
                    yield sse("token", token)
                elif isinstance(ev, DoneEvent):
                    unclaimed = ev.result.job_id  # cancelled if the client leaves now
                    result = await jobs.confirm_job(st, ev.result)
                    unclaimed = result.job_id
                    yield sse("done", answer_dict(result))
        if follow and unclaimed is not None:
            ping_s = st.config.server.sse_ping_s
            owner = req.meta.get("owner")
            async for chunk in follow_job(jobs.wait(st, unclaimed, owner), ping_s):
                yield chunk
        unclaimed = None
    except Exception as e:  # the response has started: report in-band, never a traceback
        log.exception("gate stream failed")
        yield sse("error", error_body(500, "internal_error", f"stream failed: {type(e).__name__}"))
    finally:
        if unclaimed is not None:  # the client left first: nobody will collect the job
            jobs.cancel(st, unclaimed)


@router.get(
    "/v1/jobs/{job_id}",
    response_model=JobOut,
    responses={404: {"model": ErrorOut}},
    summary="A delegated job",
)
async def get_job(
    job_id: str,
    http: HttpRequest,
    st: Annotated[ServerState, Depends(state)],
    wait_ms: Annotated[
        float, Query(ge=0, le=60_000, description="Wait up to this long for it to finish.")
    ] = 0,
) -> Response:
    """Status and, once finished, the result of a delegated job. With a broker (Redis,
    NATS), any replica answers, whichever took the request. A job created with an API key
    is that key's: any other key gets 404, as for an id that never existed."""
    owner = owner_of(api_key(http))
    job = await jobs.find(st, job_id, owner)  # JobNotFound -> 404
    if wait_ms > 0 and job.status not in ("done", "failed", "cancelled"):
        with contextlib.suppress(TimeoutError):
            job = await asyncio.wait_for(jobs.wait(st, job_id, owner), wait_ms / 1000.0)
    return json_response(job.to_dict())


@router.delete(
    "/v1/jobs/{job_id}",
    response_model=JobOut,
    responses={404: {"model": ErrorOut}},
    summary="Cancel one's delegated job",
)
async def delete_job(
    job_id: str, http: HttpRequest, st: Annotated[ServerState, Depends(state)]
) -> Response:
    """Cancel a delegated job that is queued or running (on any replica); the job as it is
    then. Only its owner may: another key gets 404. A finished job is returned as it is."""
    job = await jobs.cancel_mine(st, job_id, owner_of(api_key(http)))
    return json_response(job.to_dict())
