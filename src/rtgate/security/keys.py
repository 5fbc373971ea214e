"""API keys: stored hashed, each with a rate limit and caps on budget and tokens.

**Hashing (a decision).** A key is ``rtg_`` + 43 URL-safe characters (256 random bits).
The store keeps ``HMAC-SHA256(pepper, key)`` only, the pepper being a server secret kept
outside the store (``RTGATE_KEY_PEPPER``). Why not scrypt or PBKDF2 with a salt: those
slow hashes protect *low-entropy* passwords from guessing; a 256-bit random key cannot be
guessed however fast the hash, while a 50 ms hash on every request would spend a latency
budget and hand attackers a CPU-exhaustion lever, and a per-key salt would force a scan of
every record per request. The HMAC gives an O(1) lookup by digest, and a leaked store is
useless without the pepper (not even a guess can be checked offline).

Limits: a token bucket per key (``rate_per_s`` refill, ``burst`` capacity; memory is one
bucket per known key), and per-key caps on ``budget_ms`` and ``max_tokens`` that the
server checks for each request (a request over a cap is refused, not silently clamped).
The plaintext key is returned once, at creation; logs only ever see ``key_id``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from rtgate.core.budget import Clock
from rtgate.core.errors import ConfigError, KeyLimitExceeded

__all__ = [
    "KEY_PREFIX",
    "PEPPER_ENV",
    "KeyPolicy",
    "KeyRecord",
    "KeyStore",
    "TokenBucket",
    "new_key",
]

KEY_PREFIX = "rtg_"
PEPPER_ENV = "RTGATE_KEY_PEPPER"
MAX_KEY_CHARS = 256  # anything longer is not one of ours: refused before hashing
_MIN_PEPPER_BYTES = 16


def new_key() -> str:
    """A fresh random API key (256 bits)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True, slots=True)
class KeyPolicy:
    """What one key may do. ``None`` caps mean the server's own limits apply."""

    rate_per_s: float = 10.0
    burst: int = 20
    max_budget_ms: float | None = None
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if not (self.rate_per_s > 0 and self.burst >= 1):
            raise ConfigError(f"need rate_per_s > 0 and burst >= 1, got {self}")
        if self.max_budget_ms is not None and not self.max_budget_ms > 0:
            raise ConfigError("max_budget_ms must be > 0")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ConfigError("max_tokens must be >= 1")

    def check(self, budget_ms: float | None = None, max_tokens: int | None = None) -> None:
        """Raise :class:`KeyLimitExceeded` if a request asks for more than allowed."""
        if budget_ms is not None and self.max_budget_ms is not None:
            if budget_ms > self.max_budget_ms:
                raise KeyLimitExceeded(
                    f"budget_ms {budget_ms:g} is above this key's limit of {self.max_budget_ms:g}"
                )
        if max_tokens is not None and self.max_tokens is not None:
            if max_tokens > self.max_tokens:
                raise KeyLimitExceeded(
                    f"max_tokens {max_tokens} is above this key's limit of {self.max_tokens}"
                )


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """A stored key: never the key itself. ``key_id`` is safe to log."""

    key_id: str
    name: str
    digest: str
    policy: KeyPolicy = field(default_factory=KeyPolicy)
    disabled: bool = False
    created: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> KeyRecord:
        try:
            policy = KeyPolicy(**raw.get("policy", {}))
            return cls(
                key_id=str(raw["key_id"]),
                name=str(raw["name"]),
                digest=str(raw["digest"]),
                policy=policy,
                disabled=bool(raw.get("disabled", False)),
                created=float(raw.get("created", 0.0)),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"bad key record: {e}") from None


class TokenBucket:
    """``rate`` tokens a second up to ``burst``; :meth:`take` says how long to wait."""

    __slots__ = ("burst", "clock", "last", "rate", "tokens")

    def __init__(self, rate: float, burst: float, clock: Clock = time.monotonic) -> None:
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self.tokens = float(burst)
        self.last = clock()

    def take(self, n: float = 1.0) -> float:
        """Take ``n`` tokens: 0.0 if granted, else the seconds until they would be."""
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens >= n:
            self.tokens -= n
            return 0.0
        return (n - self.tokens) / self.rate


def _pepper(value: str | bytes | None) -> bytes:
    raw = value if value is not None else os.environ.get(PEPPER_ENV, "")
    pepper = raw.encode() if isinstance(raw, str) else raw
    if len(pepper) < _MIN_PEPPER_BYTES:
        raise ConfigError(
            f"the API key pepper must be at least {_MIN_PEPPER_BYTES} bytes; set {PEPPER_ENV} "
            "(e.g. to the output of: python -c 'import secrets; print(secrets.token_hex(32))')"
        )
    return pepper


class KeyStore:
    """Hashed keys by digest, with one rate-limit bucket per key.

    Args:
        pepper: the server secret (default: ``$RTGATE_KEY_PEPPER``); at least 16 bytes.
        records: keys already issued (e.g. from :meth:`load`).
        clock: monotonic seconds for the rate limits (tests inject one).
    """

    def __init__(
        self,
        pepper: str | bytes | None = None,
        records: Iterable[KeyRecord] = (),
        *,
        clock: Clock = time.monotonic,
    ) -> None:
        self._pepper = _pepper(pepper)
        self.clock = clock
        self._by_digest: dict[str, KeyRecord] = {}
        self._buckets: dict[str, TokenBucket] = {}
        for rec in records:
            self._put(rec)

    def __len__(self) -> int:
        return len(self._by_digest)

    def __repr__(self) -> str:
        return f"KeyStore({len(self)} keys)"

    def digest(self, key: str) -> str:
        return hmac.new(self._pepper, key.encode("utf-8", "replace"), hashlib.sha256).hexdigest()

    def create(self, name: str, policy: KeyPolicy | None = None) -> tuple[str, KeyRecord]:
        """Issue a key; the plaintext is returned here and nowhere else."""
        key = new_key()
        digest = self.digest(key)
        rec = KeyRecord(digest[:12], name, digest, policy or KeyPolicy(), created=time.time())
        self._put(rec)
        return key, rec

    def _put(self, rec: KeyRecord) -> None:
        self._by_digest[rec.digest] = rec
        self._buckets[rec.key_id] = TokenBucket(rec.policy.rate_per_s, rec.policy.burst, self.clock)

    def verify(self, key: str) -> KeyRecord | None:
        """The record of a valid, enabled key, else ``None``."""
        if not key.startswith(KEY_PREFIX) or len(key) > MAX_KEY_CHARS:
            return None
        digest = self.digest(key)
        rec = self._by_digest.get(digest)
        if rec is None or rec.disabled or not hmac.compare_digest(rec.digest, digest):
            return None
        return rec

    def take(self, rec: KeyRecord, n: float = 1.0) -> float:
        """Charge ``rec``'s rate limit: 0.0 if allowed, else seconds to wait."""
        return self._buckets[rec.key_id].take(n)

    def revoke(self, key_id: str) -> bool:
        for digest, rec in self._by_digest.items():
            if rec.key_id == key_id:
                self._by_digest[digest] = replace(rec, disabled=True)
                return True
        return False

    def records(self) -> list[KeyRecord]:
        return sorted(self._by_digest.values(), key=lambda r: r.created)

    # -- files -----------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the records (digests only) as JSON, readable by the owner only."""
        p = Path(path)
        tmp = p.with_suffix(p.suffix + ".tmp")
        data = {"version": 1, "keys": [r.to_dict() for r in self.records()]}
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)
        os.replace(tmp, p)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        pepper: str | bytes | None = None,
        *,
        clock: Clock = time.monotonic,
    ) -> KeyStore:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"key store not found: {path}") from None
        except (OSError, ValueError) as e:
            raise ConfigError(f"cannot read key store {path}: {e}") from None
        if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
            raise ConfigError(f"{path}: expected {{'version': 1, 'keys': [...]}}")
        records = [KeyRecord.from_dict(r) for r in data["keys"] if isinstance(r, dict)]
        return cls(pepper, records, clock=clock)
