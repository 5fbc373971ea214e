"""Tiers named in the configuration: any number of one kind, each built by its kind and
wrapped in its policy before the gate exists (no model is loaded here)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from rtgate.assembly import build
from rtgate.assembly.build import assemble
from rtgate.config.loader import Config, load_config
from rtgate.core.errors import ConfigError
from rtgate.gate import Gate
from rtgate.resilience import AdmissionTier, BreakerTier, RetryTier, TierWrapper
from rtgate.tiers.base import Tier
from rtgate.tiers.emulated import EmulatedLatency
from rtgate.tiers.llm import LLMTier
from rtgate.tiers.remember import RememberAnswers

TWO_CLOUDS = """
[local]
enabled = false
[cloud]
enabled = false

[tiers.cloud-a]
kind = "openai"
base_url = "https://user:pw@a.example.com/v1"
model = "big"
quality = 80
ttft_p99_ms = 900

[tiers.cloud-b]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
model = "small"
quality = 70
api_key_env = "B_KEY"
breaker = false
retries = 1
capacity = 4
"""


def bare(tier: Tier) -> Tier:
    return tier.innermost if isinstance(tier, TierWrapper) else tier


def load(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> Config:
    path = tmp_path / "rtgate.toml"
    path.write_text(text)
    return load_config(path, env=env or {})


async def test_two_named_tiers_of_one_kind(tmp_path: Path) -> None:
    cfg = load(tmp_path, TWO_CLOUDS, {"B_KEY": "sk-secret-b"})
    asm = assemble(cfg)
    try:
        assert [t.name for t in asm.gate.tiers] == ["cloud-a", "cloud-b", "template"]
        a, b = asm.gate.by_name["cloud-a"], asm.gate.by_name["cloud-b"]
        assert isinstance(a, AdmissionTier) and isinstance(a.inner, RetryTier)
        assert isinstance(a.inner.inner, BreakerTier) and a.inner.inner.probe is not None
        assert isinstance(b, AdmissionTier) and isinstance(b.inner, LLMTier)  # overridden
        assert b.limiter.capacity == 4 and a.limiter is not b.limiter
        backends = [bare(t).backend for t in (a, b)]  # type: ignore[attr-defined]
        assert [be.model for be in backends] == ["big", "small"]
        assert asm.gate.models["cloud-a"].predict_ttft() == 900.0
        assert asm.cloud_mode == "remote" and not asm.notes
        assert [i.kind for i in asm.tiers] == ["remote", "remote", "template"]
        assert "pw" not in asm.tiers[0].label
    finally:
        await asm.gate.aclose()
    shown = cfg.redacted()["tiers"]
    assert shown["cloud-b"]["api_key_set"] is True and shown["cloud-a"]["api_key_set"] is False
    assert shown["cloud-a"]["base_url"] == "https://***@a.example.com/v1"
    assert shown["cloud-b"]["retries"] == 1 and "sk-secret-b" not in repr(cfg.redacted())


def test_a_named_tier_is_checked_like_any_section(tmp_path: Path) -> None:
    bad_url = '[tiers.x]\nkind = "openai"\nbase_url = "ftp://h"\nmodel = "m"\n'
    with pytest.raises(ConfigError, match=r"\[tiers.x\]: base_url must be an http\(s\) URL"):
        load(tmp_path, bad_url)
    with pytest.raises(ConfigError, match=r"\[tiers.x\]: base_url is required"):
        load(tmp_path, '[tiers.x]\nkind = "openai"\n')
    with pytest.raises(ConfigError, match=r"\[tiers.x\]: unknown key 'emulate'"):
        load(tmp_path, '[tiers.x]\nkind = "llama"\nemulate = "cloud-70b"\n')
    with pytest.raises(ConfigError, match=r"\[tiers.x\]: retries must be <= 5"):
        load(tmp_path, '[tiers.x]\nkind = "templates"\nretries = 9\n')
    with pytest.raises(ConfigError, match="'silent' cannot name a tier"):
        load(tmp_path, '[tiers.silent]\nkind = "templates"\n')


async def test_a_named_tier_takes_the_place_of_the_shorthand(tmp_path: Path) -> None:
    text = '[tiers.cloud]\nkind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n'
    asm = assemble(load(tmp_path, text))
    try:
        assert [t.name for t in asm.gate.tiers] == ["cloud", "local", "template"]
        assert isinstance(bare(asm.gate.by_name["cloud"]), LLMTier)
        assert asm.cloud_mode == "remote"
    finally:
        await asm.gate.aclose()


async def test_an_emulated_tier_shares_the_model_of_a_llama_tier(tmp_path: Path) -> None:
    text = (
        '[cloud]\nenabled = false\n[local]\nenabled = false\n[tiers.fast]\nkind = "llama"\n'
        '[tiers.deep]\nkind = "emulated"\nprofile = "local-8b"\nquality = 60\n'
    )
    asm = assemble(load(tmp_path, text))
    try:
        fast, deep = bare(asm.gate.by_name["fast"]), bare(asm.gate.by_name["deep"])
        assert isinstance(deep, EmulatedLatency) and deep.profile.name == "local-8b"
        assert deep.inner.backend is fast.backend  # type: ignore[attr-defined]
        assert any("deep tier is EMULATED" in n for n in asm.notes)
    finally:
        await asm.gate.aclose()


async def test_resilience_is_wrapped_before_the_gate_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    given: list[list[Tier]] = []

    class Recording(Gate):
        def __init__(self, tiers: Iterable[Tier], **kwargs: Any) -> None:
            given.append(list(tiers))
            super().__init__(given[-1], **kwargs)

    monkeypatch.setattr(build, "Gate", Recording)
    asm = assemble(Config())
    try:
        first = {t.name: t for t in given[0]}
        assert isinstance(first["local"], AdmissionTier)
        assert isinstance(first["cloud"], AdmissionTier)
        assert all(asm.gate.by_name[name] is t for name, t in first.items())
    finally:
        await asm.gate.aclose()


async def test_the_cache_remembers_the_delegable_tiers() -> None:
    asm = assemble(load_config(env={"RTGATE_CACHE_ENABLED": "1"}))
    try:
        cloud = asm.gate.by_name["cloud"]
        assert isinstance(cloud, AdmissionTier)
        assert isinstance(cloud.innermost, RememberAnswers)  # under the resilience layers
        assert cloud.innermost.cache is bare(asm.gate.by_name["cache"])
        local = asm.gate.by_name["local"]
        assert isinstance(local, AdmissionTier) and isinstance(local.inner, LLMTier)
    finally:
        await asm.gate.aclose()
