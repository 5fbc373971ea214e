"""Turn-taking: when has the caller finished, and when are they barging in?

VAD silence alone cannot tell a finished question from a pause in mid-sentence: wait long
and the agent lags, wait short and it cuts in. So the silence needed depends on the latest
transcript that covers the end of speech (:func:`cue`):

- ``question``: a question particle or word (吗/呢/吧/？/多少/几/什么…, "?", a wh-/aux
  opening) and not trailing off: the shortest wait;
- ``clause``: a complete-looking clause (final punctuation, or long enough and not ending in
  a connective or filler): the wait depends on how sure the local model is that the clause
  ends the turn (:mod:`rtgate.apps.voice.eot`; :meth:`TurnRules.clause_wait_ms`): unscored,
  or read as going on, it outwaits the 0.5-1.0 s pauses callers make between clauses
  (1.2 s); read as finished, it ends after 200 ms (rule ``complete``); between the two
  operating points of ``rtgate voice eot-eval`` (0.6, 0.7) the wait falls with the score;
- ``None``: trailing off (那个/然后/就是…, "and"/"the"/"if"…), a greeting alone (你好/"hi",
  the ask comes next), a subordinate clause still waiting for its main clause
  (如果…/因为…/"if…"/"when…" with no comma yet), or no covering transcript yet: wait up to
  the timeout.

Speaking is decided apart from preparing: a pause with covering words is sent down at once
as a :class:`~rtgate.apps.voice.frames.TurnPauseFrame` (the agent may prepare its answer,
silently), while the first sound waits for the :class:`TurnEndFrame`, that is for a
confident end.

With an audio end-of-turn model (:mod:`rtgate.apps.voice.smart_turn`) the wait is fused
from three signals (:meth:`TurnRules.fused_wait_ms`): what the words say (a strong question
ending, a weaker question, a clause with the local model's score, trailing off), what the
voice says (Smart Turn's probability that the turn is complete: ``done``, ``unsure`` or
``more``) and how long the silence already is (the audio is scored again every
``audio_every_ms`` of silence, with more of the silence in its window). Words and voice that
agree shorten the wait; a voice that goes on lengthens it past the pauses callers make
between clauses. Neither decides alone: a finished question whose voice sounds unfinished
still ends after the ``more`` wait of a question, and a finished-sounding voice on a
trailing "and…" or a clause the local model reads as unfinished still waits long.

Caller speech while the agent is talking is a barge-in: the stage sends an
:class:`~rtgate.apps.voice.frames.InterruptionFrame` down at once, on the first frame whose
speech probability reaches ``barge_prob`` (0.3, under the VAD's 0.5 speech start) once the
caller's previous speech has stopped. So is the agent starting to talk (a sentence that
came late, a follow-up) while the caller is speaking in a new turn.

Silero's probability takes 20-240 ms from a voice's onset to reach 0.3 (p50 37, p95 186
ms at the barge-ins of the validation calls), the line's level one or two 16 ms steps. So
before the barge-in, a rise of the level ``hold_rise_db`` over the line's noise floor for
``hold_steps`` steps sends a :class:`~rtgate.apps.voice.frames.HoldFrame`: the output
pauses where it is, dropping nothing. Speech confirmed within ``hold_s`` makes it a
barge-in dated from the rise (the agent has been silent since); otherwise a
:class:`~rtgate.apps.voice.frames.ResumeFrame` plays on, and that stretch of agent speech
gets no second hold (a knock, a door, a cough: a gap of ``hold_s``, then the agent goes on).
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np

from rtgate.apps.voice.eot import EndOfTurn
from rtgate.apps.voice.eot_rule import EotRule, Place
from rtgate.apps.voice.frames import (
    RATE,
    AgentStartedFrame,
    AgentStoppedFrame,
    AudioFrame,
    EndFrame,
    Frame,
    HoldFrame,
    InterruptionFrame,
    ResumeFrame,
    SpeechStartFrame,
    SpeechStopFrame,
    StartFrame,
    TranscriptFrame,
    TurnEndFrame,
    TurnPauseFrame,
)
from rtgate.apps.voice.pipeline import Stage

__all__ = [
    "TEXT_QUESTION_MORE_P",
    "AudioEndOfTurn",
    "Cue",
    "EotKind",
    "TextClass",
    "TextScorer",
    "TurnRules",
    "TurnStage",
    "Voice",
    "cue",
    "text_class",
    "voice_class",
]

Cue = Literal["question", "clause"]
EotKind = Literal["lm", "lm+text"]
"""Which end-of-turn models score the partials: ``lm``, the local model's end mass
(:class:`~rtgate.apps.voice.eot.LMEndOfTurn`) on complete-looking clauses; ``lm+text``, and
the trained n-gram model (:class:`~rtgate.apps.voice.eot_text.TextEndOfTurn`) on
questions (:class:`~rtgate.apps.voice.eot_text.ByCue`)."""
TextClass = Literal["ask", "question", "sure", "complete", "clause", "open"]
"""What the words say, strongest first: ``ask`` (ends on a question mark or a final
question particle), ``question`` (a question by its opening or a wh-word), a clause the
local model is ``sure`` of / reads as ``complete`` / does not know, ``open`` (trailing off,
a subordinate clause waiting for its main clause, or no covering transcript)."""
Voice = Literal["done", "unsure", "more"]
"""What the voice says (the audio model's probability against ``audio_done_p`` and
``audio_more_p``)."""


class TextScorer(Protocol):
    """P(turn finished) of a partial's words, synchronous and cheap (the trained text
    model, :class:`~rtgate.apps.voice.eot_text.TextEndOfTurn`)."""

    def score(self, text: str, lang: str) -> float | None: ...


class AudioEndOfTurn(Protocol):
    """P(turn complete) from the turn's audio (synchronous: run off the event loop)."""

    def p_end(self, audio: np.ndarray) -> float: ...


_ZH_TRAIL = (
    "那个", "这个", "就是", "然后", "还有", "而且", "但是", "可是", "因为", "所以", "如果",
    "的话", "或者", "还是", "和", "跟", "把", "呃", "嗯", "额", "一下", "我想", "我要",
)  # fmt: skip
_ZH_QUESTION = re.compile(
    r"(吗|呢|吧|么|多少|几|什么|怎么|怎样|哪|谁|为什么|是不是|有没有|能不能|可不可以|行不行)"
)
# 几 that counts rather than asks: "这几天特别慢" is a statement that may go on
_ZH_NOT_QUESTION = re.compile(r"(这|那|前|过|好|头|后)几|几乎")
_ZH_GREETING = re.compile(r"^(喂|你好|您好|[，,\s])+$")  # a greeting alone: the ask comes next
_EN_GREETING = {"hi", "hello", "hey", "there"}
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


_ZH_FINAL_PARTICLE = ("吗", "呢", "吧", "么")


def text_class(text: str | None, p_text: float | None, rules: TurnRules) -> TextClass:
    """:data:`TextClass` of the covering transcript (``None``: none covers the end)."""
    c = cue(text) if text is not None else None
    if c is None or text is None:
        return "open"
    if c == "question":
        raw = text.strip()
        core = raw.rstrip(_PUNCT)
        strong = raw.endswith(("?", "？")) or (
            bool(_CJK.search(core)) and core.endswith(_ZH_FINAL_PARTICLE)
        )
        return "ask" if strong else "question"
    if p_text is not None and p_text >= rules.sure_p:
        return "sure"
    if p_text is not None and p_text >= rules.complete_p:
        return "complete"
    return "clause"


def voice_class(p_audio: float, rules: TurnRules) -> Voice:
    """:data:`Voice` of the audio model's probability."""
    if p_audio >= rules.audio_done_p:
        return "done"
    return "more" if p_audio < rules.audio_more_p else "unsure"


# Silence (ms) that ends a turn, by what the words say and what the voice says. Rows: from
# the strongest ending to trailing off; columns: the voice done / unsure / going on / not
# scored yet for this silence. The voice never shortens what the words say goes on (a
# ``clause`` the local model reads as unfinished waits the 1.2 s of the words alone: Smart
# Turn read the 448 ms pause after "我家里的信号最近特别差" as done, 0.70-0.97, and on the
# long-pause validation calls it scored 0.9-0.99 at a third of the pauses inside a turn,
# where each part is synthesised on its own, and ranked those pauses against the turns'
# ends no better than chance with each turn spoken as one utterance, docs/voice.md); a
# voice that goes on waits past the pauses callers make between clauses (~1 s), except
# after a question, where
# the words are near conclusive (Smart Turn reads some finished Mandarin questions as going
# on: zh_plan 0.03-0.17, and "So I was wondering if you could tell me how much my last bill
# was." 0.04-0.47, on the validation clips). Tuned on the validation clips only.
_FUSED: dict[TextClass, tuple[float, float, float, float]] = {
    "ask": (64.0, 150.0, 250.0, 150.0),
    "question": (64.0, 300.0, 600.0, 300.0),
    "sure": (150.0, 350.0, 1100.0, 350.0),
    "complete": (450.0, 700.0, 1200.0, 700.0),
    "clause": (1200.0, 1200.0, 1500.0, 1200.0),
    "open": (1200.0, 1200.0, 1500.0, 1200.0),
}


# A question the trained text model scores under this goes on (TurnRules.for_model): on
# Whisper's partials of the validation calls the one complete first question that goes on
# ("Can you check my last bill?", before "and when does my broadband contract end?")
# scored 0.43, the questions that ended the turn 0.62 and up (docs/voice.md, Session 12).
# On clauses the text model ranked the turns' ends under the pauses (ROC AUC 0.35-0.46):
# they stay with the local model.
TEXT_QUESTION_MORE_P = 0.5


def cue(text: str) -> Cue | None:
    """What the transcript's ending says about the turn (see the module docstring)."""
    raw = text.strip()
    core = raw.rstrip(_PUNCT)
    if not core or raw.endswith(("…", "...", ",", "，", "、")):
        return None
    if _CJK.search(core):
        if core.endswith(_ZH_TRAIL) or _ZH_GREETING.match(core):
            return None
        last = _ZH_NOT_QUESTION.sub("", re.split(r"[，,。！？!?；;]", core)[-1])
        if raw.endswith(("？", "?")) or _ZH_QUESTION.search(last):
            return "question"
        sentence = re.split(r"[。！？!?；;]", core)[-1]
        if sentence.startswith(_ZH_SUBORDINATE) and not re.search(r"[，,]", sentence):
            return None
        if raw[-1] in "。！!." or len(core) >= 6:
            return "clause"
        return None
    words = re.findall(r"[a-z'-]+", core.lower())  # "add-on" is one word
    asks = raw.endswith("?")  # a question may end on a particle: "when will it be back on?"
    if not words or (words[-1] in _EN_TRAIL and not asks) or set(words) <= _EN_GREETING:
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

    # longer than a breath inside a question (~0.14 s in #17's calls); on a busy CPU the
    # covering partial comes later than this anyway (the partial, not the wait, sets when
    # a question ends: docs/voice.md, "What the system knows at a pause")
    question_ms: float = 160.0
    # a clause the local model has not scored, or reads as going on (P <= ``complete_p``):
    # callers pause 0.5-1.0 s between clauses (the 600 ms this was cut into 22 of 52 turns
    # of the natural-voice set, at pauses the model scored 0.01-0.3)
    clause_ms: float = 1200.0
    complete_p: float = 0.6  # over it the wait falls with the score ...
    sure_p: float = 0.7  # ... down to ``sure_ms`` at this score
    sure_ms: float = 200.0
    timeout_ms: float = 1200.0  # trailing off ("那个…", "and…"): callers may pause a while
    quiet_prob: float = 0.5
    cover_s: float = 0.2
    backdate_s: float = 0.25  # how far back the fade may date the silence
    barge_prob: float = 0.3  # speech probability that stops the agent while it talks
    # the line this far over its noise floor for ``hold_steps`` VAD steps while the agent
    # talks pauses its audio (a HoldFrame) until Silero confirms speech (the barge-in, dated
    # from the rise) or ``hold_s`` of audio passes without it (a ResumeFrame: play on, once
    # per stretch of agent speech); None: no holds (a line whose echo of the agent is not
    # cancelled would rise at every word)
    hold_rise_db: float | None = 10.0
    hold_steps: int = 2
    hold_s: float = 0.3
    # the audio end-of-turn model (with ``TurnStage(audio_eot=...)``)
    audio_done_p: float = 0.7  # at or above: the voice sounds finished
    audio_more_p: float = 0.25  # under: the voice goes on
    audio_every_ms: float = 200.0  # score again after this much more silence (unless done)
    fade_s: float = 0.048  # the level down this long: score the audio (as the ASR decodes)
    pre_speech_s: float = 0.5  # audio kept from before the speech started (the model's habit)
    # silence after which a covering partial is sent down as a TurnPauseFrame (the agent
    # prepares its answer; it speaks only on the TurnEndFrame); None: never
    prepare_ms: float | None = 0.0
    fused: dict[TextClass, tuple[float, float, float, float]] = field(
        default_factory=lambda: dict(_FUSED)
    )
    # questions scored too (with ``eot="lm+text"``, by the trained text model,
    # :mod:`rtgate.apps.voice.eot_text`; ``None``: questions are not scored): a question
    # read as going on (P under ``question_more_p``) outwaits the pauses callers make after
    # a complete first question (0.5-1.0 s)
    question_more_p: float | None = None
    question_more_ms: float = 1200.0
    # one fitted decision over the silence in place of the waits above (eot_rule.py,
    # session 15): speak once its P(end) of the covering partial's class, the text model's
    # score, the language and the silence reaches its bar (with ``TurnStage(text_eot=...)``);
    # None: the word rules. The audio model, when on, still fuses as before.
    learned: EotRule | None = None

    @classmethod
    def for_model(cls, kind: EotKind) -> TurnRules:
        """The operating points chosen on the validation calls for the end-of-turn models
        (docs/voice.md, Session 12): ``lm``, the local model on clauses; ``lm+text``, and
        the trained text model on questions."""
        if kind == "lm":
            return cls()
        return cls(question_more_p=TEXT_QUESTION_MORE_P)

    @classmethod
    def patient(cls) -> TurnRules:
        """The words never shorten the wait: every end waits ``clause_ms`` (1.2 s) of
        silence, longer than the pauses callers make inside a turn (0.3-1.0 s on the sets
        here). The other end of the trade from :meth:`for_model`: no answer over a caller
        who pauses after a complete first question, at 1.2 s to every first sound (the
        figures of both, on a blind set, in docs/voice.md, Session 33)."""
        wait = cls().clause_ms
        fused: dict[TextClass, tuple[float, float, float, float]] = {
            k: (max(a, wait), max(b, wait), max(c, wait), max(d, wait))
            for k, (a, b, c, d) in _FUSED.items()
        }
        return cls(
            question_ms=wait, sure_ms=wait, question_more_ms=wait, timeout_ms=wait, fused=fused
        )

    def scores(self, c: Cue | None) -> bool:
        """Whether a partial with this cue is worth an end-of-turn score."""
        return c == "clause" or (c == "question" and self.question_more_p is not None)

    def fused_wait_ms(self, text: TextClass, voice: Voice | None) -> float:
        """Silence needed with the audio model; ``voice`` ``None``: no score yet for this
        silence (the model runs off the loop; on a busy CPU a score takes ~100 ms)."""
        done, unsure, more, unheard = self.fused[text]
        if voice is None:
            return unheard
        return {"done": done, "unsure": unsure, "more": more}[voice]

    def clause_wait_ms(self, p_end: float | None) -> float:
        """Silence after a clause, by how sure the local model is that it ends the turn:
        ``clause_ms`` unscored or at most ``complete_p``, ``sure_ms`` from ``sure_p``, and
        falling linearly between (never a fixed medium wait for a clause read as going on)."""
        if p_end is None or p_end <= self.complete_p:
            return self.clause_ms
        if p_end >= self.sure_p:
            return min(self.sure_ms, self.clause_ms)
        share = (p_end - self.complete_p) / (self.sure_p - self.complete_p)
        return self.clause_ms + share * (min(self.sure_ms, self.clause_ms) - self.clause_ms)

    def wait_ms(self, c: Cue | None, p_end: float | None = None) -> float:
        """Silence that ends a turn by the words alone (the default, no audio model)."""
        return self.wait_rule(c, p_end)[0]

    def wait_rule(self, c: Cue | None, p_end: float | None = None) -> tuple[float, str]:
        """:meth:`wait_ms` and the name of the rule that set it."""
        if c == "question":
            more = self.question_more_p
            if more is not None and p_end is not None and p_end < more:
                return self.question_more_ms, "question_more"
            return self.question_ms, "question"
        if c == "clause":
            wait = self.clause_wait_ms(p_end)
            return wait, "complete" if wait < self.clause_ms else "clause"
        return self.timeout_ms, "timeout"


class TurnStage(Stage):
    """Decides turn ends (sent down to the agent and up to the ASR) and barge-ins.

    Forwards transcripts and speech events; consumes caller audio (nothing below needs it).
    With ``eot``, each partial that reads as a complete clause is scored in the background
    (the newest partial replaces an older one still being scored).
    Audio policy: drop the oldest past 64 frames.
    """

    name = "turns"
    policy = "drop_oldest"

    def __init__(
        self,
        rules: TurnRules | None = None,
        eot: EndOfTurn | None = None,
        audio_eot: AudioEndOfTurn | None = None,
        text_eot: TextScorer | None = None,
    ) -> None:
        super().__init__()
        self.rules = rules or TurnRules()
        self.eot = eot
        self.audio_eot = audio_eot
        self.text_eot = text_eot  # the trained text model, for ``rules.learned``
        self._p_text: tuple[str, str, float | None] | None = None  # (lang, text, score)
        # the turn's audio (from ``pre_speech_s`` before it started), at most 8.5 s
        self._audio: deque[tuple[float, np.ndarray]] = deque()
        self._audio_task: asyncio.Task[None] | None = None
        self.p_audio: tuple[int, float, float] | None = None  # (turn, audio until, p)
        self.audio_scores: list[tuple[int, float, float, float]] = []  # (turn, until, p, ms)
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
        self._rise_steps = 0  # consecutive steps over the hold bar while the agent talks
        self.hold_t: float | None = None  # audio time of the rise that paused the agent
        self._hold_spent = False  # this stretch of agent speech had a hold that resumed
        self.holds: list[tuple[float, bool]] = []  # (rise t, confirmed as a barge-in)
        self.caller_speaking: float | None = None  # start of the caller's speech, if on now
        self.ended: list[TurnEndFrame] = []
        self.paused: list[TurnPauseFrame] = []

    async def process_frame(self, frame: Frame, upstream: bool) -> None:
        if isinstance(frame, AgentStartedFrame | AgentStoppedFrame):
            self.agent_speaking = isinstance(frame, AgentStartedFrame)
            self._barged = False
            self._rise_steps, self._hold_spent = 0, False
            if not self.agent_speaking:
                self.hold_t = None  # the output let go of its hold when it stopped
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
                self.p_audio = None
                while self._audio and self._audio[0][0] < frame.t - self.rules.pre_speech_s:
                    self._audio.popleft()
        elif isinstance(frame, AudioFrame):
            self.now = max(self.now, frame.end)
            if self.audio_eot is not None:
                self._keep(frame)
            barge = self.agent_speaking and not self._barged and self.caller_speaking is None
            if barge and (frame.prob or 0.0) >= self.rules.barge_prob:
                # the VAD's speech start needs 0.5; while the agent talks (and the caller's
                # last speech has stopped: its probability trails off well after the turn
                # ended), a lower bar stops it sooner (noise stays under it: docs/voice.md)
                await self._barge_in(frame.t)
            elif barge:
                await self._hold(frame)
            if not frame.faded:
                self.loud_until = frame.end
            if frame.prob is not None and frame.prob >= self.rules.quiet_prob:
                self.quiet_since = None
            elif self.in_turn and self.quiet_since is None:
                # the probability trails the voice: date the silence from the fade when the
                # level has stayed down since (at most ``backdate_s`` back)
                since = max(self.loud_until, frame.t - self.rules.backdate_s)
                self.quiet_since = min(frame.t, since)
            faded_for = frame.end - self.loud_until
            if self.quiet_since is not None or (frame.faded and faded_for >= self.rules.fade_s):
                self._score_audio()  # at the fade: the score is ready when the VAD agrees
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
        if self.eot is None or not self.rules.scores(cue(frame.text)):
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
            await self._check()  # a question waiting for its score (see ``_check``)

    def _keep(self, frame: AudioFrame) -> None:
        self._audio.append((frame.t, frame.pcm))
        horizon = self.rules.pre_speech_s if not self.in_turn else 8.5
        while self._audio and self._audio[0][0] < frame.end - horizon:
            self._audio.popleft()

    def _voice(self) -> Voice | None:
        """What the voice says about the current silence (``None``: not scored yet)."""
        if self.p_audio is None or self.quiet_since is None:
            return None
        turn, until, p = self.p_audio
        if turn != self.turn or until < self.quiet_since:
            return None  # scored before this silence began
        return voice_class(p, self.rules)

    def _score_audio(self) -> None:
        """Score the turn's audio up to now when the level has faded for ``fade_s`` or a
        silence has begun (again every ``audio_every_ms`` of it); one score at a time, in a
        worker thread."""
        if self.audio_eot is None or not self.in_turn:
            return
        if self._audio_task is not None and not self._audio_task.done():
            return
        since = self.quiet_since if self.quiet_since is not None else self.loud_until
        if self.p_audio is not None:
            turn, until, p = self.p_audio
            fresh = turn == self.turn and until >= since
            if fresh and voice_class(p, self.rules) == "done":
                return  # more silence will not make it sound more finished
            if fresh and (self.now - until) * 1000.0 < self.rules.audio_every_ms:
                return
        pcm = np.concatenate([p for _, p in self._audio]) if self._audio else None
        if pcm is None or len(pcm) < RATE // 10:
            return
        self._audio_task = asyncio.create_task(self._audio_score_task(self.turn, self.now, pcm))

    async def _audio_score_task(self, turn: int, until: float, pcm: np.ndarray) -> None:
        assert self.audio_eot is not None
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        p = await asyncio.to_thread(self.audio_eot.p_end, pcm)
        self.audio_scores.append((turn, until, p, (loop.time() - t0) * 1000.0))
        if turn == self.turn:
            self.p_audio = (turn, until, p)
            await self._check()

    async def _check(self) -> None:
        if not self.in_turn or self.quiet_since is None:
            return
        silence_ms = (self.now - self.quiet_since) * 1000.0
        covering = self.covering()
        await self._pause(silence_ms, covering)
        c = cue(covering.text) if covering is not None else None
        p = None
        if covering is not None and self.p_end is not None:
            turn, text, score = self.p_end
            p = score if (turn, text) == (covering.turn, covering.text) else None
        if self.rules.learned is not None and self.audio_eot is None:
            await self._learned(self.rules.learned, silence_ms, covering)
            return
        if self.audio_eot is not None:
            tc = text_class(covering.text if covering is not None else None, p, self.rules)
            voice = self._voice()
            if silence_ms >= self.rules.fused_wait_ms(tc, voice):
                p_audio = self.p_audio[2] if voice is not None and self.p_audio else None
                await self._end(f"{tc}/{voice or 'unheard'}", p, p_audio)
            return
        if c == "question" and p is None and self.rules.question_more_p is not None:
            assert covering is not None
            if self._scoring_text == covering.text and not self._scoring_done():
                # the partial often comes after the question's 160 ms have passed: ending
                # before its score (one loop turn for the text model) would never let the
                # score hold a question that goes on
                return
        wait, rule = self.rules.wait_rule(c, p)
        if silence_ms >= wait:
            await self._end(rule, p)

    async def _learned(
        self, rule: EotRule, silence_ms: float, covering: TranscriptFrame | None
    ) -> None:
        """The fitted decision (:mod:`rtgate.apps.voice.eot_rule`): speak once its score at
        the silence reaches its bar, or at its timeout."""
        text = covering.text if covering is not None and covering.text.strip() else None
        tc = text_class(text, None, self.rules)  # "ask", "question", "clause" or "open"
        lang = covering.lang if covering is not None else self.lang
        p_text = self._text_score(text, lang)
        if rule.speaks(Place(tc, p_text, lang, silence_ms)):
            await self._end(f"learned/{tc}", p_text)

    def _text_score(self, text: str | None, lang: str) -> float | None:
        """The text model's P(end) of ``text`` (tens of microseconds; kept for its words)."""
        if text is None or self.text_eot is None:
            return None
        if self._p_text is None or self._p_text[:2] != (lang, text):
            self._p_text = (lang, text, self.text_eot.score(text, lang))
        return self._p_text[2]

    def _scoring_done(self) -> bool:
        return self._scoring is None or self._scoring.done()

    async def _pause(self, silence_ms: float, covering: TranscriptFrame | None) -> None:
        """A short pause with words that cover it: the agent may prepare (once per words)."""
        wait = self.rules.prepare_ms
        if wait is None or silence_ms < wait or covering is None or not covering.text.strip():
            return
        last = self.paused[-1] if self.paused else None
        if last is not None and (last.turn, last.text) == (self.turn, covering.text):
            return
        assert self.quiet_since is not None
        ev = TurnPauseFrame(turn=self.turn, text=covering.text, lang=covering.lang,
                            t=self.quiet_since)  # fmt: skip
        self.paused.append(ev)
        await self.push(ev)

    async def _hold(self, frame: AudioFrame) -> None:
        """Pause the agent on a rise of the line's level; resume it when no speech came."""
        bar = self.rules.hold_rise_db
        if bar is None:
            return
        if self.hold_t is not None:
            if frame.end - self.hold_t >= self.rules.hold_s:
                self.holds.append((self.hold_t, False))
                self.hold_t, self._hold_spent = None, True
                await self.push(ResumeFrame(t=frame.t))
            return
        over = frame.over_floor_db
        self._rise_steps = self._rise_steps + 1 if over is not None and over >= bar else 0
        if self._rise_steps >= self.rules.hold_steps and not self._hold_spent:
            self.hold_t = frame.t - (self.rules.hold_steps - 1) * len(frame.pcm) / RATE
            await self.push(HoldFrame(t=self.hold_t))

    async def _barge_in(self, t: float) -> None:
        self._barged = True  # once per stretch of agent speech
        if self.hold_t is not None:  # the rise was the voice: it started there
            t = min(t, self.hold_t)
            self.holds.append((self.hold_t, True))
            self.hold_t = None
        await self.push(InterruptionFrame(t=t))

    async def cleanup(self) -> None:
        for task in (self._scoring, self._audio_task):
            if task is not None:
                task.cancel()

    async def _end(
        self, rule: str, p_end: float | None = None, p_audio: float | None = None
    ) -> None:
        if not self.in_turn:
            return  # a score that arrived as the turn was ending
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
            p_audio=p_audio,
        )
        self.in_turn, self.latest, self.p_end, self.p_audio = False, None, None, None
        self.ended.append(ev)
        await self.push(ev, upstream=True)  # the ASR decodes the final transcript
        await self.push(ev)
