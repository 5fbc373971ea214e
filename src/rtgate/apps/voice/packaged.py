"""Files shipped with the voice app: the web page, the caller clips, the evaluation sets."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["data_path"]


def data_path(*parts: str) -> Path:
    """A file shipped in ``rtgate/apps/voice/data``."""
    return Path(str(resources.files("rtgate.apps.voice").joinpath("data", *parts)))
