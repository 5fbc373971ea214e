"""rtgate: a latency-budget gate that makes language models feel real-time.

The public API is re-exported here lazily (PEP 562): ``import rtgate.apps.guard`` must not
load the gate or any language-model code, because the guard's stop path is kept free of it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rtgate.core.budget import Budget, current_budget, use_budget
    from rtgate.core.errors import (
        ApiError,
        BackendError,
        BackendProtocolError,
        BackendUnavailable,
        ClientGone,
        ConfigError,
        Declined,
        InvalidBudget,
        InvalidRequest,
        JobNotFound,
        KeyLimitExceeded,
        ModelNotFound,
        Overloaded,
        QueueFull,
        RateLimited,
        RtgateError,
    )
    from rtgate.core.latency import LatencyModel, Prior
    from rtgate.core.metrics import GateMetrics
    from rtgate.core.request import Message, Piece, Request
    from rtgate.core.trace import Attempt, Trace
    from rtgate.gate import DoneEvent, FollowupEvent, Gate, GateConfig, GateResult, TokenEvent
    from rtgate.tiers.base import Tier

_WHERE = {
    "rtgate.core.budget": ("Budget", "current_budget", "use_budget"),
    "rtgate.core.errors": (
        "ApiError",
        "BackendError",
        "BackendProtocolError",
        "BackendUnavailable",
        "ClientGone",
        "ConfigError",
        "Declined",
        "InvalidBudget",
        "InvalidRequest",
        "JobNotFound",
        "Overloaded",
        "KeyLimitExceeded",
        "ModelNotFound",
        "QueueFull",
        "RateLimited",
        "RtgateError",
    ),
    "rtgate.gate": ("DoneEvent", "FollowupEvent", "Gate", "GateConfig", "GateResult", "TokenEvent"),
    "rtgate.core.latency": ("LatencyModel", "Prior"),
    "rtgate.core.metrics": ("GateMetrics",),
    "rtgate.core.request": ("Message", "Piece", "Request"),
    "rtgate.tiers.base": ("Tier",),
    "rtgate.core.trace": ("Attempt", "Trace"),
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}

__all__ = [
    "ApiError",
    "Attempt",
    "BackendError",
    "BackendProtocolError",
    "BackendUnavailable",
    "Budget",
    "ClientGone",
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
    "KeyLimitExceeded",
    "LatencyModel",
    "Message",
    "ModelNotFound",
    "Overloaded",
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
