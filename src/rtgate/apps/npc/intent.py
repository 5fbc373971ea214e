"""An NPC *intent*: what a villager will do next, as a small structure the frame logic runs.

The model never drives a frame. It proposes ``{action, target, say}`` ("walk to the well and
greet the player" → ``walk well | Meet you there!``) and the state machine carries it out.
Every tier speaks the same compact line, ``action target | what they say``; templates also
attach the structure as the piece's data. :func:`parse_intent` reads a model's line robustly
(synonyms, stray words, missing parts) and falls back to a safe idle intent.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ACTIONS",
    "IDLE",
    "PLACES",
    "Intent",
    "intent_from_data",
    "parse_intent",
]

ACTIONS = ("idle", "talk", "walk", "follow", "work", "flee")
PLACES = ("player", "well", "market", "forge", "gate", "home")

# what small models write instead of the action words we asked for
_ACTION_SYNONYMS = {
    "go": "walk",
    "goes": "walk",
    "move": "walk",
    "meet": "walk",
    "run": "flee",
    "hide": "flee",
    "escape": "flee",
    "say": "talk",
    "tell": "talk",
    "greet": "talk",
    "answer": "talk",
    "reply": "talk",
    "sell": "talk",
    "trade": "talk",
    "come": "follow",
    "join": "follow",
    "build": "work",
    "fix": "work",
    "forge": "work",
    "wait": "idle",
    "stay": "idle",
    "rest": "idle",
    "sleep": "idle",
}
_PLACE_SYNONYMS = {
    "you": "player",
    "me": "player",
    "village": "gate",
    "gates": "gate",
    "smithy": "forge",
    "anvil": "forge",
    "shop": "market",
    "stall": "market",
    "square": "market",
    "house": "home",
    "inn": "home",
    "fountain": "well",
}
_DEFAULT_TARGET = {
    "idle": "player",
    "talk": "player",
    "walk": "well",
    "follow": "player",
    "work": "home",
    "flee": "gate",
}
_WORD = re.compile(r"[a-z]+")
MAX_SAY = 160


@dataclass(frozen=True, slots=True)
class Intent:
    """What to do (``action``), where or to whom (``target``), and the line to speak."""

    action: str = "idle"
    target: str = "player"
    say: str = ""

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"unknown action {self.action!r}; one of {ACTIONS}")
        if self.target not in PLACES:
            raise ValueError(f"unknown target {self.target!r}; one of {PLACES}")

    def line(self) -> str:
        """The compact form every tier writes: ``action target | say``."""
        return f"{self.action} {self.target} | {self.say}"

    def to_dict(self) -> dict[str, str]:
        return {"action": self.action, "target": self.target, "say": self.say}


IDLE = Intent("idle", "player", "Hm?")
"""The safe fallback: stay put, face the player."""


def _action(word: str) -> str | None:
    if word in ACTIONS:
        return word
    return _ACTION_SYNONYMS.get(word)


def _place(word: str) -> str | None:
    if word in PLACES:
        return word
    if word.endswith("s") and word[:-1] in PLACES:
        return word[:-1]
    return _PLACE_SYNONYMS.get(word)


def _clean_say(text: str) -> str:
    say = " ".join(text.replace("|", " ").split()).strip(" \"'")
    return say[:MAX_SAY]


def parse_intent(text: str, fallback: Intent = IDLE) -> Intent:
    """Read ``action target | say`` leniently.

    The head (before ``|``) gives the action (first known word or synonym) and the target
    (first known place); missing parts get sensible defaults. Without a ``|`` the whole
    line is speech, unless it starts with an action word. An empty or unreadable line
    gives ``fallback``.
    """
    text = " ".join(text.split())
    if not text:
        return fallback
    head, bar, tail = text.partition("|")
    words = _WORD.findall(head.lower())
    action = next((a for w in words[:3] if (a := _action(w)) is not None), None)
    if not bar and action is None:
        return Intent(fallback.action, fallback.target, _clean_say(text) or fallback.say)
    if not bar:  # "walk well I'll be there": action word, then maybe a place, then speech
        rest = words[1:]
        target = _place(rest[0]) if rest else None
        skip = 2 if target else 1
        tail = " ".join(head.split()[skip:])
    else:
        target = next((p for w in words if (p := _place(w)) is not None), None)
    action = action or fallback.action
    return Intent(action, target or _DEFAULT_TARGET[action], _clean_say(tail))


def intent_from_data(data: Mapping[str, Any] | None, text: str) -> Intent:
    """The intent a tier attached as structured data, else parsed from its text."""
    if data is not None:
        try:
            return Intent(str(data["action"]), str(data["target"]), str(data.get("say", "")))
        except (KeyError, ValueError):
            pass
    return parse_intent(text)
