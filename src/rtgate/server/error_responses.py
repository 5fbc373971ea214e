"""Errors as JSON, never a stack trace: ``{"error": {"code", "message", "type"}}``.

``code`` is stable and machine-readable (the rtgate exception's ``code``, or one of the
HTTP-level codes below); ``type`` follows the OpenAI error shape so OpenAI SDKs raise the
right exception class. Unexpected exceptions are logged with their traceback on the server
and answered with ``500 internal_error``. Request bodies are capped before they are read
by :class:`rtgate.security.BodyLimitMiddleware` (in the server's middleware stack).
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from rtgate.core.errors import (
    ApiError,
    BackendError,
    ConfigError,
    InvalidRequest,
    JobNotFound,
    Overloaded,
    QueueFull,
    RateLimited,
    RtgateError,
)

__all__ = ["error_body", "install_error_handlers"]

log = logging.getLogger("rtgate.server")

_HTTP_CODES = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "body_too_large",
    415: "unsupported_media_type",
    429: "rate_limited",
    503: "unavailable",
}
_TYPES = {400: "invalid_request_error", 404: "not_found_error", 413: "invalid_request_error"}


def error_body(status: int, code: str, message: str, param: str | None = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    err["type"] = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    if param is not None:
        err["param"] = param
    return {"error": err}


def error_response(
    status: int, code: str, message: str, param: str | None = None, **headers: str
) -> Response:
    body = json.dumps(error_body(status, code, message, param), ensure_ascii=False)
    return Response(body, status, headers=headers or None, media_type="application/json")


def status_of(exc: RtgateError) -> int:
    """The HTTP status for an rtgate exception."""
    if isinstance(exc, InvalidRequest):
        return 400
    if isinstance(exc, JobNotFound):
        return 404
    if isinstance(exc, QueueFull | RateLimited | Overloaded):
        return 503
    if isinstance(exc, BackendError):
        return 502
    if isinstance(exc, ConfigError):
        return 500
    return 500


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    errors = list(exc.errors())
    if not errors:
        return "invalid request", None
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    param = ".".join(loc) or None
    msg = str(first.get("msg", "invalid value"))
    if first.get("type") == "json_invalid":  # its loc is a byte offset, not a field
        at = loc[-1] if loc else None
        param, msg = None, "the body is not valid JSON" + (f" (at byte {at})" if at else "")
    elif param is None and first.get("type") in ("model_attributes_type", "dict_type"):
        msg = "the body must be a JSON object"
    text = f"{param}: {msg}" if param else msg
    if len(errors) > 1:
        text += f" (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})"
    return text, param


async def _on_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.code, exc.message, exc.param)


async def _on_rtgate_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RtgateError)
    status = status_of(exc)
    if status >= 500:
        log.warning("%s %s failed: %s: %s", request.method, request.url.path, exc.code, exc)
    retry = getattr(exc, "retry_after_s", 1.0)
    headers = {"Retry-After": str(max(1, math.ceil(retry)))} if status == 503 else {}
    text = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)
    shown = BackendError | QueueFull | Overloaded
    message = text if status < 500 or isinstance(exc, shown) else exc.code
    return error_response(status, exc.code, message, **headers)


async def _on_validation(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    text, param = _validation_message(exc)
    return error_response(400, "invalid_request", text, param)


async def _on_http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = _HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
    return error_response(exc.status_code, code, str(exc.detail), **(exc.headers or {}))


async def _on_unexpected(request: Request, exc: Exception) -> Response:
    log.error("%s %s: unhandled error", request.method, request.url.path, exc_info=exc)
    return error_response(500, "internal_error", "internal server error")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _on_api_error)
    app.add_exception_handler(RtgateError, _on_rtgate_error)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(HTTPException, _on_http)
    app.add_exception_handler(Exception, _on_unexpected)
