"""The server's configuration: one loader (TOML file, then ``RTGATE_*`` variables) and one
set of sections, each a dataclass of settings with defaults and bounds.
"""

from rtgate.config.loader import (
    CacheConfig,
    ClassifierConfig,
    CloudConfig,
    Config,
    DelegationSettings,
    GateSection,
    LocalConfig,
    ResilienceConfig,
    Secret,
    SecurityConfig,
    ServerConfig,
    TemplatesConfig,
    load_config,
)

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
