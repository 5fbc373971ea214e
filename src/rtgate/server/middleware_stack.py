"""The server's security layers, built from the ``[security]`` section.

:func:`server_middleware` is the ASGI stack :func:`~rtgate.server.app.create_app` runs by
default, outermost first::

    FrontDoor                  stamps arrivals; past server.max_inflight answers, or while
                               the loop is server.max_loop_lag_ms behind: 503 at once
    ErrorShieldMiddleware      an escaped exception -> JSON 500 with a reference id
    CORSMiddleware             only when cors_origins lists some (exact origins)
    BodyLimitMiddleware        413 past server.max_body_bytes (the server's only one)
    APIKeyMiddleware           only with api_keys_file: 401 / 429 before any work
    PassthroughLane            a chat completion for a named upstream, answered without
                               the routing (server/lane.py); anything else goes on

CORS sits outside the key check so a browser can read a 401, and preflights pass. Without
``api_keys_file`` the server is **open**: anyone who reaches it may use it. It says so in
the log at start-up and in ``/healthz``. With keys, every route except
``security.open_paths`` (default: ``/healthz``, ``/metrics``, the OpenAPI docs) needs one.

:func:`install_log_redaction` masks keys, tokens and configured secrets in every log
handler; call it once logging is configured (after ``uvicorn.Config`` is built).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware

from rtgate.config.loader import Config
from rtgate.security import (
    APIKeyMiddleware,
    BodyLimitMiddleware,
    ErrorShieldMiddleware,
    KeyStore,
    RedactingFilter,
    cors_options,
    install_redaction,
)
from rtgate.server.door import FrontDoor
from rtgate.server.lane import PassthroughLane

__all__ = [
    "OPEN_NOTE",
    "auth_mode",
    "install_log_redaction",
    "load_keys",
    "server_middleware",
]

log = logging.getLogger("rtgate.server")

OPEN_NOTE = (
    "the server is OPEN: no API keys are configured, so anyone who can reach it may use "
    "every route. Set [security] api_keys_file (made with `rtgate keys create`) and "
    "RTGATE_KEY_PEPPER to require keys."
)


def load_keys(config: Config) -> KeyStore | None:
    """The key store named by ``security.api_keys_file`` (``None``: no keys, open).
    Raises ``ConfigError`` for a missing or unreadable store or a missing pepper."""
    sec = config.security
    if sec.api_keys_file is None:
        return None
    pepper = sec.key_pepper.reveal() if sec.key_pepper is not None else None
    return KeyStore.load(sec.api_keys_file, pepper=pepper)


def server_middleware(config: Config, keys: KeyStore | None = None) -> list[Middleware]:
    """The security stack for ``config`` (see the module docstring). ``keys``: a store
    already loaded (else it is loaded from ``security.api_keys_file``)."""
    sec = config.security
    store = keys if keys is not None else load_keys(config)
    s = config.server
    stack = [Middleware(FrontDoor, limit=s.max_inflight, max_lag_ms=s.max_loop_lag_ms)]
    stack.append(Middleware(ErrorShieldMiddleware))
    if sec.cors_origins:
        stack.append(Middleware(CORSMiddleware, **cors_options(sec.cors_origins)))
    stack.append(Middleware(BodyLimitMiddleware, max_bytes=s.max_body_bytes))
    if store is not None:
        stack.append(Middleware(APIKeyMiddleware, store=store, exempt=sec.open_paths))
    stack.append(Middleware(PassthroughLane))
    return stack


def auth_mode(middleware: Sequence[Middleware]) -> str:
    """``"api_keys"`` when the stack checks keys, else ``"open"``."""
    keyed = any(isinstance(m.cls, type) and issubclass(m.cls, APIKeyMiddleware) for m in middleware)
    return "api_keys" if keyed else "open"


def install_log_redaction(config: Config) -> RedactingFilter | None:
    """Mask secrets in every configured log handler (``security.redact_logs``): the
    built-in patterns (bearer tokens, ``rtg_``/``sk-`` keys, URL passwords) plus the cloud
    API key and the key pepper."""
    if not config.security.redact_logs:
        return None
    secrets = [s.reveal() for s in (config.cloud.api_key, config.security.key_pepper) if s]
    return install_redaction(secrets)
