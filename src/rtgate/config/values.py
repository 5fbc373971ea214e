"""Typed configuration values: settings with bounds, conversion from TOML and environment
strings, and secrets that do not print.

A setting is a dataclass field made with :func:`~rtgate.core.settings.setting` (its default
and bounds, declared where the setting is used);
:func:`convert` turns a raw value into the field's annotated type (``bool``, ``int``,
``float``, ``str``, ``list[str]``, a ``Literal``, optionally ``| None``) and checks the
bounds, raising :class:`~rtgate.core.errors.ConfigError` that names where the value came from.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Mapping
from typing import Any

from rtgate.core.errors import ConfigError
from rtgate.core.settings import Secret, setting

__all__ = ["Secret", "convert", "hint", "setting"]


def hint(word: str, options: Mapping[str, Any] | list[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``options``, or nothing."""
    close = difflib.get_close_matches(word, list(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def convert(cls: type[Any], key: str, value: Any, where: str, from_env: bool = False) -> Any:
    """``value`` as the type of field ``key`` of dataclass ``cls``, within its bounds.
    ``from_env``: the value is an environment string (numbers, booleans and comma-separated
    lists are parsed). ``where`` prefixes error messages (the file and section, or the
    variable)."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    f = fields.get(key)
    if f is None or f.metadata.get("from_file") is False:
        allowed = [k for k, v in fields.items() if v.metadata.get("from_file") is not False]
        raise ConfigError(f"{where}: unknown key {key!r}{hint(key, allowed)}")
    kind = typing.get_type_hints(cls)[key]
    try:
        out = _coerce(kind, value, from_env)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {key}: {e}") from None
    _validate(f.metadata, key, out, where)
    return out


def _coerce(hint: Any, value: Any, from_env: bool) -> Any:
    optional = False
    if isinstance(hint, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional, hint = True, args[0]
    if optional and (value is None or value == ""):
        return None
    if typing.get_origin(hint) is typing.Literal:
        choices = typing.get_args(hint)
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(map(str, choices))}; got {value!r}")
        return value
    if typing.get_origin(hint) is list:
        if from_env and isinstance(value, str):
            return [s.strip() for s in value.split(",") if s.strip()]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise TypeError(f"expected a list of strings, got {value!r}")
        return list(value)
    if hint is bool:
        if from_env and isinstance(value, str):
            low = value.strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
        if not isinstance(value, bool):
            raise TypeError(f"expected true or false, got {value!r}")
        return value
    if hint is int or hint is float:
        if from_env and isinstance(value, str):
            try:
                value = hint(value.strip())
            except ValueError:
                kind = "an integer" if hint is int else "a number"
                raise ValueError(f"expected {kind}, got {value!r}") from None
        ok = isinstance(value, int) if hint is int else isinstance(value, int | float)
        if isinstance(value, bool) or not ok:
            kind = "an integer" if hint is int else "a number"
            raise TypeError(f"expected {kind}, got {value!r}")
        if hint is float and not math.isfinite(value):
            raise ValueError(f"expected a finite number, got {value!r}")
        return hint(value)
    if hint is str:
        if not isinstance(value, str):
            raise TypeError(f"expected a string, got {value!r}")
        return value
    raise TypeError(f"unsupported setting type {hint!r}")  # pragma: no cover - a bug here


def _validate(meta: Mapping[str, Any], key: str, value: Any, where: str) -> None:
    if value is None:
        return
    if meta.get("ge") is not None and value < meta["ge"]:
        raise ConfigError(f"{where}: {key} must be >= {meta['ge']:g}, got {value}")
    if meta.get("gt") is not None and value <= meta["gt"]:
        raise ConfigError(f"{where}: {key} must be > {meta['gt']:g}, got {value}")
    if meta.get("le") is not None and value > meta["le"]:
        raise ConfigError(f"{where}: {key} must be <= {meta['le']:g}, got {value}")
    if meta.get("choices") and value not in meta["choices"]:
        choices = ", ".join(meta["choices"])
        raise ConfigError(f"{where}: {key} must be one of {choices}; got {value!r}")
