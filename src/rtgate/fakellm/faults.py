"""What the fake server does to a request: the fault modes, a seeded mix, and timings.

A *mode spec* is one mode (``"hang"``) or a weighted mix (``"ok=0.7,hang=0.1,429=0.2"``;
``:`` works as well as ``=``; weights need not sum to 1). Each request draws its mode from
the server's seeded generator, unless the request names its own in an ``X-Fake-Mode``
header (a mode or a mix). Modes:

====================  ==========================================================
``ok``                streams ``tokens`` words, first after ``ttft_ms``, then one per ``tpot_ms``
``hang``              accepts the request and never answers (until the client leaves)
``slow``              response starts at once, first token after ``slow_ms``
``trickle``           tokens ``trickle_ms`` apart
``stall``             ``fault_at`` tokens, then nothing, connection kept open
``429`` / ``500``     an OpenAI-style JSON error (429 carries ``Retry-After``)
``reset``             ``fault_at`` tokens, then the connection is dropped mid-body
``malformed``         ``fault_at`` tokens, then an event whose data is not JSON
``truncate``          ``fault_at`` tokens, then a clean end without ``[DONE]``
====================  ==========================================================
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Final

from rtgate.core.errors import InvalidRequest

__all__ = ["MODES", "FakeLLMConfig", "FaultPlan", "Timing", "parse_plan"]

MODES: Final = (
    "ok",
    "hang",
    "slow",
    "trickle",
    "stall",
    "429",
    "500",
    "reset",
    "malformed",
    "truncate",
)
_MAX_SPEC = 512
_ITEM = re.compile(r"^\s*([A-Za-z0-9_]+)\s*(?:[=:]\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?))?\s*$")


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """Modes and their weights; :meth:`pick` draws one."""

    weights: tuple[tuple[str, float], ...]

    def pick(self, rng: random.Random) -> str:
        if len(self.weights) == 1:
            return self.weights[0][0]
        total = sum(w for _, w in self.weights)
        x = rng.random() * total
        for mode, w in self.weights:
            x -= w
            if x < 0:
                return mode
        return self.weights[-1][0]

    def spec(self) -> str:
        if len(self.weights) == 1:
            return self.weights[0][0]
        return ",".join(f"{m}={w:g}" for m, w in self.weights)


def parse_plan(spec: str) -> FaultPlan:
    """``"ok"`` or ``"ok=0.8,500=0.2"`` → a plan; ``InvalidRequest`` says what is wrong."""
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidRequest("fault mode spec is empty")
    if len(spec) > _MAX_SPEC:
        raise InvalidRequest(f"fault mode spec longer than {_MAX_SPEC} characters")
    out: dict[str, float] = {}
    for item in spec.split(","):
        m = _ITEM.match(item)
        if m is None:
            raise InvalidRequest(f"bad fault mode item {item.strip()!r} (want MODE or MODE=WEIGHT)")
        mode, weight = m.group(1).lower(), m.group(2)
        if mode not in MODES:
            raise InvalidRequest(f"unknown fault mode {mode!r}; modes: {', '.join(MODES)}")
        w = 1.0 if weight is None else float(weight)
        if not math.isfinite(w) or w < 0:
            raise InvalidRequest(f"weight of {mode!r} must be a finite number >= 0")
        out[mode] = out.get(mode, 0.0) + w
    weights = tuple((k, v) for k, v in out.items() if v > 0)
    if not weights:
        raise InvalidRequest("every weight in the fault mode spec is zero")
    return FaultPlan(weights)


@dataclass(frozen=True, slots=True)
class Timing:
    """How long things take (ms), how long a reply is, and where a mid-stream fault hits."""

    ttft_ms: float = 20.0
    tpot_ms: float = 5.0
    slow_ms: float = 3_000.0
    trickle_ms: float = 500.0
    tokens: int = 16
    fault_at: int = 1
    jitter: float = 0.0

    def __post_init__(self) -> None:
        for name in ("ttft_ms", "tpot_ms", "slow_ms", "trickle_ms"):
            v = getattr(self, name)
            if not (math.isfinite(v) and 0 <= v <= 3_600_000):
                raise InvalidRequest(f"{name} must be in [0, 3600000], got {v}")
        if not 1 <= self.tokens <= 100_000:
            raise InvalidRequest(f"tokens must be in [1, 100000], got {self.tokens}")
        if not 0 <= self.fault_at <= 100_000:
            raise InvalidRequest(f"fault_at must be in [0, 100000], got {self.fault_at}")
        if not 0 <= self.jitter <= 1:
            raise InvalidRequest(f"jitter must be in [0, 1], got {self.jitter}")

    def with_headers(self, headers: Mapping[str, str]) -> Timing:
        """This timing with ``X-Fake-Ttft-Ms``, ``X-Fake-Tpot-Ms``, ``X-Fake-Tokens`` and
        ``X-Fake-Fault-At`` applied (header names are case-insensitive)."""
        changes: dict[str, float | int] = {}
        for header, name, kind in (
            ("x-fake-ttft-ms", "ttft_ms", float),
            ("x-fake-tpot-ms", "tpot_ms", float),
            ("x-fake-slow-ms", "slow_ms", float),
            ("x-fake-trickle-ms", "trickle_ms", float),
            ("x-fake-tokens", "tokens", int),
            ("x-fake-fault-at", "fault_at", int),
        ):
            raw = headers.get(header)
            if raw is None:
                continue
            try:
                changes[name] = kind(raw)
            except ValueError:
                raise InvalidRequest(f"header {header} must be a number, got {raw!r}") from None
        return replace(self, **changes) if changes else self  # type: ignore[arg-type]

    def delay_s(self, ms: float, rng: random.Random) -> float:
        """``ms`` with up to ``jitter`` relative noise, in seconds."""
        if self.jitter:
            ms *= 1.0 + self.jitter * (2.0 * rng.random() - 1.0)
        return max(0.0, ms) / 1000.0


@dataclass(slots=True)
class FakeLLMConfig:
    """How the server behaves unless a request says otherwise."""

    plan: FaultPlan = field(default_factory=lambda: parse_plan("ok"))
    timing: Timing = field(default_factory=Timing)
    seed: int | None = 0
    models: tuple[str, ...] = ("fake",)
