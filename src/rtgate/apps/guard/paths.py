"""Where the guard keeps its files for a user: a path an environment variable names, else
one under ``$XDG_DATA_HOME/rtgate`` (``~/.local/share/rtgate``)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["user_data_path"]


def user_data_path(env: str, name: str) -> Path:
    """``$env`` when set, else ``name`` under the user's rtgate data folder."""
    given = os.environ.get(env)
    if given:
        return Path(given)
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "rtgate" / name
