"""No secrets in logs: a logging filter that redacts API keys, bearer tokens and passwords.

Redacted: ``Authorization: Bearer …`` and ``X-API-Key: …`` values, ``api_key=`` (and
``key``, ``token``, ``access_token``, ``password``) query parameters, ``user:password@``
in URLs, anything shaped like an rtgate key (``rtg_…``) or an OpenAI-style key
(``sk-…``), and any exact secret registered with :meth:`Redactor.add`. The filter
rewrites the message *and* the formatted traceback, so an exception message that quotes a
header is covered too.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

__all__ = ["MASK", "RedactingFilter", "Redactor", "install_redaction", "redact_url"]

MASK = "***"

_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]+"), r"\1" + MASK),
    (re.compile(r"(?i)(x-api-key['\"]?\s*[:=,]\s*['\"]?)[^\s'\",;}]+"), r"\1" + MASK),
    (
        re.compile(r"(?i)([?&;](?:api[_-]?key|key|token|access_token|password)=)[^&\s'\"#]+"),
        r"\1" + MASK,
    ),
    (re.compile(r"(://)[^/\s:@]+:[^/\s@]+@"), r"\1" + MASK + "@"),
    (re.compile(r"rtg_[A-Za-z0-9_-]{8,}"), "rtg_" + MASK),  # no \b: "0rtg_…" is a key too
    (re.compile(r"sk-[A-Za-z0-9_-]{16,}"), "sk-" + MASK),
]


class Redactor:
    """Replaces secrets in text: the built-in patterns plus exact registered values."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._exact: set[str] = set()
        for s in secrets:
            self.add(s)

    def add(self, secret: str) -> None:
        """Redact this exact value too (ignored if shorter than 6 characters)."""
        if len(secret) >= 6:
            self._exact.add(secret)

    def __call__(self, text: str) -> str:
        for value in sorted(self._exact, key=len, reverse=True):
            text = text.replace(value, MASK)
        for pattern, repl in _PATTERNS:
            text = pattern.sub(repl, text)
        return text


class RedactingFilter(logging.Filter):
    """Rewrites each record's message (and traceback text) through a :class:`Redactor`.

    Attach it to *handlers*: a filter on a logger does not see records propagated from
    its children.
    """

    def __init__(self, redactor: Redactor | None = None) -> None:
        super().__init__()
        self.redactor = redactor or Redactor()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: keep what can be shown
            message = f"{record.msg!r} % {record.args!r}"
            record.msg, record.args = self.redactor(message), None
        else:
            if self.redactor(message) != message:
                self._redact_message(record, message)
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redactor(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redactor(record.stack_info)
        return True

    def _redact_message(self, record: logging.LogRecord, message: str) -> None:
        """Redact a record that holds a secret, keeping its shape where a formatter needs
        it: uvicorn's access formatter unpacks ``args`` (client, method, path, version,
        status), so the arguments are redacted one by one rather than folded into ``msg``.
        If a secret still shows once they are (one that spans the format text and an
        argument), the message is folded, except for access records, which cannot be."""
        args = record.args
        if isinstance(args, tuple) and args:
            record.args = tuple(self.redactor(a) if isinstance(a, str) else a for a in args)
            if isinstance(record.msg, str):
                record.msg = self.redactor(record.msg)
            try:
                again = record.getMessage()
            except Exception:
                again = None
            if record.name == "uvicorn.access" or (
                again is not None and self.redactor(again) == again
            ):
                return
        record.msg, record.args = self.redactor(message), None


_DEFAULT_LOGGERS = ("", "uvicorn", "uvicorn.error", "uvicorn.access", "httpx", "rtgate")


def install_redaction(
    secrets: Iterable[str] = (), loggers: Iterable[str] = _DEFAULT_LOGGERS
) -> RedactingFilter:
    """Add one :class:`RedactingFilter` to every handler of ``loggers`` (call it after
    logging is configured, e.g. after uvicorn has set up its handlers). Idempotent."""
    filt = RedactingFilter(Redactor(secrets))
    for name in loggers:
        for handler in logging.getLogger(name).handlers:
            if not any(isinstance(f, RedactingFilter) for f in handler.filters):
                handler.addFilter(filt)
            else:
                for f in handler.filters:
                    if isinstance(f, RedactingFilter):
                        for s in secrets:
                            f.redactor.add(s)
    return filt


def redact_url(url: str) -> str:
    """``url`` without a ``user:password@`` part."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest.split("/", 1)[0]:
        return url
    return f"{scheme}://***@{rest.split('@', 1)[1]}"
