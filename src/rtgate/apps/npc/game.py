"""The 60 fps loop: a scripted player talks to NPCs; intents come back through the gate.

A frame (``Game.frame``) does, in order: hand the player's due lines to the dialogue,
apply what the dialogue has received since the last frame (the head of a streaming answer,
a complete answer, a deeper follow-up), step the world. With
:class:`GatedDialogue` nothing in a frame waits on a model: lines are submitted through
the :class:`~rtgate.gate.sync_facade.SyncGate` (microseconds) and answers are drained once
per frame.
:class:`InlineDialogue` is the ablation the article warns against: it calls the model
inside the frame and waits for it.

:func:`run_loop` is a fixed-timestep loop: frame *n* is due at ``t0 + n / fps``; the loop
sleeps until then (a :class:`FakeClock` in tests, so no test sleeps), runs the frame and
counts it *missed* when it ends after its own deadline (``due + 1 / fps``). A loop that
falls behind runs the late frames back to back, and each one still late counts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from rtgate.apps.npc.intent import IDLE, Intent, intent_from_data, parse_intent
from rtgate.apps.npc.world import World
from rtgate.core.errors import QueueFull
from rtgate.core.request import Request
from rtgate.gate import GateResult
from rtgate.gate.sync_facade import Handle, SyncGate

__all__ = [
    "SCRIPT",
    "Arrival",
    "Clock",
    "Dialogue",
    "Exchange",
    "FakeClock",
    "Game",
    "GatedDialogue",
    "InlineDialogue",
    "Line",
    "LoopStats",
    "RealClock",
    "head_of",
    "npc_request",
    "run_loop",
    "script_lines",
]


@dataclass(frozen=True, slots=True)
class Line:
    """The player says ``text`` to ``npc`` at ``at_s`` seconds into the session."""

    at_s: float
    npc: str
    text: str


SCRIPT: tuple[Line, ...] = (
    Line(0.5, "Mara", "Hello there!"),
    Line(1.2, "Tom", "Meet me at the well, would you?"),
    Line(2.0, "Elda", "What do you think of the baron's new tax?"),
    Line(2.8, "Mara", "Can you look at my horse's shoe?"),
    Line(3.6, "Tom", "Follow me."),
    Line(4.4, "Elda", "Is there a room free tonight?"),
    Line(5.2, "Mara", "Tell me about the old king."),
    Line(6.0, "Tom", "Bandits on the road! Run!"),
    Line(6.8, "Elda", "Walk to the well and greet the traveller there."),
    Line(7.6, "Mara", "Back to work."),
    Line(8.4, "Tom", "Where can I buy apples?"),
    Line(9.2, "Elda", "Thank you."),
    Line(10.0, "Mara", "Who made this strange dagger?"),
    Line(10.8, "Tom", "Go to the market."),
    Line(11.6, "Elda", "Have you seen a girl in a red cloak?"),
    Line(12.4, "Mara", "Go home, it's late."),
    Line(13.2, "Tom", "What grows best in this soil?"),
    Line(14.0, "Elda", "Good evening!"),
    Line(14.8, "Mara", "Could you forge me a small key?"),
    Line(15.6, "Tom", "Why is the mill wheel not turning?"),
    Line(16.4, "Elda", "Wait here."),
    Line(17.2, "Mara", "Do you know the way to the old tower?"),
    Line(18.0, "Tom", "Come with me to the gate."),
    Line(18.8, "Elda", "What's in tonight's stew?"),
    Line(19.6, "Mara", "Wolves are coming down the hill!"),
    Line(20.4, "Tom", "How much for a sack of grain?"),
    Line(21.2, "Elda", "Who was that hooded stranger at the bar?"),
    Line(22.0, "Mara", "Goodbye."),
    Line(22.8, "Tom", "Will it rain tomorrow?"),
    Line(23.6, "Elda", "Meet me at the gate."),
    Line(24.4, "Mara", "Is the forge fire ever allowed to die?"),
    Line(25.2, "Tom", "Get to work."),
    Line(26.0, "Elda", "Can you keep a secret for me?"),
    Line(26.8, "Mara", "Show me your finest sword."),
    Line(27.6, "Tom", "Hello!"),
    Line(28.4, "Elda", "Where did the old innkeeper go?"),
)
"""A 30-second session: common lines (templates) mixed with open ones (models)."""
SCRIPT_PERIOD_S = 30.0


def script_lines(seconds: float, script: Sequence[Line] = SCRIPT) -> list[Line]:
    """``script`` repeated every 30 s to cover ``seconds``."""
    out: list[Line] = []
    offset = 0.0
    while offset < seconds:
        out += [Line(x.at_s + offset, x.npc, x.text) for x in script if x.at_s + offset < seconds]
        offset += SCRIPT_PERIOD_S
    return out


@dataclass(frozen=True, slots=True)
class Arrival:
    """Something to apply this frame: act on ``intent``, speak its line, or both.

    ``label`` says what it is for logs: the answering route, ``"head"`` (the start of a
    streamed answer, acted on before the line is complete) or ``"deeper"``.
    """

    npc: str
    intent: Intent
    act: bool
    speak: bool
    label: str
    latency_frames: int


@dataclass(slots=True)
class Exchange:
    """One player line and when its parts arrived (frame numbers), for the statistics."""

    npc: str
    text: str
    sent: int
    route: str | None = None  # the gate's route; None while pending or when cancelled
    acted: int | None = None  # the intent (action, target) was applied
    spoken: int | None = None  # the line was complete
    deeper: int | None = None  # the delegated deeper line arrived

    @property
    def intent_frames(self) -> int | None:
        return None if self.acted is None else self.acted - self.sent


class Dialogue(Protocol):
    """Turns the player's lines into intents, by frames."""

    exchanges: list[Exchange]

    def say(self, frame: int, npc: str, text: str) -> None: ...

    def poll(self, frame: int) -> list[Arrival]: ...


def npc_request(npc: str, text: str, max_tokens: int = 40) -> Request:
    """The gate request for one player line (delegated: deeper line follows)."""
    return Request(
        input=text,
        max_tokens=max_tokens,
        delegate=True,
        meta={"npc": npc, "placeholder": IDLE.line()},
    )


def _intent_of(res: GateResult) -> Intent:
    data = res.data[0] if res.data else None
    return intent_from_data(data, res.text)


def head_of(partial: str) -> Intent | None:
    """The intent in the head of a streaming line, once its ``|`` has arrived."""
    head, bar, _ = partial.partition("|")
    if not bar:
        return None
    return parse_intent(head + "|")


class GatedDialogue:
    """Lines go to a :class:`SyncGate` in queue mode; answers are drained once per frame.

    While a model's answer streams (``scope="first_token"``), each frame looks at the text
    so far: once the head ``action target |`` is there, the NPC acts on it; the line is
    spoken when the answer is complete. A new line to an NPC cancels that NPC's request
    still in flight (the player has moved on). When the gate refuses a line
    (``QueueFull``) the NPC just keeps going.
    """

    def __init__(self, gate: SyncGate, budget_ms: float = 100.0, max_per_frame: int = 16):
        if gate.mode != "queue":
            raise ValueError("GatedDialogue needs a SyncGate in queue mode")
        self.gate = gate
        self.budget_ms = budget_ms
        self.max_per_frame = max_per_frame
        self.inflight: dict[str, Handle] = {}
        self.exchanges: list[Exchange] = []
        self.refused = 0
        self.cancelled = 0

    def say(self, frame: int, npc: str, text: str) -> None:
        old = self.inflight.pop(npc, None)
        if old is not None and old.cancel():
            self.cancelled += 1
        ex = Exchange(npc, text, frame)
        try:
            h = self.gate.submit(npc_request(npc, text), self.budget_ms, tag=ex)
        except QueueFull:
            self.refused += 1
            ex.route = "refused"
        else:
            self.inflight[npc] = h
        self.exchanges.append(ex)

    def poll(self, frame: int) -> list[Arrival]:
        out: list[Arrival] = []
        for d in self.gate.drain(self.max_per_frame):
            ex: Exchange = d.handle.tag
            if d.kind == "followup":
                if self.inflight.get(ex.npc) is d.handle:
                    del self.inflight[ex.npc]
                if d.job is not None and d.job.status == "done":
                    deeper = intent_from_data(d.job.data[0] if d.job.data else None, d.job.text)
                    ex.deeper = frame
                    out.append(Arrival(ex.npc, deeper, False, True, "deeper", frame - ex.sent))
                continue
            if self.inflight.get(ex.npc) is d.handle and not d.handle.followup_pending:
                del self.inflight[ex.npc]
            intent = _intent_of(d.result) if d.result is not None else IDLE
            ex.route = d.result.route if d.result is not None else "error"
            ex.spoken = frame
            first = ex.acted is None
            if first:
                ex.acted = frame
            out.append(Arrival(ex.npc, intent, first, True, ex.route, frame - ex.sent))
        for h in self.inflight.values():
            ex = h.tag
            if ex.acted is None and not h.done and (head := head_of(h.partial)) is not None:
                ex.acted = frame
                out.append(Arrival(ex.npc, head, True, False, "head", frame - ex.sent))
        return out


class InlineDialogue:
    """The ablation: ``say`` calls ``answer(npc, text)`` inside the frame and waits."""

    def __init__(self, answer: Callable[[str, str], tuple[Intent, str]]):
        self.answer = answer
        self._ready: list[Arrival] = []
        self.exchanges: list[Exchange] = []

    def say(self, frame: int, npc: str, text: str) -> None:
        intent, route = self.answer(npc, text)
        self.exchanges.append(Exchange(npc, text, frame, route, frame, frame))
        self._ready.append(Arrival(npc, intent, True, True, route, 0))

    def poll(self, frame: int) -> list[Arrival]:
        out, self._ready = self._ready, []
        return out


@dataclass(slots=True)
class LoopStats:
    """What a run measured: per-frame work time, misses, and every arrival."""

    fps: float
    frame_ms: list[float] = field(default_factory=list)
    late_ms: list[float] = field(default_factory=list)  # how late each frame started
    missed: int = 0
    arrivals: list[Arrival] = field(default_factory=list)

    @property
    def frames(self) -> int:
        return len(self.frame_ms)


class Game:
    """One frame of game logic over a world, a dialogue and a script of player lines."""

    def __init__(self, world: World, dialogue: Dialogue, lines: Sequence[Line]):
        self.world = world
        self.dialogue = dialogue
        fps = world.fps
        self._due: Iterator[tuple[int, Line]] = iter(
            sorted(((round(ln.at_s * fps), ln) for ln in lines), key=lambda p: p[0])
        )
        self._next = next(self._due, None)

    def frame(self, n: int) -> list[Arrival]:
        """Run frame ``n``: say due lines, apply arrivals, step the world."""
        while self._next is not None and self._next[0] <= n:
            line = self._next[1]
            self.dialogue.say(n, line.npc, line.text)
            self._next = next(self._due, None)
        arrivals = self.dialogue.poll(n)
        for a in arrivals:
            self.world.apply(a.npc, a.intent, act=a.act, speak=a.speak)
        self.world.step()
        return arrivals


class Clock(Protocol):
    def now(self) -> float: ...

    def sleep_until(self, t: float) -> None: ...


class RealClock:
    """``perf_counter`` and a sleep to the deadline."""

    def now(self) -> float:
        return time.perf_counter()

    def sleep_until(self, t: float) -> None:
        left = t - time.perf_counter()
        if left > 0:
            time.sleep(left)


class FakeClock:
    """Virtual time for tests: sleeping jumps to the deadline; ``advance`` is work."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep_until(self, t: float) -> None:
        self.t = max(self.t, t)

    def advance(self, s: float) -> None:
        self.t += s


def run_loop(
    game: Game,
    frames: int,
    clock: Clock,
    *,
    on_frame: Callable[[int, list[Arrival]], None] | None = None,
) -> LoopStats:
    """Run ``frames`` fixed-timestep frames of ``game`` on ``clock`` (see module docstring)."""
    fps = game.world.fps
    period = 1.0 / fps
    stats = LoopStats(fps)
    t0 = clock.now()
    for n in range(frames):
        due = t0 + n * period
        clock.sleep_until(due)
        start = clock.now()
        arrivals = game.frame(n)
        if on_frame is not None:
            on_frame(n, arrivals)
        end = clock.now()
        stats.frame_ms.append((end - start) * 1000.0)
        stats.late_ms.append((start - due) * 1000.0)
        if end > due + period:
            stats.missed += 1
        stats.arrivals += arrivals
    return stats
