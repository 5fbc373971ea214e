"""Server configuration: one TOML file plus ``RTGATE_*`` environment variables.

Every setting has a default that runs on the embedded models, so no file is needed. A file
(``--config FILE`` or ``RTGATE_CONFIG``) holds sections; the environment overrides the
file, one variable per key: ``RTGATE_<SECTION>_<KEY>``, e.g. ``RTGATE_SERVER_PORT=9000``,
``RTGATE_CLOUD_BASE_URL=http://127.0.0.1:8000/v1``. Lists in the environment are
comma-separated. An empty value unsets an optional key. The sections themselves (their
keys, defaults and bounds) are in :mod:`rtgate.config.sections`.

::

    [cloud]                      # a remote OpenAI-compatible model; without it the cloud
    base_url = "https://api.example.com/v1"   # tier is the local model wrapped in the
    model = "llama-3.3-70b"      # cloud-70b latency profile (an emulation, said so)
    api_key_env = "RTGATE_CLOUD_API_KEY"      # the key is read from this variable only

    [security]                   # without api_keys_file the server is open (and says so)
    api_keys_file = "/etc/rtgate/keys.json"   # from `rtgate keys create --store FILE`
    cors_origins = ["https://app.example.com"]

The cloud API key and the API-key pepper (``RTGATE_KEY_PEPPER``) are never read from a
file and never printed: they are :class:`Secret` values. Mistakes raise
:class:`~rtgate.core.errors.ConfigError` naming the file or variable and key.
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

from rtgate.config.sections import (
    CacheConfig,
    ClassifierConfig,
    CloudConfig,
    GateSection,
    LocalConfig,
    ResilienceConfig,
    SecurityConfig,
    ServerConfig,
    TemplatesConfig,
)
from rtgate.config.tiers import TierDecl, read_tiers, shorthands
from rtgate.config.values import Secret, convert, hint
from rtgate.core.errors import ConfigError
from rtgate.delegate.factory import DelegationSettings
from rtgate.gate import GateConfig
from rtgate.security.redact import redact_url

__all__ = [
    "CacheConfig",
    "ClassifierConfig",
    "CloudConfig",
    "Config",
    "DelegationSettings",
    "GateSection",
    "LocalConfig",
    "ResilienceConfig",
    "Secret",
    "SecurityConfig",
    "ServerConfig",
    "TemplatesConfig",
    "load_config",
]

ENV_PREFIX = "RTGATE_"
ENV_FILE = "RTGATE_CONFIG"
PEPPER_ENV = "RTGATE_KEY_PEPPER"  # = rtgate.security.keys.PEPPER_ENV (no server import here)


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
    resilience: ResilienceConfig = field(default_factory=ResilienceConfig)
    security: SecurityConfig = field(default_factory=SecurityConfig)
    tiers: dict[str, TierDecl] = field(default_factory=dict)  # the [tiers.NAME] tables
    source: str | None = None

    def declared_tiers(self) -> list[TierDecl]:
        """Every tier to build: the shorthand sections' (when enabled), each replaced by a
        ``[tiers.NAME]`` of its name, then the other ``[tiers.NAME]``."""
        short = shorthands(self.templates, self.classifier, self.cache, self.local, self.cloud)
        named = dict(self.tiers)
        out = [named.pop(d.name, d) for d in short]
        return [*out, *named.values()]

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
            section.pop("key_pepper", None)
            out[name] = section
        if self.cloud.base_url:
            out["cloud"]["base_url"] = redact_url(self.cloud.base_url)
        if self.delegation.url:
            out["delegation"]["url"] = redact_url(self.delegation.url)
        if self.cache.url:
            out["cache"]["url"] = redact_url(self.cache.url)
        out["cloud"]["api_key_set"] = self.cloud.api_key is not None
        out["security"]["key_pepper_set"] = self.security.key_pepper is not None
        out["tiers"] = {name: _redacted_tier(d) for name, d in self.tiers.items()}
        return out


def _redacted_tier(d: TierDecl) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": d.kind, **dataclasses.asdict(d.section)}
    if "api_key" in out:
        out["api_key_set"] = out.pop("api_key") is not None
    for key, value in out.items():
        if key.endswith("url") and isinstance(value, str):
            out[key] = redact_url(value)
    over = {k: v for k, v in dataclasses.asdict(d.overrides).items() if v is not None}
    return {**out, **over}


_SECTIONS: dict[str, type[Any]] = {
    f.name: typing.get_type_hints(Config)[f.name]
    for f in dataclasses.fields(Config)
    if f.name not in ("source", "tiers")
}


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
    tiers = read_tiers(raw.pop("tiers", {}), source or "config", env)
    sections: dict[str, dict[str, Any]] = {name: {} for name in _SECTIONS}
    origin: dict[str, str] = {}  # "section.key" -> where its value came from
    for name, values in raw.items():
        for key, value in values.items():
            where = f"{source}: [{name}]"
            sections[name][key] = convert(_SECTIONS[name], key, value, where)
            origin[f"{name}.{key}"] = where
    for var, text in env.items():
        hit = _env_key(var)
        if hit is not None:
            name, key = hit
            where = f"environment {var}"
            sections[name][key] = convert(_SECTIONS[name], key, text, where, True)
            origin[f"{name}.{key}"] = where
    built = {name: _build(name, values, source) for name, values in sections.items()}
    config = Config(**built, tiers=tiers, source=source)
    _attach_secrets(config, env)
    _check(config, origin)
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
        if name == "tiers":
            if not isinstance(values, dict):
                raise ConfigError(f"{path}: tiers must be [tiers.NAME] tables")
            continue  # read_tiers checks them
        if name not in _SECTIONS:
            raise ConfigError(
                f"{path}: unknown section [{name}]{hint(name, [*_SECTIONS, 'tiers'])}"
            )
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: {name} must be a [{name}] table")
        if name == "cloud" and "api_key" in values:
            raise ConfigError(
                f"{path}: [cloud] api_key is not read from files; put the key in the "
                "environment (RTGATE_CLOUD_API_KEY, or the variable named by api_key_env)"
            )
        if name == "security" and "key_pepper" in values:
            raise ConfigError(
                f"{path}: [security] key_pepper is not read from files; set {PEPPER_ENV}"
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
            if (name, key) in (("cloud", "api_key"), ("security", "key_pepper")):
                return None  # secrets are read by _attach_secrets only
            return name, key
    return None  # RTGATE_CACHE (the model cache directory) and other modules' variables


def _attach_secrets(c: Config, env: Mapping[str, str]) -> None:
    key = env.get(c.cloud.api_key_env) or None
    c.cloud.api_key = Secret(key) if key else None
    pepper = env.get(PEPPER_ENV) or None
    c.security.key_pepper = Secret(pepper) if pepper else None


def _check(c: Config, origin: Mapping[str, str] | None = None) -> None:
    """Rules that involve several keys. ``origin`` says where each key's value came from
    ("section.key" -> file and section, or environment variable), for the messages."""
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
    _check_paths(c, origin or {})
    _check_security(c, where)
    r = c.resilience
    if r.breaker_max_open_s < r.breaker_open_s:
        raise ConfigError(
            f"{where}: resilience.breaker_max_open_s ({r.breaker_max_open_s:g}) is below "
            f"resilience.breaker_open_s ({r.breaker_open_s:g})"
        )


def _expand(value: str, where: str) -> Path:
    try:
        return Path(value).expanduser()
    except RuntimeError as e:  # "~nosuchuser/...": no home directory to expand
        raise ConfigError(f"{where}: cannot expand {value!r}: {e}") from None


def _check_paths(c: Config, origin: Mapping[str, str]) -> None:
    """Files and folders named in the config exist (``~`` and ``~user`` expanded)."""
    checks: list[tuple[str, str | None, str, bool]] = [
        ("local.path", c.local.path, "no such model file", False),
        ("classifier.data_dir", c.classifier.data_dir, "no such folder", True),
        ("templates.file", c.templates.file, "no such file", False),
        ("security.api_keys_file", c.security.api_keys_file, "no such key store", False),
    ]
    for name, value, missing, folder in checks:
        if value is None:
            continue
        where = f"{origin.get(name, c.source or 'config')}: {name}"
        path = _expand(value, where)
        if not (path.is_dir() if folder else path.is_file()):
            raise ConfigError(f"{where}: {missing}: {value}")


def _check_security(c: Config, where: str) -> None:
    sec = c.security
    if sec.api_keys_file is not None and sec.key_pepper is None:
        raise ConfigError(
            f"{where}: security.api_keys_file is set but {PEPPER_ENV} is not; the server "
            "needs the pepper the keys were made with"
        )
    if "*" in (o.strip() for o in sec.cors_origins):
        raise ConfigError(
            f"{where}: security.cors_origins: '*' would let every site call the server; "
            "list the exact origins (https://host[:port])"
        )
    if sec.cors_origins:
        from rtgate.security.cors import cors_options  # only when CORS is configured

        try:
            cors_options(sec.cors_origins)
        except ConfigError as e:
            raise ConfigError(f"{where}: security.cors_origins: {e}") from None
    for p in sec.open_paths:
        if not p.startswith("/"):
            raise ConfigError(f"{where}: security.open_paths: {p!r} must start with '/'")
