"""A CORS allow-list: exact origins only, checked at start-up.

``cors_options(["https://app.example.com", "http://localhost:5173"])`` returns the keyword
arguments for Starlette's ``CORSMiddleware``: those origins, the methods and headers rtgate
uses, credentials off. A wildcard is refused unless ``allow_any=True`` is passed on purpose.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from rtgate.core.errors import ConfigError

__all__ = ["ALLOWED_HEADERS", "cors_options", "normalize_origin"]

ALLOWED_HEADERS = ("authorization", "x-api-key", "content-type", "x-budget-ms")
EXPOSED_HEADERS = ("x-rtgate-job-id", "x-rtgate-route", "retry-after")


def normalize_origin(origin: str) -> str:
    """``scheme://host[:port]``, lower-case, default ports dropped; ConfigError otherwise."""
    parts = urlsplit(origin.strip())
    bad = (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or parts.username is not None
        or "*" in origin
    )
    if bad:
        raise ConfigError(
            f"CORS origin must look like 'https://host[:port]' (no path, no wildcard), "
            f"got {origin!r}"
        )
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"CORS origin has a bad port: {origin!r}") from None
    default = {"http": 80, "https": 443}[parts.scheme]
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}" + (f":{port}" if port not in (None, default) else "")


def cors_options(origins: Iterable[str], *, allow_any: bool = False) -> dict[str, Any]:
    """Keyword arguments for ``starlette.middleware.cors.CORSMiddleware``."""
    listed = [o.strip() for o in origins if o.strip()]
    if "*" in listed:
        if not allow_any:
            raise ConfigError("CORS origin '*' allows every site; pass allow_any=True to mean it")
        allow = ["*"]
    else:
        allow = list(dict.fromkeys(normalize_origin(o) for o in listed))
    return {
        "allow_origins": allow,
        "allow_methods": ["GET", "POST", "OPTIONS"],
        "allow_headers": list(ALLOWED_HEADERS),
        "expose_headers": list(EXPOSED_HEADERS),
        "allow_credentials": False,
        "max_age": 600,
    }
