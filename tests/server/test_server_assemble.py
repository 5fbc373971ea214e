"""Building the gate from a config, and warming it up (no model is loaded here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtgate.assembly.build import Assembly, assemble, build_gate, warm_up
from rtgate.config.loader import Config, load_config
from rtgate.core.errors import ConfigError
from rtgate.core.latency import Prior
from rtgate.gate import Gate
from rtgate.resilience import AdmissionTier, BreakerTier, RetryTier, TierWrapper
from rtgate.tiers.base import Tier
from rtgate.tiers.emulated import EmulatedLatency
from rtgate.tiers.fake import FakeTier


def bare(tier: Tier) -> Tier:
    """The tier under its resilience wrappers."""
    return tier.innermost if isinstance(tier, TierWrapper) else tier


async def test_default_chain_emulates_the_cloud_and_says_so() -> None:
    asm = assemble(Config())
    try:
        assert [t.name for t in asm.gate.tiers] == ["cloud", "local", "template"]
        assert asm.cloud_mode == "emulated"
        cloud = bare(asm.gate.by_name["cloud"])
        assert isinstance(cloud, EmulatedLatency) and cloud.delegable
        assert cloud.profile.name == "cloud-70b"
        local = bare(asm.gate.by_name["local"])
        assert cloud.inner.backend is local.backend  # type: ignore[attr-defined]
        assert any("EMULATED" in n for n in asm.notes)
        assert asm.tiers[0].kind == "emulated" and "cloud-70b" in asm.tiers[0].label
        assert asm.gate.config.placeholder == Config().gate.placeholder
    finally:
        await asm.gate.aclose()  # no model was loaded: nothing ran yet


async def test_remote_cloud_is_an_openai_compatible_backend() -> None:
    env = {
        "RTGATE_CLOUD_BASE_URL": "http://127.0.0.1:9/v1",
        "RTGATE_CLOUD_MODEL": "big",
        "RTGATE_CLOUD_TTFT_P99_MS": "900",
        "RTGATE_LOCAL_ENABLED": "false",
        "RTGATE_CLOUD_API_KEY": "sk-x",
    }
    asm = assemble(load_config(env=env))
    try:
        assert asm.cloud_mode == "remote" and not asm.notes
        cloud = asm.gate.by_name["cloud"]
        backend = bare(cloud).backend  # type: ignore[attr-defined]
        assert backend.base_url == "http://127.0.0.1:9/v1" and backend.model == "big"
        assert asm.gate.models["cloud"].predict_ttft() == 900.0  # the configured prior
        assert [t.name for t in asm.gate.tiers] == ["cloud", "template"]
    finally:
        await asm.gate.aclose()


async def test_resilience_wraps_the_model_tiers_by_default() -> None:
    asm = assemble(Config())
    try:
        local, cloud = asm.gate.by_name["local"], asm.gate.by_name["cloud"]
        assert isinstance(local, AdmissionTier) and local.limiter.capacity == 1
        assert isinstance(cloud, AdmissionTier) and cloud.limiter.capacity == 32
        assert cloud.limiter is not local.limiter  # delegated jobs are not shed by inline ones
        retry = cloud.inner
        assert isinstance(retry, RetryTier) and retry.attempts == 2
        breaker = retry.inner
        assert isinstance(breaker, BreakerTier) and breaker.breaker.config.min_calls == 10
        assert breaker.probe is None  # the emulated cloud is the local model: not probed
        assert isinstance(asm.gate.by_name["template"], FakeTier | Tier)
        assert not isinstance(asm.gate.by_name["template"], TierWrapper)
    finally:
        await asm.gate.aclose()
    env = {
        "RTGATE_CLOUD_BASE_URL": "http://127.0.0.1:9/v1",
        "RTGATE_CLOUD_MODEL": "big",
        "RTGATE_RESILIENCE_LOCAL_CAPACITY": "2",
        "RTGATE_RESILIENCE_CLOUD_RETRIES": "1",
    }
    asm = assemble(load_config(env=env))
    try:
        local, cloud = asm.gate.by_name["local"], asm.gate.by_name["cloud"]
        assert isinstance(local, AdmissionTier) and local.limiter.capacity == 2
        assert isinstance(cloud, AdmissionTier) and isinstance(cloud.inner, BreakerTier)
        assert cloud.inner.probe is not None  # a remote cloud is health-probed while open
    finally:
        await asm.gate.aclose()
    off = assemble(load_config(env={"RTGATE_RESILIENCE_ENABLED": "false"}))
    assert not any(isinstance(t, TierWrapper) for t in off.gate.tiers)
    await off.gate.aclose()


async def test_templates_only_and_nothing_at_all(tmp_path: Path) -> None:
    cfg = load_config(env={"RTGATE_LOCAL_ENABLED": "0", "RTGATE_CLOUD_ENABLED": "0"})
    gate = build_gate(cfg)
    assert [t.name for t in gate.tiers] == ["template"]
    cfg.templates.enabled = False
    with pytest.raises(ConfigError, match="no tier is enabled"):
        assemble(cfg)


class BrokenWarmup(FakeTier):
    async def warmup(self) -> None:
        raise ConnectionError("remote unreachable")


async def test_warm_up_survives_a_failing_tier() -> None:
    gate = Gate(
        [BrokenWarmup("cloud", 80, delegable=True), FakeTier("local", 50, ["hi"])],
        priors={"cloud": Prior(1800, 1800)},
    )
    asm = Assembly.of(gate)
    async with gate:
        status = await warm_up(asm, budget_ms=1000)
    assert status["local"] == "ok"
    assert "ConnectionError: remote unreachable" in status["cloud"]
    assert gate.warm and asm.warm == status and asm.warmup_ms is not None
    assert gate.models["local"].ttft.count == 1  # the healthy tier was still probed


@pytest.mark.looptime
async def test_cloud_answers_are_remembered_for_single_turn_requests() -> None:
    from rtgate.core.request import Message, Request
    from rtgate.tiers.cache import CacheTier, ExactCache
    from rtgate.tiers.remember import RememberAnswers

    cache = CacheTier(ExactCache(), quality=85)
    cloud = RememberAnswers(FakeTier("cloud", 80, ["deep", " answer"], ttft_ms=300), cache)
    gate = Gate([cache, cloud], priors={"cloud": Prior(400, 400)})
    async with gate:
        first = await gate.answer(Request("What is my  LIMIT?"), 1000)
        await cloud.drain()
        again = await gate.answer(Request("what is my limit"), 1000)  # normalised: same key
        turns = (Message("user", "hi"), Message("assistant", "yo"), Message("user", "why?"))
        await gate.answer(Request("why?", messages=turns), 1000)
        await cloud.drain()
        multi = await gate.answer(Request("why?"), 1000)
    assert first.route == "cloud"
    assert again.route == "cache" and again.text == "deep answer"
    assert again.data[0]["cache"]["origin"] == "cloud"
    assert multi.route == "cloud"  # a multi-turn answer depends on the turns: not cached


@pytest.mark.slow
async def test_classifier_and_cache_sections_build_their_tiers() -> None:
    env = {
        "RTGATE_CACHE_ENABLED": "1",
        "RTGATE_CLASSIFIER_ENABLED": "1",
        "RTGATE_LOCAL_ENABLED": "0",
        "RTGATE_CLOUD_ENABLED": "0",
    }
    asm = assemble(load_config(env=env))
    assert [t.name for t in asm.gate.tiers] == ["cache", "classifier", "template"]
    from rtgate.core.request import Request

    async with asm.gate:
        res = await asm.gate.answer(Request("我的卡丢了怎么办", delegate=False), 100)
    assert res.route == "classifier" and res.data[0]["intent"] == "card_loss"


async def test_the_gate_judge_delegates_a_multi_part_ask_the_classifier_answered() -> None:
    from rtgate.core.request import Request

    env = {
        "RTGATE_CLASSIFIER_ENABLED": "1",
        "RTGATE_TEMPLATES_ENABLED": "0",
        "RTGATE_LOCAL_ENABLED": "0",
        "RTGATE_GATE_JUDGE": "cards",
    }
    asm = assemble(load_config(env=env))
    assert asm.gate.judge is not None and asm.gate.judge.threshold > 0
    ask = "我的卡丢了，挂失以后自动还款还会扣吗？年费退不退？补卡要多久？"
    async with asm.gate:
        simple = await asm.gate.answer(Request("我的卡丢了怎么办"), 100)
        multi = await asm.gate.answer(Request(ask), 100)
    assert simple.route == "classifier" and simple.job_id is None
    assert simple.trace.confidence is not None and not simple.trace.partial
    assert multi.route == "classifier" and multi.trace.partial  # a keyword matched
    assert multi.job_id is not None and multi.trace.delegated_to == "cloud"
    assert multi.trace.abstained and "intents" in multi.trace.abstained


def test_an_unknown_judge_folder_is_a_config_error(tmp_path: Path) -> None:
    env = {"RTGATE_GATE_JUDGE": str(tmp_path), "RTGATE_LOCAL_ENABLED": "0"}
    with pytest.raises(ConfigError, match="no judge"):
        assemble(load_config(env=env))
