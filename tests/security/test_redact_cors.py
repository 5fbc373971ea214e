"""No secrets in logs; the CORS allow-list."""

from __future__ import annotations

import io
import logging

import pytest

from rtgate.core.errors import ConfigError
from rtgate.security.cors import cors_options, normalize_origin
from rtgate.security.keys import KeyStore
from rtgate.security.redact import RedactingFilter, Redactor, install_redaction

KEY = "rtg_" + "A1b2C3d4" * 5


@pytest.mark.parametrize(
    "line",
    [
        f"GET /v1/ws?api_key={KEY}&x=1 HTTP/1.1",
        f"headers: {{'authorization': 'Bearer {KEY}'}}",
        f"X-API-Key: {KEY}",
        f"x-api-key={KEY}",
        "calling https://user:hunter2secret@api.example.com/v1",
        "upstream key sk-abcdefghijklmnopqrstuvwx rejected",
        "Authorization: bearer abc.def-ghi_jkl",
        f"raw key {KEY} in text",
    ],
)
def test_patterns_redact_keys(line: str) -> None:
    out = Redactor()(line)
    for secret in (KEY, "hunter2secret", "sk-abcdefghijklmnopqrstuvwx", "abc.def-ghi_jkl"):
        assert secret not in out
    assert "***" in out


def test_registered_secret_and_harmless_text() -> None:
    r = Redactor(["s3cr3t-cloud-key"])
    assert r("using s3cr3t-cloud-key now") == "using *** now"
    assert r("budget 150 ms, route local") == "budget 150 ms, route local"


def test_filter_redacts_args_and_tracebacks() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("rtgate.test.redact")
    logger.addHandler(handler)
    logger.propagate = False
    install_redaction(loggers=["rtgate.test.redact"])
    install_redaction(["extra-secret-value"], loggers=["rtgate.test.redact"])  # idempotent
    assert sum(isinstance(f, RedactingFilter) for f in handler.filters) == 1
    try:
        logger.warning("auth header %s", f"Bearer {KEY}")
        logger.info("value extra-secret-value")
        try:
            raise ValueError(f"bad key {KEY}")
        except ValueError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    text = stream.getvalue()
    assert KEY not in text and "extra-secret-value" not in text
    assert "Bearer ***" in text and "ValueError: bad key rtg_***" in text


def test_plaintext_key_never_reaches_a_log_record() -> None:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep()
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("rtgate.test.keys")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    store = KeyStore("p" * 32)
    key, rec = store.create("carol")
    logger.debug("issued %s for %s", key, rec)
    logger.removeHandler(handler)
    assert records and all(key not in r.getMessage() for r in records)


def test_cors_allow_list() -> None:
    opts = cors_options(["https://App.Example.com:443", "http://localhost:5173", ""])
    assert opts["allow_origins"] == ["https://app.example.com", "http://localhost:5173"]
    assert opts["allow_credentials"] is False and "x-api-key" in opts["allow_headers"]
    assert normalize_origin("http://[::1]:8080") == "http://[::1]:8080"
    for bad in (
        "*.example.com",
        "ftp://x",
        "https://x/path",
        "https://u:p@x",
        "example.com",
        "https://x:99999",
    ):
        with pytest.raises(ConfigError):
            normalize_origin(bad)
    with pytest.raises(ConfigError, match="allow_any"):
        cors_options(["*"])
    assert cors_options(["*"], allow_any=True)["allow_origins"] == ["*"]
