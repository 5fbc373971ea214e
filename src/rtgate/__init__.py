"""rtgate: a latency-budget gate that makes language models feel real-time.

The public API is re-exported here lazily (PEP 562): ``import rtgate.apps.guard`` must not
load the gate or any language-model code, because the guard's stop path is kept free of it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_WHERE = {
    "rtgate.budget": ("Budget", "current_budget", "use_budget"),
    "rtgate.errors": (
        "BackendError",
        "BackendProtocolError",
        "BackendUnavailable",
        "ConfigError",
        "Declined",
        "InvalidBudget",
        "InvalidRequest",
        "JobNotFound",
        "QueueFull",
        "RateLimited",
        "RtgateError",
    ),
    "rtgate.gate": ("DoneEvent", "FollowupEvent", "Gate", "GateConfig", "GateResult", "TokenEvent"),
    "rtgate.latency": ("LatencyModel", "Prior"),
    "rtgate.metrics": ("GateMetrics",),
    "rtgate.tiers.base": ("Message", "Piece", "Request", "Tier"),
    "rtgate.trace": ("Attempt", "Trace"),
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}

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


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'rtgate' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
