"""Settings with bounds: a dataclass field that carries its default and the limits a
configuration loader checks it against (``ge``, ``gt``, ``le``, ``choices``).

It lives on the floor everything stands on so that any package can declare its settings
once, where they are used (the gate's :class:`~rtgate.gate.GateConfig`, a tier kind's
section); :mod:`rtgate.config` reads and checks them.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

__all__ = ["setting"]


def setting(
    default: Any,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    choices: tuple[str, ...] | None = None,
) -> Any:
    """A dataclass field with a default and the bounds it is checked against."""
    return field(default=default, metadata={"ge": ge, "gt": gt, "le": le, "choices": choices})
