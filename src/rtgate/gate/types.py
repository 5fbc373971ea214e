"""What the gate takes and gives: its policy knobs, its answers and events, and the state
of one request while it is served.

These are plain data, kept apart from the gate's logic so that the modules that decide
(:mod:`~rtgate.gate.choice`), run (:mod:`~rtgate.gate.executor`) and delegate
(:mod:`~rtgate.gate.delegation`) share one vocabulary without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from rtgate.core.budget import Budget
from rtgate.core.latency import LatencyModel
from rtgate.core.request import Piece, Request
from rtgate.core.settings import setting
from rtgate.core.trace import Trace
from rtgate.gate.jobs import Job
from rtgate.tiers.answerability import Verdict
from rtgate.tiers.base import Tier

__all__ = [
    "DoneEvent",
    "FollowupEvent",
    "GateConfig",
    "GateEvent",
    "GateResult",
    "Lineup",
    "Run",
    "Scope",
    "TokenEvent",
    "as_piece",
]

Scope = Literal["first_token", "complete"]
"""What the budget bounds: the first visible piece (streaming) or the whole answer."""


@dataclass(slots=True)
class GateConfig:
    """Policy knobs. Times in milliseconds.

    safety_ms: kept in hand when predicting whether a tier fits.
    delegate: run a better tier in the background when it could not answer in budget
        (a request's own ``delegate`` field overrides this).
    followup_budget_ms: the budget a delegated job gets.
    stream_idle_ms: once streaming, the longest gap allowed between two pieces.
    stream_max_ms: once streaming, the longest the rest of the answer may take. When the
        budget bounds the first piece only, tiers are handed a budget this much longer, so
        a backend does not stop generating at the first-piece deadline.
    hedge: start the next tier too when the current one passes its p90 TTFT.
    max_hedge_rate: at most this share of requests may hedge (a running estimate).
    placeholder: the text of a silent answer.
    probe_interval_ms: re-measure a skipped, non-delegable tier in the background at most
        this often, and at once if it was never measured (0: never).
    inline_ms: tiers predicted faster than this are awaited in place; slower ones in a
        child task that a cut-off abandons without waiting for it to unwind.
    last_resort_factor: before answering silently, try the cheapest skipped tier whose
        p99 is within this factor of what is left (0: never).
    abstain_below: with a judge (``Gate(judge=…)``), a fast answer whose probability of
        being right is below this is not trusted alone: the big model is asked in the
        background too (0: the judge's own threshold, chosen when it was fitted).
    on_abstain: what the caller gets now when a fast answer is not trusted: ``partial``
        (the fast answer, marked partial in the trace) or ``placeholder`` (the
        placeholder instead). Either way the delegable tier runs in the background.

    The bounds are declared here, once; the server's ``[gate]`` section is this class plus
    the server's own keys (:class:`rtgate.config.sections.GateSection`).
    """

    safety_ms: float = setting(2.0, ge=0)
    delegate: bool = True
    followup_budget_ms: float = setting(30_000.0, gt=0, le=3_600_000)
    stream_idle_ms: float = setting(5_000.0, gt=0)
    stream_max_ms: float = setting(60_000.0, gt=0)
    hedge: bool = False
    max_hedge_rate: float = setting(0.1, ge=0, le=1)
    placeholder: str = ""
    probe_interval_ms: float = setting(5_000.0, ge=0)
    inline_ms: float = setting(1.0, ge=0)
    last_resort_factor: float = setting(4.0, ge=0)
    abstain_below: float = setting(0.0, ge=0, le=1)
    on_abstain: str = setting("partial", choices=("partial", "placeholder"))


@dataclass(slots=True)
class GateResult:
    """An answer: its text and pieces, the route that produced it, and the trace."""

    text: str
    pieces: list[Piece]
    route: str
    trace: Trace
    job_id: str | None = None

    @property
    def placeholder(self) -> bool:
        return self.route == "silent"

    @property
    def data(self) -> list[Mapping[str, Any]]:
        return [p.data for p in self.pieces if p.data is not None]

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "route": self.route,
            "job_id": self.job_id,
            "data": [dict(d) for d in self.data],
            "trace": self.trace.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """A piece of the in-budget answer; ``t_ms`` from request start."""

    text: str
    data: Mapping[str, Any] | None
    t_ms: float


@dataclass(frozen=True, slots=True)
class DoneEvent:
    result: GateResult


@dataclass(frozen=True, slots=True)
class FollowupEvent:
    """The delegated deeper answer (``job.status`` says whether it succeeded)."""

    job: Job


GateEvent = TokenEvent | DoneEvent | FollowupEvent


@dataclass(slots=True)
class Lineup:
    """The gate's tiers, best first and by name, and what it has learned of each one's
    latency. One object shared by the parts of the gate, so replacing the tiers (wrapping
    them in resilience policies) is seen by all of them."""

    tiers: list[Tier]
    by_name: dict[str, Tier]
    models: dict[str, LatencyModel]

    def model(self, tier: Tier) -> LatencyModel:
        return self.models[tier.name]


@dataclass(slots=True)
class Run:
    """State of one request while the gate serves it."""

    request: Request
    budget: Budget
    tier_budget: Budget  # what tiers see: longer than ``budget`` when it bounds the first piece
    scope: Scope
    trace: Trace
    times: list[float] = field(default_factory=list)
    pieces: list[Piece] = field(default_factory=list)
    answered: Tier | None = None
    delegate_to: Tier | None = None
    verdict: Verdict | None = None  # the judge's word on the fast answer, when there is one
    not_yet: bool = False  # a tier declined the input as not readable yet (``NotYet``)

    @property
    def abstained(self) -> bool:
        """A judge found the fast answer unlikely to be right on its own."""
        return self.verdict is not None and not self.verdict.answerable

    def remember_delegable(self, tier: Tier) -> None:
        """``tier`` could not answer in budget: if it is delegable and nothing was
        remembered yet, it is the one a job runs later."""
        if tier.delegable and self.delegate_to is None:
            self.delegate_to = tier


def as_piece(p: str | Piece) -> Piece:
    return p if isinstance(p, Piece) else Piece(p)
