"""The registry of tier kinds: entry points over the built-in table, and a new kind that
plugs in through an entry point with no edit to the gate, the loader or the assembly."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from rtgate.assembly.build import assemble
from rtgate.config.loader import load_config
from rtgate.core.errors import ConfigError
from rtgate.core.latency import Prior
from rtgate.core.request import Request
from rtgate.core.settings import setting
from rtgate.kinds import BuildContext, Built, Registry, TierInfo, TierKind
from rtgate.kinds.openai import KIND as OPENAI
from rtgate.kinds.registry import BUILTIN
from rtgate.resilience import AdmissionTier
from rtgate.tiers.fake import FakeTier

# -- a vendor's module: a section and a build function, nothing else ------------------------


@dataclass(slots=True)
class FaqSection:
    answer: str = "Our hours are 9 to 5."
    quality: int = setting(70, ge=0, le=100)


def build_faq(section: FaqSection, context: BuildContext) -> Built:
    tier = FakeTier(context.name, section.quality, [section.answer])
    info = TierInfo(tier.name, "faq", tier.quality, tier.delegable, "answers from a table")
    return Built(tier, info, Prior(1.0, 1.0))


FAQ = TierKind("faq", FaqSection, build_faq)
MISNAMED = TierKind("misnamed", FaqSection, lambda s, c: build_faq(s, c.for_tier("other")))

# -- helpers -------------------------------------------------------------------------------


def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry_points: str) -> None:
    """A throwaway installed distribution whose metadata declares ``entry_points``."""
    dist = tmp_path / "site" / "vendor_kinds-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: vendor-kinds\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[rtgate.tiers]\n{entry_points}\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rtgate.toml"
    path.write_text("[local]\nenabled = false\n[cloud]\nenabled = false\n" + text)
    return path


# -- tests ---------------------------------------------------------------------------------


def test_builtin_kinds_are_found_without_installed_entry_points() -> None:
    registry = Registry.discover()
    assert set(BUILTIN) <= set(registry.names)
    for name in BUILTIN:
        assert registry.get(name).name == name
    assert registry.get("openai") is OPENAI


def test_an_unknown_kind_is_a_config_error_naming_the_known_kinds(tmp_path: Path) -> None:
    path = write(tmp_path, '[tiers.cloud-a]\nkind = "opneai"\n')
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    msg = str(err.value)
    assert "[tiers.cloud-a]" in msg and "unknown tier kind 'opneai'" in msg
    assert "did you mean 'openai'?" in msg
    assert all(name in msg for name in BUILTIN)
    with pytest.raises(ConfigError, match=r"\[tiers.x\]: kind is required.*known kinds: cache"):
        load_config(write(tmp_path, "[tiers.x]\nquality = 3\n"), env={})


async def test_a_new_kind_plugs_in_through_an_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = '[tiers.faq]\nkind = "faq"\nanswer = "Open 24/7."\nquality = 60\ncapacity = 2\n'
    with pytest.raises(ConfigError, match="unknown tier kind 'faq'"):
        load_config(write(tmp_path, text), env={})  # not installed yet
    install(tmp_path, monkeypatch, f"faq = {__name__}:FAQ")
    asm = assemble(load_config(write(tmp_path, text), env={}))
    assert [t.name for t in asm.gate.tiers] == ["faq", "template"]
    faq = asm.gate.by_name["faq"]
    assert isinstance(faq, AdmissionTier) and faq.limiter.capacity == 2  # an override
    assert isinstance(faq.inner, FakeTier) and faq.quality == 60
    assert asm.gate.models["faq"].predict_ttft() == 1.0  # the kind's prior
    assert asm.tiers[0].kind == "faq" and asm.cloud_mode == "off"
    async with asm.gate:
        res = await asm.gate.answer(Request("when are you open?", delegate=False), 100)
    assert res.route == "faq" and res.text == "Open 24/7."
    with pytest.raises(ConfigError, match=r"\[tiers.faq\]: quality must be <= 100"):
        load_config(write(tmp_path, '[tiers.faq]\nkind = "faq"\nquality = 500\n'), env={})


def test_a_stale_entry_point_falls_back_to_the_built_in_kind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(tmp_path, monkeypatch, "openai = rtgate.no_such_module:KIND\nghost = nowhere:KIND")
    registry = Registry.discover()
    assert registry.get("openai") is OPENAI
    with pytest.raises(ConfigError, match=r"tier kind 'ghost' cannot be loaded: nowhere:KIND"):
        registry.get("ghost")


def test_a_kind_must_name_its_tier_as_configured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(tmp_path, monkeypatch, f"misnamed = {__name__}:MISNAMED")
    cfg = load_config(write(tmp_path, '[tiers.mine]\nkind = "misnamed"\n'), env={})
    with pytest.raises(ConfigError, match="built a tier named 'other', not 'mine'"):
        assemble(cfg)
