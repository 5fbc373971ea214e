"""The agent: an acknowledgement the moment the turn ends, the local model's answer, and the
big model's follow-up later.

Three gates, one per kind of work; nothing before the first sound waits on the cloud:

1. **ack** — ``ack_gate`` (a template table, then the local model) turns the transcript into
   a short acknowledgement (≤ 8 units: a Chinese character or an English word). While the
   caller speaks, acks for the partials are prepared (and synthesised) with a roomy budget;
   when the turn ends, the template is asked again with a tiny budget, else the prepared
   ack, else a generic one, is spoken at once.
2. **answer** — from the knowledge base first (``kb``, the shipped telecom domain by
   default: :mod:`rtgate.domains.knowledge`): the final transcript, after the domain's ASR
   corrections, is answered with an entry's own text when the intent classifier is sure
   of one intent and the domain's judge trusts it; anything unknown, multi-part or unsure
   gets the domain's short holding answer ("这个问题我帮您查一下，请稍等。") at once and
   the big model's follow-up, every time. With ``phrase=True`` the local model may phrase
   an entry, spoken only when it passes the entry's check (same numbers, same intent, no
   sentence twice), else the entry's text. With ``kb=None``, ``answer_gate`` (the local
   model) answers within the turn's budget, as before; sentences go to TTS as they form.
3. **follow-up** — a question that needs the big model goes to ``deep_gate`` with
   ``delegate=True`` and a budget no tier fits: the gate answers nothing in-line and runs
   the cloud tier as a background job; its answer is spoken once the local answer is done
   ("补充一下，…"). Nothing else waits for it. It is spoken only when the floor is free
   and may wait across the caller's next turn, unless the caller cancels it or it goes
   stale (:mod:`rtgate.apps.voice.followups`). Which questions: the ones a ``judge`` (the
   gate's "can the fast path answer this?", :mod:`rtgate.tiers.answerability`) does not
   trust the fast path with (several questions, conditions, parts), and the ones about
   refunds, policies and contracts, which no fast tier should settle alone (with a
   knowledge base: the turns it holds). The big model is given the first answer and asked
   not to repeat it; a follow-up that mostly repeats what was said is dropped, and its
   sentences already said are left out.

**Preparing is not speaking** (#17). At a short pause (a :class:`TurnPauseFrame`: the
caller is silent and a partial covers the silence) the agent prepares its answer to the
words so far: the knowledge base's reply, and its audio (``prefetch``, the TTS cache). It
says nothing. Only the :class:`TurnEndFrame` (a confident end) makes a sound: the ack, and,
when the turn ended on the very words that were prepared, the prepared answer right behind
it, without waiting for the final decode (the final transcript is kept for the history and
compared, ``speculation["final_differs"]``). A caller who resumes (a
:class:`SpeechStartFrame` before the end) discards the prepared answer without a sound; an
end on other words answers from the final transcript as before. The cloud tier is never
asked before the end: the follow-up starts only when an answer is committed.

A barge-in cancels the answer in flight (not the follow-up: only a line that takes the ask
back does), keeps what was said in the conversation history, and forwards the interruption
to TTS and output. A turn the caller talked over before it had an answer (its end was
decided at a pause inside the caller's ask) is not answered; the next turn is answered from
both turns' words (:meth:`AgentStage.whole_ask`), not from the tail alone.

The agent holds the floor from the ack to the answer's last sentence: when the output falls
silent in between (the ack is spoken, the answer is still being generated), its
``AgentStoppedFrame`` is held back, so caller speech in that gap is a barge-in too (the
answer is cancelled before it can start over the caller), not a new turn the agent then
talks over. The answer's text is queued for speech before its audio starts: while the
output is silent, the floor is kept until that audio starts (the next
``AgentStartedFrame``), not only until the text is queued (natural5: a caller who began in
that gap, while the answer was being synthesised, was talked over for 280 ms).

**A bounded record.** What the agent keeps per turn (the caller's words, what was said back,
routes, traces, verdicts, follow-up records) is kept for the latest ``keep_turns`` turns
(:data:`KEEP_TURNS`, 64) and forgotten, oldest first, at each turn's end; a follow-up job
leaves its table when it finishes. A call of any length holds a bounded record; a report
read at a call's end (``bench voice``, ``voice run``) covers its latest 64 turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Literal

from rtgate.apps.voice.followups import FollowupPolicy, FollowupQueue
from rtgate.apps.voice.frames import (
    AgentStartedFrame,
    AgentStoppedFrame,
    AgentTextFrame,
    EndFrame,
    Frame,
    InterruptionFrame,
    SpeechStartFrame,
    SpeechStopFrame,
    TranscriptFrame,
    TurnEndFrame,
    TurnPauseFrame,
)
from rtgate.apps.voice.pipeline import Stage
from rtgate.backends.stops import looping
from rtgate.core.budget import Budget
from rtgate.core.request import Message, Request
from rtgate.domains.knowledge import KnowledgeBase, Reply, repeat_share, shipped
from rtgate.gate import DoneEvent, FollowupEvent, Gate, TokenEvent
from rtgate.tiers.answerability import Judge

__all__ = [
    "ACK_UNITS",
    "FOLLOWUP_PREFIX",
    "GENERIC_ACK",
    "KEEP_TURNS",
    "REPEAT_SHARE",
    "AgentStage",
    "ack_units",
    "fresh_followup",
    "needs_big_model",
    "split_sentences",
    "whole_phrase",
]

ACK_UNITS = 8
GENERIC_ACK = {"zh": "嗯，好的。", "en": "Okay."}
FOLLOWUP_PREFIX = {"zh": "补充一下，", "en": "To add to that, "}
FOLLOWUP_AFTER_HOLD = {"zh": "关于您刚才的问题，", "en": "About your question: "}
# a follow-up spoken after the caller's next turn: it names the earlier question
FOLLOWUP_LATER = {"zh": "回到您之前的问题，", "en": "Back to your earlier question: "}
NO_REPEAT = {
    "zh": "（请接着回答我的问题，不要重复您刚才说过的话。）",
    "en": "(Please go on and answer my question, without repeating what you just said.)",
}
REPEAT_SHARE = 0.6  # a follow-up sentence with this share of its words already said is dropped
# a follow-up sentence that ends in a loop (``backends.stops.looping``: "但是我的宽带卡卡卡
# 卡卡…" from the local model behind the emulated cloud, natural9, session 27) is dropped too
_TRAILING = " \t\n.,!?;:…。，！？；：、"
# the records of the latest this many turns are kept (what the caller said, what was said
# back, routes, verdicts, follow-up records); older ones are forgotten at each turn's end, so
# a call of any length holds a bounded record (they grew by one entry a turn before session 16)
KEEP_TURNS = 64
FALLBACK_ANSWER = {"zh": "我再帮您确认一下。", "en": "Let me double-check that for you."}
_DEEP = re.compile(
    r"(退费|退款|退订|退钱|怎么退|违约|合同|政策|条款|赔偿|补偿|如果.*(并且|而且|还|又|和)|"
    r"refund|policy|contract|cancel|penalt|compensat|terms|if .* and )",
    re.IGNORECASE,
)
_UNIT = re.compile(r"[\u3400-\u9fff]|[A-Za-z0-9']+")
_SENT_END = re.compile(r"([。！？!?；;]|\.(?=\s|$))")


def needs_big_model(text: str) -> bool:
    """Refunds, policies, contracts, or several conditions at once: the big model's job."""
    return bool(_DEEP.search(text))


_PHRASE_END = re.compile(r"[。！？!?]|\.(?=\s|$)")
_CLAUSE_END = re.compile(r"[，,、；;：:]")


def whole_phrase(text: str) -> str | None:
    """``text`` kept up to its last complete phrase, or ``None`` when it holds none: an
    acknowledgement is spoken whole ("I'm sorry, I don'" is never said). A sentence
    mark ends a phrase; a comma does too when at least two units come before it (the
    comma becomes a full stop)."""
    text = text.strip()
    ends = [m.end() for m in _PHRASE_END.finditer(text)]
    if ends:
        return text[: ends[-1]].strip()
    commas = [m.start() for m in _CLAUSE_END.finditer(text)]
    for at in reversed(commas):
        head = text[:at].strip()
        if ack_units(head) >= 2:
            return head + ("。" if re.search(r"[\u3400-\u9fff]$", head) else ".")
    return None


def fresh_followup(text: str, said: list[str], lang: str) -> str:
    """What of a follow-up ``text`` is new: its sentences that repeat what was ``said`` (or
    an earlier sentence of its own) by :data:`REPEAT_SHARE` or more, or end in a loop
    (:func:`rtgate.backends.stops.looping`), left out; ``""`` when nothing new is left."""
    sentences, rest = split_sentences(text, soft=10_000)
    if rest.strip():
        sentences.append(rest.strip())
    kept: list[str] = []
    for sent in sentences:
        if not looping(sent.rstrip(_TRAILING)) and (
            repeat_share(sent, [*said, *kept], lang) < REPEAT_SHARE
        ):
            kept.append(sent)
    return ("" if lang == "zh" else " ").join(kept).strip()


def ack_units(text: str) -> int:
    """Length of an acknowledgement: Chinese characters plus English words."""
    return len(_UNIT.findall(text))


def split_sentences(buf: str, *, soft: int = 14) -> tuple[list[str], str]:
    """Complete sentences in ``buf`` and the rest; a comma also ends a chunk once the chunk
    is ``soft`` characters long (so the first sound of a long sentence is not held back)."""
    out: list[str] = []
    start = 0
    for i, ch in enumerate(buf):
        hard = _SENT_END.match(buf, i) is not None
        if hard or (ch in ",，、" and i + 1 - start >= soft):
            piece = buf[start : i + 1].strip()
            if piece:
                out.append(piece)
            start = i + 1
    return out, buf[start:]


@dataclass(slots=True)
class Prepared:
    """An answer prepared at a pause of ``turn`` for ``text``, not yet said."""

    turn: int
    text: str
    lang: str
    reply: Reply
    audio: asyncio.Task[None] | None = None  # its sentences being synthesised


def _sentences(text: str) -> list[str]:
    sentences, rest = split_sentences(text)
    if rest.strip():
        sentences.append(rest.strip())
    return sentences


async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a worker thread: how the agent runs a blocking read (the knowledge
    base's reply, whose semantic reader takes tens of ms) off the event loop."""
    return await asyncio.to_thread(fn, *args)


class AgentStage(Stage):
    """Speaks for the agent (see the module docstring). Text policy: wait."""

    name = "agent"
    # how blocking reads run (:func:`in_thread`); the unit tests run them inline, as they
    # run on a fake clock (tests/apps/voice/conftest.py), and one test in a thread
    run_blocking: Callable[..., Awaitable[Any]] = staticmethod(in_thread)

    def __init__(
        self,
        ack_gate: Gate,
        answer_gate: Gate,
        deep_gate: Gate | None = None,
        *,
        prefetch: Callable[[str, str], Coroutine[Any, Any, None]] | None = None,
        ack_budget_ms: float = 250.0,
        ack_turn_budget_ms: float = 15.0,
        answer_budget_ms: float = 2500.0,
        answer_tokens: int = 40,
        history_turns: int = 2,
        judge: Judge | None = None,
        kb: KnowledgeBase | Literal["telecom"] | None = "telecom",
        phrase: bool = False,
        speculate: bool = False,
        followup_policy: FollowupPolicy | None = None,
        keep_turns: int = KEEP_TURNS,
    ) -> None:
        super().__init__()
        self.judge = judge
        # never fewer than the history a prompt reads and the turn before (``whole_ask``)
        self.keep_turns = max(keep_turns, history_turns + 1, 2)
        # the knowledge base answered from first ("telecom": the shipped domain)
        self.kb: KnowledgeBase | None = shipped() if kb == "telecom" else (
            kb if isinstance(kb, KnowledgeBase) else None)  # fmt: skip
        self.phrase = phrase
        self.replies: dict[int, Reply] = {}  # the knowledge base's word on each turn
        self.joined: dict[int, int] = {}  # turn -> the unanswered turn read with it
        self.ack_gate, self.answer_gate, self.deep_gate = ack_gate, answer_gate, deep_gate
        self.prefetch = prefetch
        self.ack_budget_ms, self.ack_turn_budget_ms = ack_budget_ms, ack_turn_budget_ms
        self.answer_budget_ms, self.answer_tokens = answer_budget_ms, answer_tokens
        self.history_turns = history_turns
        self.caller_speaking = False
        self.turn_text: dict[int, str] = {}  # what the caller said, by turn
        self.interrupted: set[int] = set()
        self._turn = 0  # the turn the agent is replying to
        self.acks: dict[int, str] = {}  # turn -> ack prepared from a partial
        self.said: dict[int, list[str]] = {}  # everything spoken or queued, by turn
        self.answers: dict[int, list[str]] = {}  # the local model's answer, by turn
        self.routes: dict[int, str] = {}
        self.traces: dict[int, dict[str, Any]] = {}
        self.followups: dict[int, dict[str, Any]] = {}
        self.verdicts: dict[int, dict[str, Any]] = {}  # the judge's word on each turn
        self._prep: asyncio.Task[None] | None = None
        self._answer: asyncio.Task[None] | None = None
        self._deep: asyncio.Task[None] | None = None
        self._deeps: dict[int, asyncio.Task[None]] = {}  # follow-up jobs by turn
        self.pending = FollowupQueue(self._now, followup_policy or FollowupPolicy())
        self.caller_turn = False  # the caller has a turn open (first sound to its end)
        self._answer_turn = 0
        self._replying: int | None = None  # the turn whose reply holds the floor
        self._held: AgentStoppedFrame | None = None  # the output's stop, held back meanwhile
        self._playing = False  # the output is playing (its started / stopped frames)
        self._unheard = False  # text queued while the output is silent: its audio is to come
        self._release_on_start = False  # the reply is queued: the floor goes at its audio
        self._tasks: set[asyncio.Task[None]] = set()
        self.cancelled = 0  # generations cancelled by barge-ins
        # answers prepared at a pause (with a knowledge base; see the module docstring)
        self.speculate = speculate
        self._prepared: Prepared | None = None
        self._prep_seq = 0  # bumped by every pause, resume and turn end: a reading in
        # flight (a worker thread) lands only if nothing came after the pause it is for
        self._preparing: tuple[int, str] | None = None  # the pause being read
        self._committed: dict[int, Prepared] = {}  # turns answered from a prepared answer
        self.speculation = {"prepared": 0, "used": 0, "discarded": 0, "stale": 0,
                            "final_differs": 0, "superseded": 0}  # fmt: skip

    # -- frames ---------------------------------------------------------------------------

    async def process_frame(self, frame: Frame, upstream: bool) -> None:
        if isinstance(frame, TurnPauseFrame):
            self._prepare(frame)
            return  # consumed: nothing below acts on a pause
        if isinstance(frame, SpeechStartFrame | SpeechStopFrame):
            self.caller_speaking = isinstance(frame, SpeechStartFrame)
            if self.caller_speaking:
                self.caller_turn = True
                self._discard("discarded")  # the caller goes on: prepared, never said
        elif isinstance(frame, AgentStartedFrame):
            self._held = None  # talking again: a held stop is out of date
            self._playing, self._unheard = True, False
            if self._release_on_start:  # the reply's last audio has started: floor as usual
                self._release_on_start = False
                self._replying = None
                await self._speak_followups()
        elif isinstance(frame, AgentStoppedFrame) and upstream:
            self._playing = False
            if self._replying is not None and not frame.interrupted:
                self._held = frame  # a pause inside the reply: the agent keeps the floor
                return
        elif isinstance(frame, InterruptionFrame):
            self._interrupt()
            await self._done_replying(None)
        elif isinstance(frame, TurnEndFrame):
            await self._turn_end(frame)
            return
        elif isinstance(frame, TranscriptFrame):
            await self._transcript(frame)
            return
        elif isinstance(frame, EndFrame):
            for t in list(self._tasks):
                with contextlib.suppress(asyncio.CancelledError):
                    await t
            await self._done_replying(None)
        await self.push(frame, upstream)

    async def _done_replying(self, turn: int | None) -> None:
        """The reply to ``turn`` (``None``: whatever reply) is over: the floor is the
        caller's again, so a stop held back during the reply goes up now."""
        if turn is not None and turn != self._replying:
            return
        if turn is not None and self._held is not None and self._unheard:
            self._release_on_start = True  # queued but not yet playing: keep the floor
            return
        self._release_on_start = False
        self._replying = None
        held, self._held = self._held, None
        if held is not None:
            await self.push(held, upstream=True)
        await self._speak_followups()

    async def _transcript(self, frame: TranscriptFrame) -> None:
        if not frame.final:
            if frame.text and frame.turn not in self.turn_text:
                if self._prep is not None:
                    self._prep.cancel()
                self._prep = self._spawn(self._prepare_ack(frame.turn, frame.text, frame.lang))
            return
        text = frame.text or self.turn_text.get(frame.turn, "")
        prepared = self._committed.get(frame.turn)
        if prepared is not None:  # already answered from the prepared words
            if text:
                self.turn_text[frame.turn] = text
                if self.kb is not None and await self._differs(prepared, text):
                    self.speculation["final_differs"] += 1
                    self.verdicts.setdefault(frame.turn, {})["final_heard"] = text
            return
        for turn in self.pending.heard(frame.turn, text):  # "stop", "算了": asks taken back
            self._cancel_followup(turn)
        if not text:
            await self._done_replying(frame.turn)  # nothing to answer
            return
        self.turn_text[frame.turn] = text
        if frame.turn in self.interrupted:
            return  # the caller talked over this turn: keep their words, answer the next one
        self._answer_turn = frame.turn
        if self.kb is not None:
            asked = self.whole_ask(frame.turn, text, frame.lang)
            # off the event loop: the semantic reader takes tens of ms (an interruption
            # cancels this frame's processing, and so the answer, while it reads)
            reply = await self.run_blocking(self.kb.reply, asked, frame.lang)
            if self.caller_speaking:  # they went on while it read: no answer over them
                self.interrupted.add(frame.turn)  # their words join the next turn's
                return
            self._start_answer(frame.turn, text, frame.lang, reply)
            return
        answer = self._spawn(self._answer_turn_task(frame.turn, text, frame.lang))
        self._answer = answer
        if self.deep_gate is not None and self.wants_followup(frame.turn, text, frame.lang):
            job = self._followup(frame.turn, text, frame.lang, answer)
            self._ask_followup(frame.turn, frame.lang, job)

    def whole_ask(self, turn: int, text: str, lang: str) -> str:
        """What the knowledge base reads for ``turn``: its words, after the previous turn's
        when the caller talked over that one before it had an answer (its end was decided
        at a pause and the caller went on: one ask in two turns, the words are kept in
        ``turn_text``); ``text`` alone otherwise."""
        before = turn - 1
        if before not in self.interrupted or before in self.replies:
            return text
        head = self.turn_text.get(before, "").strip()
        if not head:
            return text
        self.joined[turn] = before
        return head + ("" if lang == "zh" else " ") + text

    def _start_answer(self, turn: int, text: str, lang: str, reply: Reply) -> None:
        """Speak the knowledge base's ``reply`` to ``turn`` and, when it asks for one,
        start the big model's follow-up in the background."""
        self.turn_text[turn] = text
        self._answer_turn = turn
        self.replies[turn] = reply
        self.verdicts[turn] = reply.to_dict()
        if turn in self.joined:
            self.verdicts[turn]["joined_turn"] = self.joined[turn]
        answer = self._spawn(self._answer_turn_task(turn, text, lang, reply))
        self._answer = answer
        if self.deep_gate is not None and reply.followup:
            job = self._followup(turn, reply.heard, lang, answer, reply.text)
            self._ask_followup(turn, lang, job)

    def wants_followup(self, turn: int, text: str, lang: str) -> bool:
        """Whether the big model should follow the local answer up; the judge's word is
        kept in ``verdicts`` (for the turn's record)."""
        policy = needs_big_model(text)
        if self.judge is None:
            return policy
        verdict = self.judge.judge(Request(input=text, meta={"lang": lang}), None)
        self.verdicts[turn] = {"p_right": round(verdict.p_right, 4), "why": verdict.why(),
                               "policy_words": policy}  # fmt: skip
        return policy or not verdict.answerable

    async def _turn_end(self, frame: TurnEndFrame) -> None:
        if self._prep is not None:
            self._prep.cancel()
        # no words yet (the ASR is behind): the VAD heard speech, so a generic ack still goes
        ack = None
        self._turn = frame.turn
        self._replying = frame.turn  # from the ack to the answer's last sentence
        self.caller_turn = False
        self.pending.turn_ended(frame.turn)
        self._forget_before(frame.turn)
        if frame.text.strip():
            self.turn_text.setdefault(frame.turn, frame.text)
            ack = await self._ack(frame.text, frame.lang, self.ack_turn_budget_ms)
        if ack is None:
            ack = self.acks.get(frame.turn) or GENERIC_ACK.get(frame.lang, "Okay.")
        self.said[frame.turn] = [ack]
        await self.push(AgentTextFrame(turn=frame.turn, kind="ack", text=ack, lang=frame.lang))
        prepared, self._prepared = self._prepared, None
        self._prep_seq += 1  # a reading still in flight is for a turn that has ended
        self._preparing = None
        if prepared is None:
            return
        if prepared.turn != frame.turn or prepared.text != frame.text or not frame.text.strip():
            self.speculation["stale"] += 1  # ended on other words: the final answers
            return
        self.speculation["used"] += 1
        self._committed[frame.turn] = prepared
        self._start_answer(frame.turn, prepared.text, prepared.lang, prepared.reply)

    # -- prepared answers ----------------------------------------------------------------

    def _prepare(self, frame: TurnPauseFrame) -> None:
        """Prepare the answer to the words so far (no sound): the knowledge base's reply,
        read in a worker thread (a pause is a control frame: a barge-in behind it must
        not wait for the semantic reader), then its audio. Without a knowledge base
        nothing is prepared (the local model's answer is a generation, too costly to
        throw away at every pause)."""
        if not self.speculate or self.kb is None or frame.turn in self.turn_text:
            return
        key = (frame.turn, frame.text)
        if self._preparing == key or (
            self._prepared is not None and (self._prepared.turn, self._prepared.text) == key
        ):
            return
        self._discard("stale")
        self._prep_seq += 1
        self._preparing = key
        self._spawn(self._read_prepared(frame, self._prep_seq))

    async def _read_prepared(self, frame: TurnPauseFrame, seq: int) -> None:
        assert self.kb is not None
        reply = await self.run_blocking(self.kb.reply, frame.text, frame.lang)
        if seq != self._prep_seq:
            self.speculation["superseded"] += 1  # the caller went on, or the turn ended
            return
        self._preparing = None
        prepared = Prepared(frame.turn, frame.text, frame.lang, reply)
        if self.prefetch is not None:
            prepared.audio = self._spawn(self._synthesise(_sentences(reply.text), frame.lang))
        self._prepared = prepared
        self.speculation["prepared"] += 1

    async def _synthesise(self, sentences: list[str], lang: str) -> None:
        assert self.prefetch is not None
        for sent in sentences:
            await self.prefetch(sent, lang)

    def _discard(self, why: str) -> None:
        """Drop the prepared answer (nothing of it was said), and any still being read."""
        self._prep_seq += 1
        self._preparing = None
        prepared, self._prepared = self._prepared, None
        if prepared is None:
            return
        if prepared.audio is not None:
            prepared.audio.cancel()
        self.speculation[why] += 1

    async def _differs(self, prepared: Prepared, final: str) -> bool:
        """Whether the final transcript would have been answered otherwise."""
        assert self.kb is not None
        again = await self.run_blocking(self.kb.reply, final, prepared.lang)
        return (again.kind, again.intent, again.text) != (
            prepared.reply.kind, prepared.reply.intent, prepared.reply.text)  # fmt: skip

    # -- acknowledgement ----------------------------------------------------------------

    async def _ack(self, text: str, lang: str, budget_ms: float) -> str | None:
        req = Request(input=text, max_tokens=ACK_UNITS, delegate=False, meta={"lang": lang})
        res = await self.ack_gate.answer(req, budget_ms)
        first = res.text.strip().splitlines()[0].strip() if res.text.strip() else ""
        ack = whole_phrase(first) if first else None  # a model cut by its budget: no fragment
        if res.placeholder or not ack or ack_units(ack) > ACK_UNITS:
            return None
        return ack

    async def _prepare_ack(self, turn: int, text: str, lang: str) -> None:
        ack = await self._ack(text, lang, self.ack_budget_ms)
        if ack is not None:
            self.acks[turn] = ack
            if self.prefetch is not None:
                await self.prefetch(ack, lang)

    # -- answer and follow-up -----------------------------------------------------------

    def _request(self, turn: int, text: str, lang: str, delegate: bool) -> Request:
        return Request(
            input=text,
            messages=[*self.history_before(turn, prompt=True), Message("user", text)],
            max_tokens=self.answer_tokens,
            delegate=delegate,
            meta={"lang": lang, "placeholder": FALLBACK_ANSWER.get(lang, "")},
        )

    async def _answer_turn_task(
        self, turn: int, text: str, lang: str, reply: Reply | None = None
    ) -> None:
        try:
            if reply is None:
                await self._answer_stream(turn, text, lang)
            else:
                await self._answer_kb(turn, reply, lang)
        finally:
            await self._done_replying(turn)

    async def _answer_kb(self, turn: int, reply: Reply, lang: str) -> None:
        """Speak the knowledge base's answer: the entry's text (or the local model's phrasing
        of it, when ``phrase`` and it passes the entry's check) or the holding answer."""
        assert self.kb is not None
        text, route = reply.text, "kb" if reply.kind == "entry" else "kb-hold"
        if self.phrase and reply.kind == "entry" and reply.intent is not None:
            req = self._request(turn, reply.heard, lang, delegate=False)
            res = await self.answer_gate.answer(req, self.answer_budget_ms)
            said = " ".join(res.text.split())
            ok = not res.placeholder and self.kb.phrasing_ok(said, reply.intent, lang)
            self.traces[turn] = {"phrasing": said, "phrasing_ok": ok, **res.trace.to_dict()}
            if ok:
                text, route = said, "kb-phrased"
        self.routes[turn] = route
        sentences = _sentences(text)
        said_turn = self.said.setdefault(turn, [])
        answer = self.answers.setdefault(turn, [])
        for i, sent in enumerate(sentences):
            said_turn.append(sent)
            answer.append(sent)
            last = i == len(sentences) - 1
            await self.push(AgentTextFrame(turn=turn, kind="answer", text=sent, lang=lang,
                                           last=last))  # fmt: skip

    async def _answer_stream(self, turn: int, text: str, lang: str) -> None:
        req = self._request(turn, text, lang, delegate=False)
        said = self.said.setdefault(turn, [])
        answer = self.answers.setdefault(turn, [])
        buf = ""
        async for ev in self.answer_gate.stream(req, self.answer_budget_ms):
            if isinstance(ev, TokenEvent):
                sentences, buf = split_sentences(buf + ev.text)
                for s in sentences:
                    said.append(s)
                    answer.append(s)
                    await self.push(AgentTextFrame(turn=turn, kind="answer", text=s, lang=lang))
            elif isinstance(ev, DoneEvent):
                self.routes[turn] = ev.result.route
                self.traces[turn] = ev.result.trace.to_dict()
                rest = buf.strip() or (ev.result.text if ev.result.placeholder else "")
                if rest:
                    said.append(rest)
                    answer.append(rest)
                await self.push(
                    AgentTextFrame(turn=turn, kind="answer", text=rest, lang=lang, last=True)
                )

    def followup_request(self, turn: int, text: str, lang: str, first: str | None) -> Request:
        """The big model's request: the conversation, and (when known) the first answer with
        the caller's ask to go on without repeating it."""
        req = self._request(turn, text, lang, delegate=True)
        if not first:
            return req
        note = NO_REPEAT.get(lang, NO_REPEAT["en"])
        msgs = [*req.messages, Message("assistant", first), Message("user", note)]
        return Request(input=text, messages=msgs, max_tokens=req.max_tokens, delegate=True,
                       meta={**req.meta, "first_answer": first})  # fmt: skip

    async def _followup(
        self,
        turn: int,
        text: str,
        lang: str,
        answer: asyncio.Task[None],
        first: str | None = None,
    ) -> None:
        """Ask the cloud tier in the background; its answer (only what it adds to what was
        said) is spoken after the local one, when the floor is free (``pending``)."""
        assert self.deep_gate is not None
        req = self.followup_request(turn, text, lang, first)
        async for ev in self.deep_gate.stream(req, Budget(1.0), follow=True):
            if not isinstance(ev, FollowupEvent):
                continue
            job = ev.job
            raw = " ".join(job.text.split())
            await asyncio.wait([answer])  # never talk over our own answer
            said = fresh_followup(raw, self.said.get(turn, []), lang) if raw else ""
            ok = bool(job.status == "done" and said)
            self.followups[turn] = {
                "status": job.status,
                "tier": job.tier,
                "text": said,
                "raw": raw,
                "dropped_as_repeat": bool(raw and not said),
                "spoken": False,
                "ttft_ms": job.ttft_ms,
                "elapsed_ms": job.elapsed_ms,
            }
            self.pending.ready(turn, said if ok else None)
            await self._speak_followups()

    def _ask_followup(self, turn: int, lang: str, job: Coroutine[Any, Any, None]) -> None:
        self.pending.ask(turn, lang)
        task = self._deep = self._deeps[turn] = self._spawn(job)

        def finished(done: asyncio.Task[None]) -> None:
            # a finished job leaves the table: it holds the jobs still running, no more
            if self._deeps.get(turn) is done:
                del self._deeps[turn]

        task.add_done_callback(finished)

    def _forget_before(self, turn: int) -> None:
        """Forget the records of the turns more than ``keep_turns`` before ``turn`` (the
        policy in the module docstring): what the caller said, what was said back, the
        routes, traces, verdicts and follow-up records. The history a prompt reads is the
        last ``history_turns`` turns, well inside them."""
        oldest = turn - self.keep_turns + 1
        records: tuple[dict[int, Any], ...] = (
            self.replies, self.joined, self.turn_text, self.acks, self.said, self.answers,
            self.routes, self.traces, self.followups, self.verdicts, self._committed,
        )  # fmt: skip
        for record in records:
            for old in [t for t in record if t < oldest]:
                del record[old]
        self.interrupted = {t for t in self.interrupted if t >= oldest}

    def _cancel_followup(self, turn: int) -> None:
        """Stop the job of ``turn`` (taken back or stale: its answer would not be said)."""
        task = self._deeps.pop(turn, None)
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()

    def floor_free(self) -> bool:
        """Whether the agent may start to speak unasked: it is not replying and the caller
        has no turn open (a pause inside their turn is theirs)."""
        return self._replying is None and not self.caller_speaking and not self.caller_turn

    async def _speak_followups(self) -> None:
        """Speak the follow-ups that are back, if the floor is free (see ``pending``)."""
        if not self.floor_free():
            return
        for p in self.pending.due():
            assert p.line is not None
            reply = self.replies.get(p.turn)
            if p.turn < self._turn:  # the caller has had another turn since
                prefix = FOLLOWUP_LATER
            elif reply is not None and reply.kind == "hold":
                prefix = FOLLOWUP_AFTER_HOLD
            else:
                prefix = FOLLOWUP_PREFIX
            line = prefix.get(p.lang, "") + p.line
            self.said.setdefault(p.turn, []).append(line)
            self.followups.setdefault(p.turn, {})["spoken"] = True
            self.followups[p.turn]["spoken_after_turn"] = self._turn
            await self.push(
                AgentTextFrame(turn=p.turn, kind="followup", text=line, lang=p.lang, last=True)
            )
        for turn, outcome in self.pending.outcomes.items():
            if outcome == "stale":
                self._cancel_followup(turn)

    @property
    def history(self) -> list[Message]:
        """The conversation so far (the last ``history_turns`` turns): what the caller said
        and what the agent said or had queued, interrupted replies included."""
        return self.history_before(None)

    def history_before(self, before: int | None, *, prompt: bool = False) -> list[Message]:
        """Turns before ``before``. For a model's ``prompt``: only the agent's answers, and
        none of an interrupted turn (small models copy acks and fragments back)."""
        out: list[Message] = []
        turns = [t for t in sorted(self.turn_text) if before is None or t < before]
        for turn in turns[-self.history_turns :]:
            out.append(Message("user", self.turn_text[turn]))
            lines = self.answers.get(turn, []) if prompt else self.said.get(turn, [])
            cut = turn in self.interrupted
            if prompt and cut:
                continue
            if lines:
                out.append(Message("assistant", " ".join(lines) + (" …" if cut else "")))
        return out

    def _interrupt(self) -> None:
        """Barge-in: cancel generation in flight; the history keeps what was said."""
        if self._turn:
            self.interrupted.add(self._turn)
        self._unheard = self._release_on_start = False  # the queued audio is dropped
        for task in (self._answer, self._prep):  # follow-ups: only a cancel line (pending)
            if task is not None and not task.done():
                task.cancel()
                self.cancelled += task is self._answer

    async def push(self, frame: Frame, upstream: bool = False) -> None:
        if not upstream and isinstance(frame, AgentTextFrame) and frame.text.strip():
            # queued while the output is silent: its audio starts with an AgentStartedFrame
            self._unheard = self._unheard or not self._playing
        await super().push(frame, upstream)

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def cleanup(self) -> None:
        for t in list(self._tasks):
            t.cancel()
