"""API keys: hashed storage, O(1) verify, token buckets, per-key caps, the store file."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from rtgate.core.errors import ConfigError, InvalidRequest, KeyLimitExceeded
from rtgate.security.keys import (
    KEY_PREFIX,
    KeyPolicy,
    KeyStore,
    TokenBucket,
)

PEPPER = "p" * 32


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_key_is_stored_as_a_peppered_digest_only(tmp_path: Path) -> None:
    store = KeyStore(PEPPER)
    key, rec = store.create("alice")
    assert key.startswith(KEY_PREFIX) and len(key) >= 40
    assert key not in repr(rec) and key not in json.dumps(rec.to_dict())
    assert store.verify(key) == rec
    path = tmp_path / "keys.json"
    store.save(path)
    text = path.read_text()
    assert key not in text and key[len(KEY_PREFIX) :] not in text
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert KeyStore.load(path, PEPPER).verify(key) == rec
    # a different pepper cannot use the leaked store
    assert KeyStore.load(path, "q" * 32).verify(key) is None


def test_wrong_revoked_and_odd_keys_are_refused() -> None:
    store = KeyStore(PEPPER)
    key, rec = store.create("bob")
    assert store.verify(key[:-1] + ("A" if key[-1] != "A" else "B")) is None
    assert store.verify("") is None
    assert store.verify("sk-" + key) is None
    assert store.verify(KEY_PREFIX + "x" * 10_000) is None
    assert store.revoke(rec.key_id) and not store.revoke("nope")
    assert store.verify(key) is None


def test_pepper_is_required_and_long_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RTGATE_KEY_PEPPER", raising=False)
    with pytest.raises(ConfigError, match="RTGATE_KEY_PEPPER"):
        KeyStore()
    with pytest.raises(ConfigError):
        KeyStore("short")
    monkeypatch.setenv("RTGATE_KEY_PEPPER", PEPPER)
    assert len(KeyStore()) == 0


def test_bad_store_files_raise_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        KeyStore.load(tmp_path / "missing.json", PEPPER)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError):
        KeyStore.load(bad, PEPPER)
    bad.write_text(json.dumps({"keys": [{"key_id": "x"}]}))
    with pytest.raises(ConfigError, match="bad key record"):
        KeyStore.load(bad, PEPPER)
    bad.write_text(
        json.dumps(
            {"keys": [{"key_id": "x", "name": "n", "digest": "d", "policy": {"rate_per_s": -1}}]}
        )
    )
    with pytest.raises(ConfigError):
        KeyStore.load(bad, PEPPER)


def test_token_bucket_refills_at_its_rate() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=2.0, burst=3, clock=clock)
    assert [bucket.take() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take() == pytest.approx(0.5)
    clock.t += 0.5
    assert bucket.take() == 0.0
    clock.t += 100.0  # never more than the burst
    assert [bucket.take() for _ in range(4)][-1] > 0


def test_rate_limit_is_per_key() -> None:
    clock = Clock()
    store = KeyStore(PEPPER, clock=clock)
    _, a = store.create("a", KeyPolicy(rate_per_s=1, burst=2))
    _, b = store.create("b", KeyPolicy(rate_per_s=1, burst=2))
    assert store.take(a) == 0 and store.take(a) == 0
    assert store.take(a) == pytest.approx(1.0)
    assert store.take(b) == 0  # b has its own bucket


def test_budget_and_token_caps() -> None:
    policy = KeyPolicy(max_budget_ms=2000, max_tokens=64)
    policy.check(budget_ms=2000, max_tokens=64)
    policy.check()
    with pytest.raises(KeyLimitExceeded, match="budget_ms 5000 is above this key's limit"):
        policy.check(budget_ms=5000)
    with pytest.raises(InvalidRequest, match="max_tokens 65"):
        policy.check(max_tokens=65)
    KeyPolicy().check(budget_ms=1e9, max_tokens=10**9)  # no caps
    with pytest.raises(ConfigError):
        KeyPolicy(max_tokens=0)


def test_keys_cli_create_list_revoke(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from rtgate.cli.keys import app

    monkeypatch.setenv("RTGATE_KEY_PEPPER", PEPPER)
    store = tmp_path / "keys.json"
    run = CliRunner().invoke
    made = run(app, ["create", "--name", "ci", "--store", str(store), "--max-tokens", "64"])
    assert made.exit_code == 0, made.output
    key = made.output.strip().splitlines()[-1]
    rec = KeyStore.load(store, PEPPER).verify(key)
    assert rec is not None and rec.policy.max_tokens == 64
    listed = run(app, ["list", "--store", str(store)])
    assert rec.key_id in listed.output and key not in listed.output
    assert run(app, ["revoke", rec.key_id, "--store", str(store)]).exit_code == 0
    assert KeyStore.load(store, PEPPER).verify(key) is None
    assert run(app, ["revoke", "nope", "--store", str(store)]).exit_code == 1
    monkeypatch.delenv("RTGATE_KEY_PEPPER")
    assert run(app, ["list", "--store", str(store)]).exit_code == 2
