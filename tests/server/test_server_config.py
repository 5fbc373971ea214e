"""Configuration: TOML file + RTGATE_* environment, typed, with clear errors."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from rtgate.config.loader import Config, Secret, load_config
from rtgate.core.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rtgate.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_need_no_file_and_run_embedded() -> None:
    cfg = load_config(env={})
    assert cfg == Config()
    assert cfg.source is None
    assert cfg.local.enabled and cfg.local.model == "gemma3-270m"
    assert cfg.cloud.enabled and not cfg.cloud.remote  # the emulated cloud tier
    assert cfg.server.models == ["auto"] and cfg.delegation.backend == "inprocess"


def test_file_then_environment_override(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        [server]
        port = 9000
        models = ["auto", "fast"]
        [gate]
        hedge = true
        followup_budget_ms = 5000
        [local]
        enabled = false
        """,
    )
    env = {
        "RTGATE_SERVER_PORT": "9100",
        "RTGATE_GATE_SAFETY_MS": "2.5",
        "RTGATE_SERVER_MODELS": "auto, big",
        "RTGATE_LOCAL_ENABLED": "yes",
        "RTGATE_CACHE": "/tmp/models",  # another module's variable: not ours, ignored
        "RTGATE_DELEGATION_BACKEND": "redis",
    }
    cfg = load_config(path, env=env)
    assert cfg.source == str(path)
    assert cfg.server.port == 9100  # the environment wins
    assert cfg.server.models == ["auto", "big"]
    assert cfg.gate.hedge is True and cfg.gate.followup_budget_ms == 5000.0
    assert cfg.gate.safety_ms == 2.5
    assert cfg.local.enabled is True
    assert cfg.delegation.backend == "redis"


def test_config_file_from_environment(tmp_path: Path) -> None:
    path = write(tmp_path, "[server]\nport = 7000\n")
    assert load_config(env={"RTGATE_CONFIG": str(path)}).server.port == 7000


def test_remote_cloud_with_key_from_environment_never_printed(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        [cloud]
        base_url = "https://user:pw@api.example.com/v1"
        model = "llama-3.3-70b"
        api_key_env = "MY_KEY"
        """,
    )
    cfg = load_config(path, env={"MY_KEY": "sk-very-secret"})
    assert cfg.cloud.remote
    assert cfg.cloud.api_key == Secret("sk-very-secret")
    assert cfg.cloud.api_key is not None and cfg.cloud.api_key.reveal() == "sk-very-secret"
    for text in (repr(cfg), str(cfg.redacted()), str(cfg.cloud.api_key)):
        assert "sk-very-secret" not in text
    red = cfg.redacted()["cloud"]
    assert red["base_url"] == "https://***@api.example.com/v1"
    assert red["api_key_set"] is True


def test_default_key_variable(tmp_path: Path) -> None:
    env = {
        "RTGATE_CLOUD_BASE_URL": "http://127.0.0.1:8000/v1",
        "RTGATE_CLOUD_MODEL": "m",
        "RTGATE_CLOUD_API_KEY": "k",
    }
    cfg = load_config(env=env)
    assert cfg.cloud.api_key is not None and cfg.cloud.api_key.reveal() == "k"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[server]\nport = 'x'\n", "[server]: port: expected an integer, got 'x'"),
        ("[server]\nport = 70000\n", "port must be <= 65535, got 70000"),
        ("[server]\nprot = 1\n", "unknown key 'prot' (did you mean 'port'?)"),
        ("[sever]\nport = 1\n", "unknown section [sever] (did you mean 'server'?)"),
        ("[gate]\nhedge = 1\n", "hedge: expected true or false, got 1"),
        ("[gate]\nsafety_ms = nan\n", "expected a finite number"),
        ("[local]\nmodel = 'gpt'\n", "model must be one of gemma3-270m, smollm2; got 'gpt'"),
        ("[server]\nmodels = [1]\n", "expected a list of strings"),
        ("[cloud]\napi_key = 'sk'\n", "api_key is not read from files"),
        ("[cloud]\nbase_url = 'http://x/v1'\n", "cloud.model is required"),
        ("[cloud]\nmodel = 'm'\n", "cloud.model is set but cloud.base_url is not"),
        ("[cloud]\nbase_url = 'ftp://x'\nmodel = 'm'\n", "must be an http(s) URL"),
        ("[delegation]\nbackend = 'kafka'\n", "expected one of inprocess, redis, nats"),
        ("[delegation]\nqueue_size = 0\n", "delegation.queue_size must be >= 1"),
        ("[server]\ndefault_budget_ms = 5000\nmax_budget_ms = 100\n", "is above"),
        ("[local]\npath = '/no/such.gguf'\n", "no such model file"),
        ("server = 1\n", "must be a [server] table"),
        ("[server\n", "invalid TOML"),
    ],
)
def test_file_errors_name_the_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert message in str(info.value)
    assert str(path) in str(info.value) or "config" in str(info.value)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RTGATE_SERVER_PORT": "eighty"}, "RTGATE_SERVER_PORT: port: expected an integer"),
        ({"RTGATE_GATE_HEDGE": "maybe"}, "RTGATE_GATE_HEDGE: hedge: expected true or false"),
        ({"RTGATE_SERVER_PROT": "1"}, "unknown key 'prot' (did you mean 'port'?)"),
    ],
)
def test_environment_errors_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=None) as info:
        load_config(env=env)
    assert message in str(info.value)


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match=r"config file not found: /no/such/rtgate\.toml"):
        load_config("/no/such/rtgate.toml", env={})


def test_empty_env_value_unsets_an_optional_key(tmp_path: Path) -> None:
    path = write(tmp_path, "[server]\nmax_connections = 10\n")
    assert load_config(path, env={}).server.max_connections == 10
    assert (
        load_config(path, env={"RTGATE_SERVER_MAX_CONNECTIONS": ""}).server.max_connections is None
    )


def test_gate_section_covers_every_gate_knob() -> None:
    from rtgate.gate import GateConfig

    cfg = load_config(env={"RTGATE_GATE_HEDGE": "true", "RTGATE_GATE_INLINE_MS": "0.5"})
    gc = cfg.gate_config()  # raises if GateConfig grew a knob the section lacks
    assert gc.hedge is True and gc.inline_ms == 0.5
    assert gc.placeholder == cfg.gate.placeholder
    defaults = GateConfig()
    assert Config().gate_config().safety_ms == defaults.safety_ms


def test_gate_section_is_gate_config_plus_the_servers_keys() -> None:
    from rtgate.config.sections import GateSection
    from rtgate.gate import GateConfig

    assert issubclass(GateSection, GateConfig)
    section = {f.name: f for f in dataclasses.fields(GateSection)}
    for f in dataclasses.fields(GateConfig):
        if f.name != "placeholder":  # the server's own default text
            assert section[f.name].default == f.default, f.name
        assert section[f.name].metadata == f.metadata, f.name  # bounds declared once
    assert {"max_jobs", "warmup", "placeholder_zh"} <= set(section)
    with pytest.raises(
        ConfigError, match=r"RTGATE_GATE_MAX_HEDGE_RATE: max_hedge_rate must be <= 1"
    ):
        load_config(env={"RTGATE_GATE_MAX_HEDGE_RATE": "2"})
