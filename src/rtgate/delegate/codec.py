"""How a delegated job crosses a wire: requests and results as JSON.

A job on a broker is ``{"id", "tier", "budget_ms", "created", "reply", "request"}``; its
result is :meth:`Job.to_dict`. ``reply`` names the gate replica that holds the caller, so a
worker knows where to announce the result. ``meta`` must be JSON (strings, numbers,
lists, objects): anything else is refused with :class:`~rtgate.core.errors.InvalidRequest`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast, get_args

from rtgate.core.errors import InvalidRequest
from rtgate.core.request import Message, Request
from rtgate.gate.jobs import Job, JobStatus

__all__ = [
    "apply_result",
    "decode_job",
    "decode_result",
    "encode_job",
    "encode_result",
    "request_from_dict",
    "request_to_dict",
]

_ROLES = ("system", "user", "assistant")
_STATUSES = get_args(JobStatus)


def request_to_dict(request: Request) -> dict[str, Any]:
    return {
        "input": request.input,
        "messages": [{"role": m.role, "content": m.content} for m in request.messages],
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
        "stop": list(request.stop),
        "delegate": request.delegate,
        "meta": dict(request.meta),
        "id": request.id,
    }


def _field(d: Mapping[str, Any], key: str, kind: type | tuple[type, ...], default: Any) -> Any:
    """``d[key]`` if it is a ``kind`` (a bool is not a number here), else ``default``."""
    value = d.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, kind):
        raise InvalidRequest(f"request field {key!r} has the wrong type: {value!r}")
    return value


def request_from_dict(d: Mapping[str, Any]) -> Request:
    """The :class:`Request` a dict describes; raises ``InvalidRequest`` when malformed."""
    if not isinstance(d, Mapping) or not isinstance(d.get("input"), str):
        raise InvalidRequest("a request needs a string 'input'")
    messages = []
    for m in _field(d, "messages", list, []):
        if not isinstance(m, Mapping) or m.get("role") not in _ROLES:
            raise InvalidRequest(f"bad message {m!r}: role must be one of {_ROLES}")
        if not isinstance(m.get("content"), str):
            raise InvalidRequest(f"bad message {m!r}: content must be a string")
        messages.append(Message(m["role"], m["content"]))
    stop = _field(d, "stop", list, [])
    if not all(isinstance(s, str) for s in stop):
        raise InvalidRequest("request field 'stop' must be a list of strings")
    delegate = d.get("delegate")
    if delegate is not None and not isinstance(delegate, bool):
        raise InvalidRequest("request field 'delegate' must be true, false or null")
    extra = {} if d.get("id") is None else {"id": str(d["id"])}
    return Request(
        input=d["input"],
        messages=tuple(messages),
        max_tokens=int(_field(d, "max_tokens", int, 128)),
        temperature=float(_field(d, "temperature", (int, float), 0.0)),
        stop=tuple(stop),
        delegate=delegate,
        meta=dict(_field(d, "meta", dict, {})),
        **extra,
    )


def _dumps(obj: Any) -> bytes:
    try:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as e:
        raise InvalidRequest(f"not JSON-serialisable: {e}") from None


def encode_job(job: Job, reply: str) -> bytes:
    """A job as bytes for a broker; ``reply`` is the replica waiting for its result."""
    request = job.request
    body = request_to_dict(request) if isinstance(request, Request) else request
    return _dumps(
        {
            "id": job.id,
            "tier": job.tier,
            "budget_ms": job.budget_ms,
            "created": job.created,
            "reply": reply,
            "request": body,
        }
    )


def decode_job(raw: bytes | str) -> tuple[Job, str]:
    """The job and its reply address; raises ``InvalidRequest`` for a malformed message."""
    try:
        d = json.loads(raw)
        job = Job(
            id=str(d["id"]),
            tier=str(d["tier"]),
            request=request_from_dict(d["request"]),
            budget_ms=float(d["budget_ms"]),
            created=float(d.get("created") or 0.0),
        )
        return job, str(d.get("reply") or "")
    except (ValueError, KeyError, TypeError) as e:
        raise InvalidRequest(f"malformed job message: {e}") from None


def encode_result(job: Job) -> bytes:
    return _dumps(job.to_dict())


def decode_result(raw: bytes | str) -> dict[str, Any]:
    d = json.loads(raw)
    if not isinstance(d, dict) or "id" not in d:
        raise InvalidRequest("malformed job result")
    return cast(dict[str, Any], d)


def apply_result(job: Job, d: Mapping[str, Any]) -> Job:
    """Copy a result's fields onto ``job`` (the request and budget stay)."""
    status = d.get("status")
    job.status = cast(JobStatus, status if status in _STATUSES else "failed")
    job.text = str(d.get("text") or "")
    job.data = [dict(x) for x in d.get("data") or []]
    job.error = None if d.get("error") is None else str(d["error"])
    job.finished = _float(d.get("finished"))
    job.ttft_ms = _float(d.get("ttft_ms"))
    job.elapsed_ms = _float(d.get("elapsed_ms"))
    if d.get("created") is not None:
        job.created = float(d["created"])
    return job


def _float(v: Any) -> float | None:
    return None if v is None or v == "" else float(v)
