"""The latency-budget gate: the policy that decides, for each request, which tier answers
within its budget, cuts a late one off, falls back, and runs the better tier in the
background (delegated jobs) when it cannot fit.
"""

from rtgate.gate.gate import (
    DoneEvent,
    FollowupEvent,
    Gate,
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
