"""Properties of the configuration parser: any file or environment gives a Config or a
ConfigError that names the place, never another exception."""

from __future__ import annotations

import dataclasses
import os
import tempfile
import typing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtgate.config.loader import Config, load_config
from rtgate.core.errors import ConfigError
from rtgate.kinds.registry import BUILTIN, Registry
from rtgate.resilience.settings import TierOverrides

SECTIONS = {
    f.name: typing.get_type_hints(Config)[f.name]
    for f in dataclasses.fields(Config)
    if f.name not in ("source", "tiers")  # [tiers.NAME] tables: see tier_tables()
}
KEYS = {name: [f.name for f in dataclasses.fields(cls)] for name, cls in SECTIONS.items()}
KINDS = {name: Registry.discover().get(name).section for name in BUILTIN}
OVERRIDES = [f.name for f in dataclasses.fields(TierOverrides)]

_scalar = st.one_of(
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.text(max_size=6), max_size=3),
    st.lists(st.integers(), max_size=2),
)


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if v != v:
            return "nan"
        if v in (float("inf"), float("-inf")):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return '"' + v.encode("unicode_escape").decode().replace('"', '\\"') + '"'
    assert isinstance(v, list)
    return "[" + ", ".join(_toml_value(x) for x in v) + "]"


@st.composite
def toml_files(draw: st.DrawFn) -> str:
    out = []
    names = [*SECTIONS, "bogus"]
    for section in draw(st.lists(st.sampled_from(names), unique=True, max_size=4)):
        keys = [*KEYS.get(section, []), "nope"]
        out.append(f"[{section}]")
        for key in draw(st.lists(st.sampled_from(keys), unique=True, max_size=5)):
            out.append(f"{key} = {_toml_value(draw(_scalar))}")
    out += draw(tier_tables())
    return "\n".join(out) + "\n"


@st.composite
def tier_tables(draw: st.DrawFn) -> list[str]:
    """``[tiers.NAME]`` tables of any kind (or none, or a bogus one) and any keys."""
    out = []
    for name in draw(
        st.lists(st.sampled_from(["a", "cloud", "silent", "x-y"]), unique=True, max_size=2)
    ):
        kind = draw(st.sampled_from([*KINDS, "bogus", None]))
        out.append(f"[tiers.{name}]")
        if kind is not None:
            out.append(f'kind = "{kind}"')
        fields = [f.name for f in dataclasses.fields(KINDS[kind])] if kind in KINDS else []
        for key in draw(
            st.lists(st.sampled_from([*fields, *OVERRIDES, "nope"]), unique=True, max_size=4)
        ):
            out.append(f"{key} = {_toml_value(draw(_scalar))}")
    return out


def _load_text(text: str, env: dict[str, str]) -> Config | ConfigError:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "rtgate.toml"
        path.write_text(text, encoding="utf-8")
        try:
            return load_config(path, env=env)
        except ConfigError as e:
            assert str(e), "a ConfigError must say what is wrong"
            return e


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(toml_files())
def test_structured_files_load_or_fail_clearly(text: str) -> None:
    out = _load_text(text, {})
    if isinstance(out, Config):
        assert out.server.default_budget_ms <= out.server.max_budget_ms


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=200))
def test_any_text_file_loads_or_fails_clearly(text: str) -> None:
    _load_text(text, {})


@st.composite
def environments(draw: st.DrawFn) -> dict[str, str]:
    env = {}
    for section in draw(st.lists(st.sampled_from(list(SECTIONS)), max_size=3)):
        key = draw(st.sampled_from(KEYS[section]))
        value = draw(st.text(st.characters(codec="utf-8", exclude_characters="\0"), max_size=12))
        env[f"RTGATE_{section.upper()}_{key.upper()}"] = value  # "~nosuchuser" included
    return env


@settings(max_examples=200, deadline=None)
@given(environments())
def test_any_environment_loads_or_fails_clearly(env: dict[str, str]) -> None:
    try:
        cfg = load_config(None, env=env)
    except ConfigError as e:
        assert any(var in str(e) for var in env) or "config" in str(e)
        return
    assert isinstance(cfg, Config)
    assert os.environ.get("RTGATE_CONFIG") is None or cfg.source is not None


@pytest.mark.parametrize(
    "var",
    [
        "RTGATE_TEMPLATES_FILE",
        "RTGATE_LOCAL_PATH",
        "RTGATE_CLASSIFIER_DATA_DIR",
        "RTGATE_SECURITY_API_KEYS_FILE",
    ],
)
def test_unknown_home_in_a_path_is_a_config_error(var: str) -> None:
    with pytest.raises(ConfigError, match=var):
        load_config(None, env={var: "~nosuchuser/file"})


def test_unknown_home_in_a_file_names_the_file_and_section(tmp_path: Path) -> None:
    path = tmp_path / "rtgate.toml"
    path.write_text('[templates]\nfile = "~nosuchuser/t.json"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"rtgate\.toml: \[templates\]: templates\.file"):
        load_config(path, env={})
