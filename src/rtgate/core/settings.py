"""Settings with bounds, and secrets that do not print.

A setting is a dataclass field that carries its default and the limits a
configuration loader checks it against (``ge``, ``gt``, ``le``, ``choices``).

It lives on the floor everything stands on so that any package can declare its settings
once, where they are used (the gate's :class:`~rtgate.gate.GateConfig`, a tier kind's
section); :mod:`rtgate.config` reads and checks them.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

__all__ = ["Secret", "setting"]


class Secret:
    """A value that must not be printed; ``reveal()`` returns it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('**********')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


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
