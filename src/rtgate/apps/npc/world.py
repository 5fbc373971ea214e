"""The village: places, a player walking about, and NPCs run by a small state machine.

Frame logic is plain, deterministic Python with a fixed time step; it never waits on
anything. An :class:`~rtgate.apps.npc.intent.Intent` only changes an NPC's state::

    idle   ─▶ IDLE                       (face the target, say the line)
    talk   ─▶ TALK ──(line spoken)──▶ IDLE
    walk   ─▶ WALK ──(arrived)──────▶ IDLE
    work   ─▶ WALK ──(arrived)──────▶ WORK
    follow ─▶ FOLLOW                     (keeps near the player until told otherwise)
    flee   ─▶ FLEE ──(arrived)──────▶ IDLE   (twice the walking speed)

An intent can come in two parts: the *head* (``walk well``) is acted on as soon as it has
streamed in, the line is spoken when it is complete. A *deeper* line (the delegated
follow-up from the cloud tier) is only spoken: the NPC already acted on the quick intent,
and changing course seconds later would look erratic. A line shows for 1.5-6 s; TALK
lasts as long as its line (or 3 s waiting for a line that does not come).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum

from rtgate.apps.npc.intent import Intent

__all__ = ["NPC", "PLACES_XY", "Mode", "World", "default_world"]

PLACES_XY: dict[str, tuple[float, float]] = {
    "well": (0.0, 0.0),
    "market": (9.0, 3.0),
    "forge": (-7.0, 4.0),
    "gate": (0.0, -12.0),
}
WALK_SPEED = 3.0  # units per second
ARRIVED = 0.25
FOLLOW_GAP = 1.5
TALK_WAIT_S = 3.0  # a TALK whose line has not arrived by then gives up


class Mode(StrEnum):
    IDLE = "idle"
    TALK = "talk"
    WALK = "walk"
    WORK = "work"
    FOLLOW = "follow"
    FLEE = "flee"


@dataclass(slots=True)
class NPC:
    """One villager: where it is, what it does, what it says."""

    name: str
    home: tuple[float, float]
    x: float = 0.0
    y: float = 0.0
    mode: Mode = Mode.IDLE
    goal: str = "player"
    then: Mode = Mode.IDLE  # the state to enter on arrival
    speech: str = ""
    speech_left: int = 0  # frames the current line stays on screen
    since: int = 0  # frame the current mode began
    intents: int = 0  # intents acted on
    lines: int = 0  # lines spoken
    history: deque[tuple[int, Mode, Mode]] = field(default_factory=lambda: deque(maxlen=64))

    def become(self, frame: int, mode: Mode) -> None:
        if mode is not self.mode:
            self.history.append((frame, self.mode, mode))
            self.mode = mode
            self.since = frame


class World:
    """Places, the player and the NPCs; :meth:`step` advances one fixed time step."""

    def __init__(self, npcs: list[NPC], fps: float = 60.0) -> None:
        self.npcs = {n.name: n for n in npcs}
        self.dt = 1.0 / fps
        self.fps = fps
        self.frame = 0
        self.player = (2.0, -2.0)

    def where(self, npc: NPC, place: str) -> tuple[float, float]:
        if place == "player":
            return self.player
        if place == "home":
            return npc.home
        return PLACES_XY[place]

    def say(self, npc: NPC, line: str) -> None:
        if line:
            npc.speech = line
            npc.speech_left = int(min(6.0, max(1.5, len(line) / 15.0)) * self.fps)

    def apply(self, name: str, intent: Intent, *, act: bool = True, speak: bool = True) -> None:
        """Act on an intent for NPC ``name`` (see the module docstring).

        ``act=False`` only speaks the line (the rest of a streamed answer, a deeper line);
        ``speak=False`` only acts (the head of an answer, before its line has arrived).
        """
        npc = self.npcs[name]
        if speak and intent.say:
            self.say(npc, intent.say)
            npc.lines += 1
        if not act:
            return
        npc.intents += 1
        npc.goal = intent.target
        action = intent.action
        if action == "walk":
            npc.then = Mode.IDLE
            npc.become(self.frame, Mode.WALK)
        elif action == "work":
            npc.then = Mode.WORK
            npc.become(self.frame, Mode.WALK)
        elif action == "flee":
            npc.then = Mode.IDLE
            npc.become(self.frame, Mode.FLEE)
        elif action == "follow":
            npc.become(self.frame, Mode.FOLLOW)
        elif action == "talk":
            npc.become(self.frame, Mode.TALK)
        else:
            npc.become(self.frame, Mode.IDLE)

    def step(self) -> None:
        """One fixed time step: the player strolls, NPCs move, lines time out."""
        self.frame += 1
        t = self.frame * self.dt
        self.player = (2.0 + 4.0 * math.cos(t / 8.0), -2.0 + 3.0 * math.sin(t / 8.0))
        for npc in self.npcs.values():
            self._update(npc)

    def _update(self, npc: NPC) -> None:
        if npc.speech_left:
            npc.speech_left -= 1
            if not npc.speech_left:
                npc.speech = ""
                if npc.mode is Mode.TALK:
                    npc.become(self.frame, Mode.IDLE)
        elif npc.mode is Mode.TALK and self.frame - npc.since > TALK_WAIT_S * self.fps:
            npc.become(self.frame, Mode.IDLE)  # the line never came
        if npc.mode in (Mode.WALK, Mode.FLEE):
            speed = WALK_SPEED * (2.0 if npc.mode is Mode.FLEE else 1.0)
            if self._move(npc, self.where(npc, npc.goal), speed, ARRIVED):
                npc.become(self.frame, npc.then)
        elif npc.mode is Mode.FOLLOW:
            self._move(npc, self.player, WALK_SPEED * 1.5, FOLLOW_GAP)

    def _move(self, npc: NPC, to: tuple[float, float], speed: float, within: float) -> bool:
        """Move towards ``to``; True once within ``within`` of it."""
        dx, dy = to[0] - npc.x, to[1] - npc.y
        dist = math.hypot(dx, dy)
        if dist <= within:
            return True
        step = min(speed * self.dt, dist - within)
        npc.x += dx / dist * step
        npc.y += dy / dist * step
        return dist - step <= within

    def snapshot(self) -> list[dict[str, object]]:
        return [
            {
                "name": n.name,
                "mode": str(n.mode),
                "x": round(n.x, 2),
                "y": round(n.y, 2),
                "goal": n.goal,
                "speech": n.speech,
            }
            for n in self.npcs.values()
        ]


def default_world(fps: float = 60.0) -> World:
    """Three villagers: Mara the smith, Tom the farmer, Elda the innkeeper."""
    npcs = [
        NPC("Mara", home=PLACES_XY["forge"], x=-6.0, y=3.0),
        NPC("Tom", home=PLACES_XY["market"], x=8.0, y=2.0),
        NPC("Elda", home=(-2.0, -5.0), x=-2.0, y=-5.0),
    ]
    return World(npcs, fps)
