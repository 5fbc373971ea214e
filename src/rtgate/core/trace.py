"""The decision trace every answer carries: what the gate considered, and why."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from rtgate.core.errors import RtgateError

__all__ = ["Attempt", "Outcome", "Trace", "error_detail", "why_of"]

Outcome = Literal[
    "answered",  # produced the answer
    "declined",  # had nothing to say (template or cache miss, low confidence)
    "skipped",  # predicted p99 did not fit what was left of the budget
    "cut_off",  # no first piece by its cut-off, cancelled
    "too_slow",  # started answering but could not finish in budget, cancelled
    "error",  # raised
    "hedge_lost",  # a hedged twin answered first, cancelled
]


@dataclass(slots=True)
class Attempt:
    """One tier the gate considered for a request; times are ms from request start."""

    tier: str
    outcome: Outcome
    predicted_ms: float | None = None
    started_ms: float | None = None
    first_ms: float | None = None
    ended_ms: float | None = None
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"tier": self.tier, "outcome": self.outcome}
        for k in ("predicted_ms", "started_ms", "first_ms", "ended_ms"):
            v = getattr(self, k)
            if v is not None:
                d[k] = round(v, 3) if v != float("inf") else None
        if self.detail:
            d["detail"] = self.detail
        return d


@dataclass(slots=True)
class Trace:
    request_id: str
    budget_ms: float
    attempts: list[Attempt] = field(default_factory=list)
    route: str = "silent"
    degraded: str | None = None
    job_id: str | None = None
    delegated_to: str | None = None
    ttft_ms: float | None = None
    elapsed_ms: float = 0.0
    hedged: bool = False
    confidence: float | None = None  # a judge's probability that the fast answer is right
    partial: bool = False  # the fast answer is not trusted alone; the big model was asked
    abstained: str | None = None  # why the fast answer was not trusted

    def to_dict(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "budget_ms": self.budget_ms,
            "route": self.route,
            "ttft_ms": None if self.ttft_ms is None else round(self.ttft_ms, 3),
            "elapsed_ms": round(self.elapsed_ms, 3),
            "degraded": self.degraded,
            "job_id": self.job_id,
            "delegated_to": self.delegated_to,
            "hedged": self.hedged,
            "confidence": None if self.confidence is None else round(self.confidence, 4),
            "partial": self.partial,
            "abstained": self.abstained,
            "attempts": [a.to_dict() for a in self.attempts],
        }


def why_of(trace: Mapping[str, Any]) -> str:
    """The line of a trace (:meth:`Trace.to_dict`) that says why its cloud job started: the
    judge's (``abstained``, with its inputs), else the fast tiers' declines, else the gate's
    (``degraded``)."""
    if trace.get("abstained"):
        return str(trace["abstained"])
    local = trace.get("attempts", [])
    declines = [str(a.get("detail", "")) for a in local if a.get("outcome") == "declined"]
    return "; ".join(declines) or str(trace.get("degraded") or "")


MAX_DETAIL = 200


def error_detail(e: BaseException) -> str:
    """What a trace or a job record may say about an error that a tier raised: rtgate's
    own message (written to be shown), cut to ``MAX_DETAIL`` characters; for any other
    exception only its type, since a library's message can quote what it was given (a
    prompt template, the request, another user's text)."""
    if isinstance(e, RtgateError):
        return f"{type(e).__name__}: {str(e)[:MAX_DETAIL]}"
    return type(e).__name__
