"""Big-model follow-ups that wait for the floor (#17, session 14).

A multi-part or unsure ask gets a short holding answer at once and the big model's answer
later (:mod:`rtgate.apps.voice.agent`). On a busy machine that answer is often not back
before the caller goes on with their next turn (2 of 14 on natural5, 2 of 11 on natural6):
it used to be spoken only if the caller happened to be silent when it came, else lost, and
when it came in a pause inside the caller's next turn it started over them.

The policy kept here, for every follow-up job:

- **Never over the caller.** A ready line is spoken only when the floor is free: the agent
  is not replying (from its ack to its answer's last sentence) and the caller has no turn
  open (from their first sound to the end turn-taking decided; a pause inside a turn is not
  the floor).
- **Across the next turn.** A line that is not spoken when it is ready waits for the next
  moment the floor is free, which is after the caller's next turn has been answered.
- **Cancelled** by a short caller line that says so ("stop", "never mind", "forget it",
  "别说了", "算了", "不用了", "停"…: :func:`cancels`), a barge-in or not: every job asked
  before it is dropped (and its request cancelled).
- **Stale** (dropped unspoken) once more than ``max_turns`` later caller turns have ended
  (1: it may wait across one turn, not two), or ``stale_s`` seconds (30) after its ask was
  answered, whichever comes first: an answer to a question two exchanges back, or half a
  minute later, is more confusing than helpful, and the caller can ask again.
- **Recorded, bounded**: what became of each job (``outcomes``: spoken / cancelled / stale /
  failed) is kept for the latest ``keep_outcomes`` turns (64), the oldest forgotten first.

:class:`FollowupQueue` holds the lines and applies the policy; the agent tells it what
happens (asked, ready, the caller's words, turns ended) and asks it what is due when the
floor is free. It has no clock of its own (``clock``: the event loop's time in the agent, a
fake one in tests).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["CANCEL_UNITS", "FollowupPolicy", "FollowupQueue", "Pending", "cancels"]

# a caller line that takes back what was asked: said over the agent or as a turn of its own
_CANCEL = re.compile(
    r"(别说了|不用说了|不用了|算了|不要了|停一下|停下|先停|^停|stop|never ?mind|forget (it|that)"
    r"|that'?s enough|no need|don'?t bother)",
    re.IGNORECASE,
)
_UNIT = re.compile(r"[\u3400-\u9fff]|[A-Za-z0-9']+")
CANCEL_UNITS = 8  # longer lines are asks that may contain the words ("stop my plan")

Outcome = Literal["spoken", "cancelled", "stale", "failed"]


def cancels(text: str) -> bool:
    """Whether a caller's line takes back their earlier asks (short, with a cancel word)."""
    units = len(_UNIT.findall(text))
    return 0 < units <= CANCEL_UNITS and bool(_CANCEL.search(text.strip()))


@dataclass(frozen=True, slots=True)
class FollowupPolicy:
    """How long a follow-up may wait for the floor (see the module docstring)."""

    max_turns: int = 1  # later caller turns it may wait across
    stale_s: float = 30.0  # seconds after its ask was answered
    # what became of the follow-ups of the latest this many turns is kept (for the bench's
    # rows and the agent's clean-up); older records are forgotten, oldest turn first, so a
    # long call holds a bounded record (one per turn before session 15)
    keep_outcomes: int = 64


@dataclass(slots=True)
class Pending:
    """One follow-up: asked for ``turn`` at ``asked_at``; ``line`` once its answer is back."""

    turn: int
    lang: str
    asked_at: float
    line: str | None = None


@dataclass(slots=True)
class FollowupQueue:
    """The follow-ups asked and not yet spoken or dropped (see the module docstring)."""

    clock: Callable[[], float]
    policy: FollowupPolicy = field(default_factory=FollowupPolicy)
    pending: dict[int, Pending] = field(default_factory=dict)
    outcomes: dict[int, Outcome] = field(default_factory=dict)  # turn -> what became of it
    ended: int = 0  # the last caller turn turn-taking ended

    def ask(self, turn: int, lang: str) -> None:
        """A job was started for ``turn``."""
        self.pending[turn] = Pending(turn, lang, self.clock())

    def ready(self, turn: int, line: str | None) -> None:
        """The job of ``turn`` is back: ``line`` to speak (``None``: nothing worth saying)."""
        p = self.pending.get(turn)
        if p is None:
            return  # cancelled meanwhile
        if not line:
            del self.pending[turn]
            self._record(turn, "failed")
            return
        p.line = line

    def turn_ended(self, turn: int) -> None:
        """Turn-taking ended the caller's ``turn``."""
        self.ended = max(self.ended, turn)

    def heard(self, turn: int, text: str) -> list[int]:
        """The caller's final words of ``turn``: a cancel drops every follow-up asked
        before it; returns the turns dropped (their jobs should be cancelled)."""
        if not cancels(text):
            return []
        gone = [t for t in self.pending if t < turn]
        for t in gone:
            del self.pending[t]
            self._record(t, "cancelled")
        return gone

    def due(self) -> list[Pending]:
        """The lines to speak now that the floor is free (in the order they were asked);
        stale ones are dropped on the way."""
        now, out = self.clock(), []
        for turn in sorted(self.pending):
            p = self.pending[turn]
            stale = self.ended - turn > self.policy.max_turns
            if stale or now - p.asked_at > self.policy.stale_s:
                del self.pending[turn]
                self._record(turn, "stale")
            elif p.line is not None:
                del self.pending[turn]
                self._record(turn, "spoken")
                out.append(p)
        return out

    def _record(self, turn: int, outcome: Outcome) -> None:
        """Keep what became of ``turn``'s follow-up, forgetting the oldest turns' records
        past ``policy.keep_outcomes``."""
        self.outcomes[turn] = outcome
        while len(self.outcomes) > max(0, self.policy.keep_outcomes):
            del self.outcomes[min(self.outcomes)]
