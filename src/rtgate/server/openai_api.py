"""``POST /v1/chat/completions`` and ``GET /v1/models``, OpenAI-compatible.

Model ``auto`` (and any other name in ``server.models``) goes through the gate. A model
named after an ``openai``-kind tier (its tier name or its upstream ``model``) is passed
through to that upstream as it is (:mod:`rtgate.server.passthrough`). The budget
comes from the ``X-Budget-Ms`` header or a ``budget_ms`` field (the tighter wins). What
rtgate adds rides in an extra ``rtgate`` object (``route``, ``job_id``, ``placeholder``,
``trace``) on the completion, or on the last chunk of a stream; a non-streamed answer
also carries ``X-Rtgate-Route`` and, when a deeper answer was delegated,
``X-Rtgate-Job-Id`` headers. Fetch the deeper answer at ``GET /v1/jobs/{id}``. As on
``/v1/gate``, a job id is sent once the job is safely queued, and a client that leaves
before the last chunk cancels the job.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header
from starlette.requests import Request as HttpRequest
from starlette.responses import Response

from rtgate.core.budget import Budget
from rtgate.core.errors import ApiError
from rtgate.core.request import Message, Request
from rtgate.gate import DoneEvent, GateResult, TokenEvent
from rtgate.server import jobs, passthrough
from rtgate.server.error_responses import error_body
from rtgate.server.schemas import ChatCompletionRequest, ChatMessageIn, ErrorOut
from rtgate.server.state import ServerState, api_key, state
from rtgate.server.streams import json_response, sse, sse_response

__all__ = ["router"]

log = logging.getLogger("rtgate.server")
router = APIRouter(tags=["openai"])
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


def _text(msg: ChatMessageIn, index: int) -> str:
    content = msg.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if part.type != "text" or part.text is None:
            raise ApiError(
                400,
                "unsupported_content",
                f"messages[{index}]: only text content is supported, got {part.type!r}",
                f"messages.{index}.content",
            )
        parts.append(part.text)
    return "".join(parts)


def _messages(body: ChatCompletionRequest) -> tuple[str, list[Message]]:
    """The gate's ``input`` (the last user turn) and the whole conversation."""
    out: list[Message] = []
    for i, m in enumerate(body.messages):
        role = _ROLES.get(m.role)
        if role is None:
            raise ApiError(
                400,
                "unsupported_role",
                f"messages[{i}]: role {m.role!r} is not supported (tools are not)",
                f"messages.{i}.role",
            )
        out.append(Message(role, _text(m, i)))  # type: ignore[arg-type]
    users = [m.content for m in out if m.role == "user"]
    if not users or not users[-1].strip():
        raise ApiError(400, "invalid_request", "messages need a non-empty user message", "messages")
    return users[-1], out


def _rtgate(result: GateResult) -> dict[str, Any]:
    return {
        "route": result.route,
        "job_id": result.job_id,
        "placeholder": result.placeholder,
        "trace": result.trace.to_dict(),
    }


def _finish_reason(result: GateResult, req: Request) -> str:
    return "length" if len(result.pieces) >= req.max_tokens else "stop"


@router.get("/v1/models", summary="Models served: the gate's names and the named upstreams")
async def list_models(st: Annotated[ServerState, Depends(state)]) -> Response:
    created = int(st.started)
    names = dict.fromkeys([*st.config.server.models, *passthrough.named_upstreams(st.gate)])
    data = [
        {"id": name, "object": "model", "created": created, "owned_by": "rtgate"} for name in names
    ]
    return json_response({"object": "list", "data": data})


@router.post(
    "/v1/chat/completions",
    responses={400: {"model": ErrorOut}, 404: {"model": ErrorOut}, 413: {"model": ErrorOut}},
    summary="OpenAI-compatible chat completion within a latency budget",
)
async def chat_completions(
    body: ChatCompletionRequest,
    http: HttpRequest,
    st: Annotated[ServerState, Depends(state)],
    x_budget_ms: Annotated[str | None, Header()] = None,
) -> Response:
    upstream = passthrough.upstreams(st).get(body.model)
    if upstream is not None and body.model not in st.config.server.models:
        key = api_key(http)  # the lane (server/lane.py) answers these first, when installed
        budget = st.budget_ms(x_budget_ms, body.budget_ms, key)
        prep = passthrough.prepare(st, upstream, await http.json(), budget, key)
        return passthrough.AsgiAnswer(st, prep)
    if body.model not in st.config.server.models:
        known = ", ".join([*st.config.server.models, *passthrough.named_upstreams(st.gate)])
        raise ApiError(
            404, "model_not_found", f"model {body.model!r} not found; use one of: {known}", "model"
        )
    if body.n not in (None, 1):
        raise ApiError(400, "unsupported", "only n=1 is supported", "n")
    text, messages = _messages(body)
    stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or ())
    key = api_key(http)  # its caps: over one -> 400 key_limit_exceeded
    req = st.request(
        text,
        messages,
        max_tokens=body.max_completion_tokens or body.max_tokens,
        temperature=body.temperature,
        stop=stop,
        delegate=body.delegate,
        key=key,
    )
    budget = st.budget_ms(x_budget_ms, body.budget_ms, key)
    cid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    created = int(time.time())
    if body.stream:
        started = st.begin(http, req, budget)  # an overload error is raised before the stream
        return sse_response(_chunks(st, req, started, cid, created, body.model))
    result = await jobs.confirm_job(st, await st.answer(http, req, budget))
    completion = {
        "id": cid,
        "object": "chat.completion",
        "created": created,
        "model": body.model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": result.text},
                "logprobs": None,
                "finish_reason": _finish_reason(result, req),
            }
        ],
        "rtgate": _rtgate(result),
    }
    headers = {"X-Rtgate-Route": result.route}
    if result.job_id is not None:
        headers["X-Rtgate-Job-Id"] = result.job_id
    return json_response(completion, headers=headers)


async def _chunks(
    st: ServerState,
    req: Request,
    started: Budget | GateResult,
    cid: str,
    created: int,
    model: str,
) -> AsyncIterator[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        obj = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [choice],
            **extra,
        }
        return sse(None, obj)

    yield chunk({"role": "assistant", "content": ""})
    unclaimed: str | None = None  # a job whose id has not reached the client yet
    try:
        sent = False
        async with contextlib.aclosing(st.events(req, started)) as events:
            async for ev in events:
                if isinstance(ev, TokenEvent):
                    if ev.text:
                        sent = True
                        yield chunk({"content": ev.text})
                elif isinstance(ev, DoneEvent):
                    unclaimed = ev.result.job_id  # cancelled if the client leaves now
                    result = await jobs.confirm_job(st, ev.result)
                    unclaimed = result.job_id
                    if not sent and result.text:  # the placeholder of a silent answer
                        yield chunk({"content": result.text})
                    yield chunk({}, _finish_reason(result, req), rtgate=_rtgate(result))
                    unclaimed = None
    except Exception as e:
        log.exception("chat completion stream failed")
        yield sse(None, error_body(500, "internal_error", f"stream failed: {type(e).__name__}"))
    finally:
        if unclaimed is not None:
            jobs.cancel(st, unclaimed)
    yield sse(None, "[DONE]")
