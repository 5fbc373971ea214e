"""The tiers a configuration declares: any number of ``[tiers.NAME]`` tables, each naming
its ``kind`` (found in the registry, :mod:`rtgate.kinds.registry`), plus the shorthand
sections of the built-in tiers::

    [tiers.cloud-a]              # a tier named "cloud-a" of kind "openai"
    kind = "openai"
    base_url = "https://api.example.com/v1"
    model = "llama-3.3-70b"
    quality = 80
    retries = 1                  # resilience overrides: capacity, breaker, probe, retries

The shorthands ``[templates]``, ``[classifier]``, ``[cache]``, ``[local]`` and ``[cloud]``
declare the tiers ``template``, ``classifier``, ``cache``, ``local`` and ``cloud`` (when
enabled); a ``[tiers.NAME]`` of the same name takes the shorthand's place. A table's keys
are its kind's section (checked as any setting) plus the keys of
:class:`~rtgate.resilience.settings.TierOverrides`. Named tiers are read from the file
only (no ``RTGATE_*`` variables); an ``api_key_env`` key names the variable their key is
read from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rtgate.config.sections import (
    CacheConfig,
    ClassifierConfig,
    CloudConfig,
    LocalConfig,
    TemplatesConfig,
)
from rtgate.config.values import Secret, convert
from rtgate.core.errors import ConfigError
from rtgate.kinds.classifier import ClassifierSection
from rtgate.kinds.emulated import EmulatedSection
from rtgate.kinds.registry import Registry
from rtgate.resilience.settings import TierOverrides

__all__ = ["TierDecl", "read_tiers", "shorthands"]

_OVERRIDES = {f.name for f in dataclasses.fields(TierOverrides)}


@dataclass(slots=True)
class TierDecl:
    """One tier to build: its name, its kind, the kind's section, the resilience overrides,
    and where it was declared (for messages)."""

    name: str
    kind: str
    section: Any
    overrides: TierOverrides = field(default_factory=TierOverrides)
    where: str = "config"


def read_tiers(
    tables: Mapping[str, Any], source: str, env: Mapping[str, str]
) -> dict[str, TierDecl]:
    """The ``[tiers.NAME]`` tables of a file as declarations, every key checked."""
    registry = Registry.discover()
    out: dict[str, TierDecl] = {}
    for name, table in tables.items():
        where = f"{source}: [tiers.{name}]"
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: expected a table of settings")
        if name == "silent" or not name.strip():
            raise ConfigError(f"{where}: {name!r} cannot name a tier")
        out[name] = _read_one(name, dict(table), where, registry, env)
    return out


def _read_one(
    name: str, table: dict[str, Any], where: str, registry: Registry, env: Mapping[str, str]
) -> TierDecl:
    kind_name = table.pop("kind", None)
    if not isinstance(kind_name, str):
        raise ConfigError(
            f"{where}: kind is required (a string); known kinds: {', '.join(registry.names)}"
        )
    try:
        kind = registry.get(kind_name)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    over = {k: convert(TierOverrides, k, table.pop(k), where) for k in _OVERRIDES & set(table)}
    values = {k: convert(kind.section, k, v, where) for k, v in table.items()}
    try:
        section = kind.section(**values)
        if kind.check is not None:
            kind.check(section)
    except ConfigError as e:  # the section's own rules
        raise ConfigError(f"{where}: {e}") from None
    key_env = getattr(section, "api_key_env", None)
    if isinstance(key_env, str) and hasattr(section, "api_key"):
        key = env.get(key_env) or None
        section.api_key = Secret(key) if key else None
    return TierDecl(name, kind_name, section, TierOverrides(**over), where)


def _part(cls: type[Any], section: Any, **changes: Any) -> Any:
    """A ``cls`` with the values ``section`` has for its fields, and ``changes``."""
    fields = dataclasses.fields(cls)
    values = {f.name: getattr(section, f.name) for f in fields if f.name not in changes}
    return cls(**values, **changes)


def shorthands(
    templates: TemplatesConfig,
    classifier: ClassifierConfig,
    cache: CacheConfig,
    local: LocalConfig,
    cloud: CloudConfig,
) -> list[TierDecl]:
    """The tiers the shorthand sections declare (the enabled ones)."""
    out: list[TierDecl] = []
    if templates.enabled:
        out.append(TierDecl("template", "templates", templates, where="[templates]"))
    if classifier.enabled:
        model = classifier.kind or classifier.model
        section = _part(ClassifierSection, classifier, model=model)
        out.append(TierDecl("classifier", "classifier", section, where="[classifier]"))
    if cache.enabled:
        out.append(TierDecl("cache", "cache", cache, where="[cache]"))
    if local.enabled:
        out.append(TierDecl("local", "llama", local, where="[local]"))
    if cloud.remote:
        out.append(TierDecl("cloud", "openai", cloud, where="[cloud]"))
    elif cloud.enabled:
        emulated = _part(  # the model settings are [local]'s: the two tiers share it
            EmulatedSection,
            local,
            profile=cloud.emulate,
            quality=cloud.quality,
            max_tokens=cloud.max_tokens,
            system_prompt=cloud.system_prompt,
        )
        out.append(TierDecl("cloud", "emulated", emulated, where="[cloud]"))
    return out
