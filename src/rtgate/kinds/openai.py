"""The ``openai`` kind: a remote model behind an OpenAI-compatible chat API.

Its API key is read from the environment variable named by ``api_key_env``, never from
a file. ``ttft_p99_ms`` is the latency the gate assumes before the tier has answered.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rtgate.core.errors import ConfigError
from rtgate.core.latency import Prior
from rtgate.core.settings import Secret, setting
from rtgate.kinds.base import BuildContext, Built, TierInfo, TierKind
from rtgate.resilience.settings import ResilienceConfig
from rtgate.resilience.wire import TierPolicy
from rtgate.security.redact import redact_url

__all__ = ["KIND", "OpenAISection", "check"]


@dataclass(slots=True)
class OpenAISection:
    """Where the model is (``base_url``, ``model``: both required) and the tier's settings."""

    base_url: str | None = None
    model: str | None = None
    api_key_env: str = "RTGATE_CLOUD_API_KEY"
    api_key: Secret | None = field(default=None, metadata={"from_file": False})
    system_prompt: str | None = None
    timeout_s: float = setting(60.0, gt=0)
    max_tokens: int = setting(256, ge=1)
    quality: int = 80
    ttft_p99_ms: float | None = setting(None, gt=0)
    endpoint: str = setting("chat", choices=("chat", "completions"))  # what warm-up calls
    # connections open at once to this upstream, per worker (each pool: the passthrough's
    # and the gate's own calls); requests past it wait, within their budgets
    max_connections: int = setting(64, ge=1)
    # a passthrough request that cannot be answered in time, unless it says: an error
    # (504/502/503) or the gate's placeholder, marked as such
    on_timeout: str = setting("error", choices=("error", "placeholder"))


def check(section: OpenAISection) -> None:
    """``base_url`` is an http(s) URL and ``model`` is set."""
    url = section.base_url
    if url is None:
        raise ConfigError("base_url is required (the API's root, e.g. https://host/v1)")
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme not in ("http", "https"):
        raise ConfigError(f"base_url must be an http(s) URL, got {redact_url(url)!r}")
    if not section.model:
        raise ConfigError("model is required when base_url is set")


def build(section: OpenAISection, context: BuildContext) -> Built:
    from rtgate.backends.openai_compat import OpenAICompatBackend
    from rtgate.tiers.llm import LLMTier

    check(section)
    assert section.base_url is not None and section.model is not None
    key = section.api_key.reveal() if section.api_key is not None else None
    backend = OpenAICompatBackend(
        section.base_url,
        section.model,
        key,
        timeout_s=section.timeout_s,
        max_connections=section.max_connections,
        on_timeout=section.on_timeout,
        endpoint="completions" if section.endpoint == "completions" else "chat",
    )
    tier = LLMTier(
        backend,
        context.name,
        section.quality,
        delegable=True,
        system_prompt=section.system_prompt,
        few_shot={},
        max_tokens=section.max_tokens,
        style="chat",
    )
    label = f"{section.model} at {redact_url(section.base_url)}"
    prior = None
    if section.ttft_p99_ms is not None:
        p = section.ttft_p99_ms
        prior = Prior(p, p + 20.0 * section.max_tokens)
    return Built(tier, TierInfo(tier.name, "remote", tier.quality, True, label), prior)


def policy(section: OpenAISection, r: ResilienceConfig) -> TierPolicy:
    """A cap, a breaker health-probed while open, and retries (``[resilience] cloud_*``)."""
    return r.cloud_policy(probe=True)


KIND = TierKind("openai", OpenAISection, build, policy, check)
