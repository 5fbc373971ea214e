"""The latency-budget gate: the policy that decides, for each request, which tier answers
within its budget, cuts a late one off, falls back, and runs the better tier in the
background (delegated jobs) when it cannot fit.

:class:`Gate` (``gate.py``) composes one module per idea: ``types`` (knobs, answers,
events), ``choice`` (which tier fits), ``walk`` (one request down the tiers),
``executor`` and ``hedging`` (one tier's attempt under a cut-off), ``delegation`` (jobs
and probes), ``warmup``; ``jobs``, ``inprocess_queue`` and ``job_runner`` are the job
queue interface, its default and the runner of one job; ``sync_facade`` serves a gate to
synchronous code.
"""

from rtgate.gate.gate import Gate
from rtgate.gate.types import (
    DoneEvent,
    FollowupEvent,
    GateConfig,
    GateEvent,
    GateResult,
    Scope,
    TokenEvent,
)

__all__ = [
    "DoneEvent",
    "FollowupEvent",
    "Gate",
    "GateConfig",
    "GateEvent",
    "GateResult",
    "Scope",
    "TokenEvent",
]
