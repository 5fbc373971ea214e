"""Security for the server: hashed API keys with limits, ASGI middleware, CORS, log redaction.

Mount order (outermost first)::

    ErrorShieldMiddleware → CORSMiddleware(**cors_options(...)) → BodyLimitMiddleware
        → APIKeyMiddleware(store) → the app
"""

from __future__ import annotations

from rtgate.security.cors import cors_options, normalize_origin
from rtgate.security.keys import KeyPolicy, KeyRecord, KeyStore, TokenBucket
from rtgate.security.middleware import (
    APIKeyMiddleware,
    BodyLimitMiddleware,
    ErrorShieldMiddleware,
    request_key,
)
from rtgate.security.redact import RedactingFilter, Redactor, install_redaction

__all__ = [
    "APIKeyMiddleware",
    "BodyLimitMiddleware",
    "ErrorShieldMiddleware",
    "KeyPolicy",
    "KeyRecord",
    "KeyStore",
    "RedactingFilter",
    "Redactor",
    "TokenBucket",
    "cors_options",
    "install_redaction",
    "normalize_origin",
    "request_key",
]
