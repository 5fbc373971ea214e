"""rtgate: a latency-budget gate that makes language models feel real-time.

The public API is re-exported here; submodules hold the details.
"""

from rtgate.budget import Budget, current_budget, use_budget
from rtgate.errors import (
    BackendError,
    BackendProtocolError,
    BackendUnavailable,
    ConfigError,
    Declined,
    InvalidBudget,
    InvalidRequest,
    JobNotFound,
    QueueFull,
    RateLimited,
    RtgateError,
)
from rtgate.gate import DoneEvent, FollowupEvent, Gate, GateConfig, GateResult, TokenEvent
from rtgate.latency import LatencyModel, Prior
from rtgate.metrics import GateMetrics
from rtgate.tiers.base import Message, Piece, Request, Tier
from rtgate.trace import Attempt, Trace

__all__ = [
    "Attempt",
    "BackendError",
    "BackendProtocolError",
    "BackendUnavailable",
    "Budget",
    "ConfigError",
    "Declined",
    "DoneEvent",
    "FollowupEvent",
    "Gate",
    "GateConfig",
    "GateMetrics",
    "GateResult",
    "InvalidBudget",
    "InvalidRequest",
    "JobNotFound",
    "LatencyModel",
    "Message",
    "Piece",
    "Prior",
    "QueueFull",
    "RateLimited",
    "Request",
    "RtgateError",
    "Tier",
    "TokenEvent",
    "Trace",
    "current_budget",
    "use_budget",
]
__version__ = "0.1.0"
