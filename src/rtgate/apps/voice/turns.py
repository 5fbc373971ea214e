"""Turn-taking: when has the caller finished, and when are they barging in?

VAD silence alone cannot tell a finished question from a pause in mid-sentence: wait long
and the agent lags, wait short and it cuts in. So the silence needed depends on the latest
transcript that covers the end of speech (:func:`cue`):

- ``question``: a question particle or word (吗/呢/吧/？/多少/几/什么…, "?", a wh-/aux
  opening) and not trailing off: the shortest wait;
- ``clause``: a complete-looking clause (final punctuation, or long enough and not ending in
  a connective or filler): a medium wait, shortened when the local model reads the clause
  as a finished turn (:mod:`rtgate.apps.voice.eot`, rule ``complete``), and shortened more
  when it is sure (the operating points come from ``rtgate voice eot-eval``);
- ``None``: trailing off (那个/然后/就是…, "and"/"the"/"if"…), a subordinate clause still
  waiting for its main clause (如果…/因为…/"if…"/"when…" with no comma yet), or no covering
  transcript yet: wait up to the timeout.

Caller speech while the agent is talking is a barge-in: the stage sends an
:class:`~rtgate.apps.voice.frames.InterruptionFrame` down at once, on the first frame whose
speech probability reaches ``barge_prob`` (0.3, under the VAD's 0.5 speech start) once the
caller's previous speech has stopped. So is the agent starting to talk (a sentence that
came late, a follow-up) while the caller is speaking in a new turn.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Literal

from rtgate.apps.voice.eot import EndOfTurn
from rtgate.apps.voice.frames import (
    AgentStartedFrame,
    AgentStoppedFrame,
    AudioFrame,
    EndFrame,
    Frame,
    InterruptionFrame,
    SpeechStartFrame,
    SpeechStopFrame,
    StartFrame,
    TranscriptFrame,
    TurnEndFrame,
)
from rtgate.apps.voice.pipeline import Stage

__all__ = ["Cue", "TurnRules", "TurnStage", "cue"]

Cue = Literal["question", "clause"]

_ZH_TRAIL = (
    "那个", "这个", "就是", "然后", "还有", "而且", "但是", "可是", "因为", "所以", "如果",
    "的话", "或者", "还是", "和", "跟", "把", "呃", "嗯", "额", "一下", "我想", "我要",
)  # fmt: skip
_ZH_QUESTION = re.compile(
    r"(吗|呢|吧|么|多少|几|什么|怎么|怎样|哪|谁|为什么|是不是|有没有|能不能|可不可以|行不行)"
)
_EN_TRAIL = {
    "and", "but", "or", "so", "because", "if", "the", "a", "an", "to", "of", "for", "with",
    "about", "my", "your", "um", "uh", "like", "in", "on", "at", "i", "whether", "than",
    "then", "also",
}  # fmt: skip
_EN_QUESTION = {
    "what", "how", "when", "where", "why", "who", "which", "can", "could", "do", "does", "did",
    "is", "are", "will", "would", "should", "may", "have", "has",
}  # fmt: skip
# openers of a subordinate clause: until a comma brings the main clause, the caller is not done
_ZH_SUBORDINATE = (
    "如果", "要是", "假如", "假设", "万一", "因为", "由于", "虽然", "尽管", "即使", "就算",
    "只要", "除非", "既然", "等到", "当",
)  # fmt: skip
_EN_SUBORDINATE = {
    "if", "when", "because", "although", "though", "while", "since", "unless", "once",
    "whenever", "before", "after",
}  # fmt: skip
_EN_ASK = re.compile(
    r"\b((could|can|would|will) you|wondering (if|whether)|tell me|how (much|many|long))\b"
)
_PUNCT = "。！？!?.…,，、；;：: \"'“”"
_CJK = re.compile(r"[\u3400-\u9fff]")


def cue(text: str) -> Cue | None:
    """What the transcript's ending says about the turn (see the module docstring)."""
    raw = text.strip()
    core = raw.rstrip(_PUNCT)
    if not core or raw.endswith(("…", "...", ",", "，", "、")):
        return None
    if _CJK.search(core):
        if core.endswith(_ZH_TRAIL):
            return None
        last = re.split(r"[，,。！？!?；;]", core)[-1]
        if raw.endswith(("？", "?")) or _ZH_QUESTION.search(last):
            return "question"
        sentence = re.split(r"[。！？!?；;]", core)[-1]
        if sentence.startswith(_ZH_SUBORDINATE) and not re.search(r"[，,]", sentence):
            return None
        if raw[-1] in "。！!." or len(core) >= 6:
            return "clause"
        return None
    words = re.findall(r"[a-z']+", core.lower())
    if not words or words[-1] in _EN_TRAIL:
        return None
    tail = re.split(r"[.!?]\s+", core.lower())[-1]
    sentence = tail.split()
    # "when" opens a question ("when does it close") or a subordinate clause ("when I call, …")
    subordinate = bool(sentence) and sentence[0].strip(",") in _EN_SUBORDINATE
    if subordinate and sentence[0] == "when" and len(sentence) > 1:
        subordinate = sentence[1] not in _EN_QUESTION  # "when does…" asks, "when I…" doesn't
    opens = bool(sentence) and sentence[0] in _EN_QUESTION and len(words) >= 3
    if raw.endswith("?") or (opens and not subordinate):
        return "question"
    if _EN_ASK.search(core.lower()):
        return "question"
    if subordinate and "," not in tail:
        return None
    if raw[-1] in ".!" or len(words) >= 4:
        return "clause"
    return None


@dataclass(slots=True)
class TurnRules:
    """Silence (ms) that ends a turn, by the transcript's cue.

    Silence is confirmed by the first frame whose speech probability drops under
    ``quiet_prob``, and dated from the end of the last frame that had not faded (at most
    ``backdate_s`` earlier): Silero's probability trails the voice by 80-140 ms on the
    packaged clips, the level by one frame. A transcript "covers" the end if it was decoded
    from audio up to ``cover_s`` before the silence started.
    """

    question_ms: float = 64.0
    clause_ms: float = 600.0  # pauses between clauses run 200-500 ms
    complete_ms: float = 350.0  # a clause the local model reads as a finished turn
    complete_p: float = 0.6  # ... with at least this probability
    sure_ms: float = 200.0  # ... and reads as finished with at least ``sure_p``
    sure_p: float = 0.7
    timeout_ms: float = 1200.0  # trailing off ("那个…", "and…"): callers may pause a while
    quiet_prob: float = 0.5
    cover_s: float = 0.2
    backdate_s: float = 0.25  # how far back the fade may date the silence
    barge_prob: float = 0.3  # speech probability that stops the agent while it talks

    def wait_ms(self, c: Cue | None, p_end: float | None = None) -> float:
        if c == "question":
            return self.question_ms
        if c == "clause":
            if p_end is not None and p_end >= self.sure_p:
                return min(self.sure_ms, self.complete_ms)
            if p_end is not None and p_end >= self.complete_p:
                return self.complete_ms
            return self.clause_ms
        return self.timeout_ms


class TurnStage(Stage):
    """Decides turn ends (sent down to the agent and up to the ASR) and barge-ins.

    Forwards transcripts and speech events; consumes caller audio (nothing below needs it).
    With ``eot``, each partial that reads as a complete clause is scored in the background
    (the newest partial replaces an older one still being scored).
    Audio policy: drop the oldest past 64 frames.
    """

    name = "turns"
    policy = "drop_oldest"

    def __init__(self, rules: TurnRules | None = None, eot: EndOfTurn | None = None) -> None:
        super().__init__()
        self.rules = rules or TurnRules()
        self.eot = eot
        self._scoring: asyncio.Task[None] | None = None
        self._scoring_text = ""
        self.p_end: tuple[int, str, float] | None = None  # (turn, text, p) of the latest score
        self.lang = "zh"
        self.turn = 0
        self.in_turn = False
        self.quiet_since: float | None = None
        self.loud_until = 0.0  # end of the last frame that had not faded
        self.now = 0.0
        self.latest: TranscriptFrame | None = None
        self.agent_speaking = False
        self._barged = False
        self.caller_speaking: float | None = None  # start of the caller's speech, if on now
        self.ended: list[TurnEndFrame] = []

    async def process_frame(self, frame: Frame, upstream: bool) -> None:
        if isinstance(frame, AgentStartedFrame | AgentStoppedFrame):
            self.agent_speaking = isinstance(frame, AgentStartedFrame)
            self._barged = False
            if self.agent_speaking and self.in_turn and self.caller_speaking is not None:
                # the agent starts (a late sentence, a follow-up) while the caller is already
                # in a new turn and talking: that is a barge-in too, not a reason to talk over
                await self._barge_in(self.caller_speaking)
            return  # consumed: the caller side only needs the floor state
        if isinstance(frame, StartFrame):
            self.lang = frame.lang or self.lang
        elif isinstance(frame, SpeechStartFrame):
            self.caller_speaking = frame.t
            if self.agent_speaking and not self._barged:
                await self._barge_in(frame.t)
            self.quiet_since = None
            if not self.in_turn:
                self.in_turn, self.turn, self.latest = True, self.turn + 1, None
        elif isinstance(frame, AudioFrame):
            self.now = max(self.now, frame.end)
            barge = self.agent_speaking and not self._barged and self.caller_speaking is None
            if barge and (frame.prob or 0.0) >= self.rules.barge_prob:
                # the VAD's speech start needs 0.5; while the agent talks (and the caller's
                # last speech has stopped: its probability trails off well after the turn
                # ended), a lower bar stops it sooner (noise stays under it: docs/voice.md)
                await self._barge_in(frame.t)
            if not frame.faded:
                self.loud_until = frame.end
            if frame.prob is not None and frame.prob >= self.rules.quiet_prob:
                self.quiet_since = None
            elif self.in_turn and self.quiet_since is None:
                # the probability trails the voice: date the silence from the fade when the
                # level has stayed down since (at most ``backdate_s`` back)
                since = max(self.loud_until, frame.t - self.rules.backdate_s)
                self.quiet_since = min(frame.t, since)
            await self._check()
            return
        elif isinstance(frame, TranscriptFrame):
            if frame.turn == self.turn and not frame.final:
                self.latest = frame
                self.lang = frame.lang
                self._score(frame)
                await self._check()
        elif isinstance(frame, EndFrame) and self.in_turn:
            await self._end("end")
        elif isinstance(frame, SpeechStopFrame):
            self.caller_speaking = None
            if self.quiet_since is None:
                self.quiet_since = frame.t
        await self.push(frame, upstream)

    def covering(self) -> TranscriptFrame | None:
        """The latest partial if it covers the audio up to where the silence began."""
        t = self.latest
        if t is None or self.quiet_since is None:
            return None
        return t if t.until >= self.quiet_since - self.rules.cover_s else None

    def _score(self, frame: TranscriptFrame) -> None:
        if self.eot is None or cue(frame.text) != "clause":
            return
        busy = self._scoring is not None and not self._scoring.done()
        if busy and self._scoring_text == frame.text:
            return  # the same words decoded again: that score is on its way
        if self.p_end is not None and self.p_end[:2] == (frame.turn, frame.text):
            return
        if self._scoring is not None:
            self._scoring.cancel()
        self._scoring_text = frame.text
        self._scoring = asyncio.create_task(self._score_task(frame))

    async def _score_task(self, frame: TranscriptFrame) -> None:
        assert self.eot is not None
        p = await self.eot.p_end(frame.text, frame.lang)
        if p is not None:
            self.p_end = (frame.turn, frame.text, p)

    async def _check(self) -> None:
        if not self.in_turn or self.quiet_since is None:
            return
        silence_ms = (self.now - self.quiet_since) * 1000.0
        covering = self.covering()
        c = cue(covering.text) if covering is not None else None
        p = None
        if covering is not None and self.p_end is not None:
            turn, text, score = self.p_end
            p = score if (turn, text) == (covering.turn, covering.text) else None
        wait = self.rules.wait_ms(c, p)
        if silence_ms >= wait:
            finished = c == "clause" and wait < self.rules.clause_ms
            await self._end("complete" if finished else c or "timeout", p)

    async def _barge_in(self, t: float) -> None:
        self._barged = True  # once per stretch of agent speech
        await self.push(InterruptionFrame(t=t))

    async def cleanup(self) -> None:
        if self._scoring is not None:
            self._scoring.cancel()

    async def _end(self, rule: str, p_end: float | None = None) -> None:
        latest = self.covering() or self.latest
        stopped = self.quiet_since if self.quiet_since is not None else self.now
        ev = TurnEndFrame(
            turn=self.turn,
            text=latest.text if latest else "",
            lang=latest.lang if latest else self.lang,
            t=stopped,
            decided_t=self.now,
            rule=rule,
            p_end=p_end,
        )
        self.in_turn, self.latest, self.p_end = False, None, None
        self.ended.append(ev)
        await self.push(ev, upstream=True)  # the ASR decodes the final transcript
        await self.push(ev)
