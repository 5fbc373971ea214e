"""A fault-injecting OpenAI-compatible server (``rtgate fake-llm``), for tests and drills.

Hangs, slow first tokens, trickling tokens, 429 and 500, connections dropped mid-stream,
malformed and truncated streams: as a fixed mode, a seeded mix, or per request.
"""

from __future__ import annotations

from rtgate.fakellm.app import create_app
from rtgate.fakellm.faults import MODES, FakeLLMConfig, FaultPlan, Timing, parse_plan
from rtgate.fakellm.server import FakeLLMServer

__all__ = [
    "MODES",
    "FakeLLMConfig",
    "FakeLLMServer",
    "FaultPlan",
    "Timing",
    "create_app",
    "parse_plan",
]
