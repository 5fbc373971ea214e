"""``rtgate bench voice``: simulated phone calls through the real pipeline, in real time.

Each call is a script of caller turns in one language (half the calls Chinese, half
English), built from the packaged caller clips: plain questions, questions for the big
model, sentences with a pause in the middle (a trailing-off head, 0.6–0.9 s of silence,
then the rest), and barge-ins (the caller talks over the agent's answer). The simulated
caller waits for the agent to fall silent (a natural 0.4–0.8 s pause) before the next turn.

Two sets, reported separately: ``--set validation`` (default) plays the packaged clips (the
set thresholds are tuned on); ``--set eval --eval-dir DIR`` plays the held-out calls of
``rtgate voice make-eval`` (other sentences, voices, rates, pitches, pauses, noise).

Ground truth is the label written with each fixture (:func:`rtgate.apps.voice.labels.
true_bounds`: the first and last 10 ms frame over -45 dBFS), never the VAD:

- ``first_audio_ms``: from the true end of the caller's speech to the first agent audio;
- ``bargein_stop_ms``: from the true onset of a barge-in to the moment agent audio stopped;
- ``cut_in_rate`` (overall and per language): share of caller turns over which the agent
  *started* talking (an agent utterance began between the turn's true onset and true end;
  speech already under way when a barge-in starts is not a cut-in);
- ``interruption_rate``: share of caller turns whose end the agent decided early (before
  the true end), whether or not it spoke;
- ``answer_on_topic_rate``: share of first answers on the caller's topic by the knowledge
  base's check (``kb_eval.on_topic``; an ood call is on topic with an honest holding
  answer); ``answer_on_topic.keyword_rate`` by the plain keyword check
  :func:`~rtgate.apps.voice.labels.keyword_on_topic` (ood left out); every call's turns,
  topics and first answers are in ``calls_detail``;
- ``serial_baseline``: the same question clips through serial ASR → LLM → TTS (fixed
  silence endpointing, full-window Whisper, the whole answer, then its whole audio),
  measured in the same run on the same models.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from rtgate.apps.voice.frames import (
    RATE,
    AgentTextFrame,
    Pcm,
    SpeechStartFrame,
    SpeechStopFrame,
    TranscriptFrame,
    TurnEndFrame,
)
from rtgate.apps.voice.labels import keyword_on_topic, true_bounds
from rtgate.apps.voice.packaged import data_path
from rtgate.apps.voice.session import VoiceCall, VoiceConfig, VoiceModels
from rtgate.apps.voice.transport import RecordingOut, read_wav
from rtgate.apps.voice.turns import EotKind
from rtgate.apps.voice.vad import CHUNK, SileroVAD, SpeechTracker
from rtgate.core.budget import Budget
from rtgate.core.request import Piece, Request

__all__ = [
    "Clip",
    "agent_starts",
    "cut_rule",
    "percentiles",
    "run",
    "smart_turn_cost",
    "speech_bounds",
    "turn_end_of",
]

FRAME = RATE // 50  # the simulated caller sends 20 ms at a time, as a phone line (RTP) does


@dataclass(frozen=True, slots=True)
class Clip:
    name: str
    lang: str
    kind: str
    text: str
    pcm: Pcm
    onset: float  # seconds of the first speech in the clip (the true label)
    end: float  # seconds of the end of speech (the true label)
    topic: str | None = None
    pauses_at: tuple[tuple[float, float], ...] = ()  # drawn pauses inside (s of the clip)


def speech_bounds(pcm: Pcm, db: float = -40.0) -> tuple[float, float]:
    """Onset and end of speech by energy (20 ms frames over ``db`` dBFS)."""
    step = RATE // 50
    n = len(pcm) // step
    rms = np.sqrt(np.mean(pcm[: n * step].reshape(n, step) ** 2, axis=1) + 1e-12)
    loud = np.flatnonzero(20 * np.log10(rms) > db)
    if not len(loud):
        return 0.0, 0.0
    return loud[0] * step / RATE, (loud[-1] + 1) * step / RATE


def load_clips() -> dict[str, Clip]:
    manifest = json.loads(data_path("clips", "clips.json").read_text(encoding="utf-8"))
    out = {}
    for name, m in manifest.items():
        pcm = read_wav(data_path("clips", f"{name}.wav"))
        onset, end = (m["onset_s"], m["end_s"]) if "end_s" in m else true_bounds(pcm)
        out[name] = Clip(name, m["lang"], m["kind"], m["text"], pcm, onset, end, m.get("topic"))
    return out


def load_eval(folder: Path) -> list[tuple[str, list[Turn], dict[str, Any]]]:
    """The calls of ``rtgate voice make-eval``: (language, turns, voice) per call."""
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    calls = []
    for c in manifest["calls"]:
        turns = []
        for t in c["turns"]:
            pcm = read_wav(folder / t["wav"])
            kind = t["kind"]
            at = tuple((float(a), float(b)) for a, b in t.get("pauses_at_s", []))
            clip = Clip(
                t["wav"], c["lang"], kind, t["text"], pcm, t["onset_s"], t["end_s"], t["topic"],
                at,
            )  # fmt: skip
            turns.append(Turn([(clip, 0.0)], bargein=bool(t["bargein"])))
        calls.append((c["lang"], turns, c["voice"]))
    return calls


def percentiles(xs: list[float]) -> dict[str, float | None]:
    if not xs:
        return {"p50": None, "p95": None}
    a = np.asarray(xs, dtype=np.float64)
    return {
        "p50": round(float(np.percentile(a, 50)), 1),
        "p95": round(float(np.percentile(a, 95)), 1),
    }


@dataclass(slots=True)
class Turn:
    """One scripted caller turn: clips with pauses between them."""

    parts: list[tuple[Clip, float]]  # (clip, silence after it inside the turn)
    bargein: bool = False
    # filled in while the call runs (audio seconds)
    onset: float = 0.0
    end: float = 0.0


@dataclass(slots=True)
class CallResult:
    first_audio_ms: list[float] = field(default_factory=list)
    answer_audio_ms: list[float] = field(default_factory=list)  # true end -> answer's audio
    decision_ms: list[float] = field(default_factory=list)
    decode_ms: list[float] = field(default_factory=list)
    bargein_stop_ms: list[float] = field(default_factory=list)
    turns: int = 0
    cut_ins: int = 0
    missed_bargeins: int = 0
    holds: list[int] = field(default_factory=lambda: [0, 0, 0])  # confirmed, resumed, expired
    by_lang: dict[str, list[int]] = field(default_factory=dict)  # lang -> [turns, cut-ins]
    calls: list[dict[str, Any]] = field(default_factory=list)
    audio_ms: list[float] = field(default_factory=list)  # Smart Turn calls, wall time
    cut_in_details: list[dict[str, Any]] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)
    by_rule: list[tuple[str, float]] = field(default_factory=list)
    slow: list[dict[str, Any]] = field(default_factory=list)
    speculation: dict[str, int] = field(default_factory=dict)  # prepared answers, counted
    dropped: dict[str, int] = field(default_factory=dict)  # frames a stage dropped (live)

    def add(self, r: CallResult) -> None:
        """Add one call's results to these totals."""
        self.first_audio_ms += r.first_audio_ms
        self.answer_audio_ms += r.answer_audio_ms
        self.decision_ms += r.decision_ms
        self.decode_ms += r.decode_ms
        self.rules += r.rules
        self.by_rule += r.by_rule
        self.slow += r.slow
        self.bargein_stop_ms += r.bargein_stop_ms
        self.turns += r.turns
        self.cut_ins += r.cut_ins
        self.missed_bargeins += r.missed_bargeins
        self.holds = [a + b for a, b in zip(self.holds, r.holds, strict=True)]
        self.cut_in_details += r.cut_in_details
        for key, n in r.speculation.items():
            self.speculation[key] = self.speculation.get(key, 0) + n
        for key, n in r.dropped.items():
            self.dropped[key] = self.dropped.get(key, 0) + n
        for lang, (n, k) in r.by_lang.items():
            row = self.by_lang.setdefault(lang, [0, 0])
            row[0] += n
            row[1] += k
        self.calls += r.calls
        self.audio_ms += r.audio_ms


def _script(rng: random.Random, clips: dict[str, Clip], lang: str, n: int) -> list[Turn]:
    mine = [c for c in clips.values() if c.lang == lang]
    questions = [c for c in mine if c.kind in ("question", "deep")]
    head = next(c for c in mine if c.kind == "head")
    tail = next(c for c in mine if c.kind == "tail")
    barge = next(c for c in mine if c.kind == "bargein")
    turns: list[Turn] = []
    style = (n // 2) % 4  # 0: questions, 1: a mid-sentence pause, 2: a barge-in, 3: both
    turns.append(Turn([(rng.choice(questions), 0.0)]))
    if style in (1, 3):
        turns.append(Turn([(head, rng.uniform(0.6, 0.9)), (tail, 0.0)]))
    if style in (2, 3):
        turns.append(Turn([(barge, 0.0)], bargein=True))
    turns.append(Turn([(rng.choice(questions), 0.0)]))
    return turns


async def _call(
    models: VoiceModels,
    turns: list[Turn],
    rng: random.Random,
    lang: str,
    floor: Pcm | None = None,
    about: dict[str, Any] | None = None,
) -> CallResult:
    """One call; ``floor``: the line's noise between the caller's turns (looped), else
    digital silence."""
    out = RecordingOut()
    res = CallResult()
    pos = 0

    def quiet(n: int) -> Pcm:
        nonlocal pos
        if floor is None or not len(floor):
            return np.zeros(n, dtype=np.float32)
        idx = (pos + np.arange(n)) % len(floor)
        pos += n
        return floor[idx]

    async with VoiceCall(models, out, lang=lang) as call:

        async def idle_for(seconds: float, limit: float) -> None:
            """Feed silence until the agent has answered and then been quiet ``seconds``
            (at most ``limit``): a caller waits for the reply before going on."""
            quiet_s, waited, heard = 0.0, 0.0, len(out.chunks)
            while waited < limit and not (quiet_s >= seconds and len(out.chunks) > heard):
                await call.feed(quiet(FRAME), frame=FRAME)
                waited += FRAME / RATE
                quiet_s = 0.0 if call.output.playing else quiet_s + FRAME / RATE

        await call.feed(quiet(RATE // 2), frame=FRAME)
        for turn in turns:
            if turn.bargein:
                waited = 0.0
                while not call.output.playing and waited < 4.0:
                    await call.feed(quiet(FRAME), frame=FRAME)
                    waited += FRAME / RATE
                await call.feed(quiet(int(rng.uniform(0.3, 0.8) * RATE)), frame=FRAME)
            else:
                await idle_for(rng.uniform(0.4, 0.8), 8.0)
            start = call.fed
            first, last = turn.parts[0][0], turn.parts[-1][0]
            for clip, pause in turn.parts:
                await call.feed(clip.pcm, frame=FRAME)
                if pause:
                    await call.feed(quiet(int(pause * RATE)), frame=FRAME)
            turn.onset = start + first.onset
            turn.end = call.fed - len(last.pcm) / RATE + last.end
        await idle_for(0.8, 8.0)
        await call.finish()
        _score(call, out, turns, res, lang, about or {})
    return res


def agent_starts(out: RecordingOut, gap_s: float = 0.06) -> list[tuple[float, str]]:
    """(loop time, kind) of each agent utterance's start: its first chunk, and every chunk
    that begins more than ``gap_s`` after the previous one ended."""
    starts: list[tuple[float, str]] = []
    prev_end = -1e9
    for c in sorted(out.chunks, key=lambda c: c.at):
        if c.at - prev_end > gap_s:
            starts.append((c.at, c.kind))
        prev_end = max(prev_end, c.at + len(c.pcm) / RATE)
    return starts


def _texts(call: VoiceCall, turn: int, kind: str) -> str:
    return " ".join(
        f.text
        for _, s, f in call.events
        if s == "agent" and isinstance(f, AgentTextFrame) and f.turn == turn and f.kind == kind
    ).strip()


def _kb_on_topic(answer: str, topic: str | None, lang: str) -> bool:
    """The knowledge base's own check (``kb_eval.on_topic``: the entry's reply, a holding
    answer naming the topic, or the answer's keywords and intent; for an ood call only an
    honest holding answer); a set's labels are read as the domain's ids (``topic_ids``)."""
    from rtgate.apps.voice.kb_eval import on_topic

    return on_topic(answer, topic or "ood", lang)


def _label(topic: str | None) -> str | None:
    """A set's topic label as the domain's id (``kb_eval.topic_ids``), ``None`` outside."""
    from rtgate.apps.voice.kb_eval import topic_ids

    ids = topic_ids(topic)
    return None if ids == "ood" else str(ids)


def _unknown(rows: list[dict[str, Any]]) -> list[str]:
    """Topic labels of scored turns that no answer can be on (a set's labelling error)."""
    from rtgate.apps.voice.kb_eval import unknown_topics

    return sorted(
        {t for r in rows if r["on_topic"] is not None for t in unknown_topics(r["topic"])}
    )


def turn_end_of(ends: Mapping[int, TurnEndFrame], onset: float, end: float) -> list[int]:
    """The agent's turn (a list of one, or empty) that ended the caller's turn spoken from
    ``onset`` to ``end`` (true bounds, the call's audio time): the end dated at the true end
    (within -0.05..+0.5 s); failing that, one dated inside the turn but decided after it,
    where the VAD took the last, quiet words for silence. Without the second reading such a
    turn, answered, was scored as never answered (natural10's "no answer" rows, session 33)."""
    at_end = [n for n, e in ends.items() if end - 0.05 <= e.t <= end + 0.5]
    if at_end:
        return at_end[:1]
    late = [n for n, e in ends.items() if onset < e.t < end and e.decided_t >= end]
    return late[:1]


def _score(
    call: VoiceCall,
    out: RecordingOut,
    turns: list[Turn],
    res: CallResult,
    lang: str,
    about: dict[str, Any],
) -> None:
    decided = {
        f.turn: at for at, s, f in call.events if s == "turns" and isinstance(f, TurnEndFrame)
    }
    ends = {e.turn: e for e in call.turns.ended}
    finals = {
        f.turn: f.text
        for _, s, f in call.events
        if s == "asr" and isinstance(f, TranscriptFrame) and f.final
    }
    res.decode_ms += [
        f.decode_ms for _, s, f in call.events if s == "asr" and isinstance(f, TranscriptFrame)
    ]
    starts = agent_starts(out)
    for key, count in call.agent.speculation.items():
        res.speculation[key] = res.speculation.get(key, 0) + count
    for stage in call.pipeline.stages:  # a stage that fell 64 frames behind drops the oldest
        res.dropped[stage.name] = res.dropped.get(stage.name, 0) + stage.dropped
    res.audio_ms += [ms for _, _, _, ms in call.turns.audio_scores]
    confirmed = sum(ok for _, ok in call.turns.holds)
    res.holds = [confirmed, len(call.turns.holds) - confirmed, call.output.expired]
    lang_row = res.by_lang.setdefault(lang, [0, 0])
    rows: list[dict[str, Any]] = []
    for i, turn in enumerate(turns):
        res.turns += 1
        lang_row[0] += 1
        clip = turn.parts[-1][0]
        t_onset, t_end = call.t0 + turn.onset, call.t0 + turn.end
        mine = turn_end_of(ends, turn.onset, turn.end)
        if mine:
            res.decision_ms.append((decided[mine[0]] - t_end) * 1000.0)
            res.rules.append(ends[mine[0]].rule)
        early = [e for e in call.turns.ended if turn.onset < e.decided_t < turn.end]
        if early:
            res.cut_ins += 1  # decided early (interruption_rate)
            e = early[0]
            res.cut_in_details.append(
                {
                    "clips": [c.name for c, _ in turn.parts],
                    "rule": e.rule,
                    "heard": e.text,
                    "p_end": None if e.p_end is None else round(e.p_end, 3),
                    "p_audio": None if e.p_audio is None else round(e.p_audio, 3),
                    "decided_s_before_end": round(turn.end - e.decided_t, 3),
                }
            )
        # the agent started talking over them
        over = [(st, kind) for st, kind in starts if t_onset < st < t_end]
        if over:
            lang_row[1] += 1
        nxt = call.t0 + turns[i + 1].onset if i + 1 < len(turns) else float("inf")
        after = [st for st, _ in starts if t_end <= st < nxt]
        first_ms = None
        if after and not over:
            first_ms = (min(after) - t_end) * 1000.0
            res.first_audio_ms.append(first_ms)
            rule = ends[mine[0]].rule if mine else "none"
            res.by_rule.append((rule, first_ms))
            if first_ms > 300:
                res.slow.append(_why_slow(call, turn, ends[mine[0]] if mine else None, first_ms))
        answer_ms = None
        answers = [c.at for c in out.chunks if c.kind == "answer" and t_end <= c.at < nxt]
        if answers and not over:
            answer_ms = (min(answers) - t_end) * 1000.0
            res.answer_audio_ms.append(answer_ms)
        stop_ms = None
        if turn.bargein:
            stops = [at for t, at in call.output.stops if turn.onset - 0.2 <= t < turn.end]
            if stops:
                stop_ms = (min(stops) - t_onset) * 1000.0
                res.bargein_stop_ms.append(stop_ms)
            else:
                res.missed_bargeins += 1
        n = mine[0] if mine else (early[0].turn if early else None)
        why = _why_cut(call, out, turn, over[0][0], ends) if over else None
        answer = _texts(call, n, "answer") if n is not None else ""
        end = ends.get(n) if n is not None else None
        rows.append(
            {
                "text": clip.text
                if len(turn.parts) == 1
                else " | ".join(c.text for c, _ in turn.parts),
                "topic": clip.topic,
                "kind": clip.kind,
                "bargein": turn.bargein,
                "true_onset_s": round(turn.onset, 3),
                "true_end_s": round(turn.end, 3),
                "heard": finals.get(n) if n is not None else None,
                "rule": end.rule if end else None,
                "p_end": None if end is None or end.p_end is None else round(end.p_end, 3),
                "p_audio": None if end is None or end.p_audio is None else round(end.p_audio, 3),
                "ack": _texts(call, n, "ack") if n is not None else "",
                "answer": answer,
                "followup": _texts(call, n, "followup") if n is not None else "",
                "first_audio_ms": None if first_ms is None else round(first_ms, 1),
                "answer_audio_ms": None if answer_ms is None else round(answer_ms, 1),
                "cut_in": bool(over),
                "cut_in_by": [
                    {"kind": kind, "after_onset_ms": round((st - t_onset) * 1000.0, 1)}
                    for st, kind in over
                ],
                "cut_in_why": why,
                "cut_rule": cut_rule(why, early[0].rule if early else None),
                "decided_early": bool(early),
                "bargein_stop_ms": None if stop_ms is None else round(stop_ms, 1),
                "on_topic": None if turn.bargein else _kb_on_topic(answer, clip.topic, lang),
                "on_topic_keywords": None
                if turn.bargein
                else keyword_on_topic(answer, _label(clip.topic)),
                # the knowledge base's decision and the follow-up job (for the diagnosis)
                "judge": call.agent.verdicts.get(n) if n is not None else None,
                "followup_job": _job(call.agent.followups.get(n)) if n is not None else None,
                # spoken / cancelled / stale / failed (None: never asked, or out at hang-up)
                "followup_outcome": call.agent.pending.outcomes.get(n) if n is not None else None,
            }
        )
    res.calls.append({"lang": lang, "voice": about, "turns": rows})


def _job(job: dict[str, Any] | None) -> dict[str, Any] | None:
    """A follow-up job's record without its timings' noise (status, spoken, dropped)."""
    if job is None:
        return None
    keys = ("status", "spoken", "dropped_as_repeat", "raw", "spoken_after_turn")
    return {k: job.get(k) for k in keys}


def cut_rule(why: dict[str, Any] | None, early: str | None = None) -> str | None:
    """The rule behind a cut-in: that of the decision whose sound started inside the turn
    (``late:RULE`` when it answered an earlier turn, ``unknown`` without a decision); else
    the rule of the first decision made inside the turn (``early``). A cut turn's own
    ``rule`` is that of the end decided after its tail, near the true end: the cut-ins that
    reports counted as `clause` had been decided by `question` at a pause (docs/voice.md,
    session 14)."""
    if why is None:
        return early
    d = why.get("decision")
    if not d:
        return "unknown"
    return str(d["rule"]) if d.get("this_turn", True) else f"late:{d['rule']}"


def _why_cut(
    call: VoiceCall, out: RecordingOut, turn: Turn, at: float, ends: dict[int, TurnEndFrame]
) -> dict[str, Any]:
    """Why the agent's sound started inside a caller's turn, in seconds of the turn's first
    clip: the sound (its kind and the turn it answers), the decision behind it (its rule,
    where turn-taking dated the silence, when it decided, the silence it had counted), and
    the drawn pauses inside the turn (``pauses_at_s``)."""
    clip = turn.parts[0][0]
    base = turn.onset - clip.onset  # audio time of the clip's first sample
    chunk = next(c for c in out.chunks if c.at == at)
    row: dict[str, Any] = {
        "kind": chunk.kind,
        "text": chunk.text,
        "sound_s": round(at - call.t0 - base, 3),
        "pauses_at_s": [list(p) for p in clip.pauses_at],
        "true_onset_s": round(clip.onset, 3),
        "true_end_s": round(turn.end - base, 3),
        # the VAD's speech starts (+) and stops (-) inside the turn up to the sound
        "speech": [
            f"{'+' if isinstance(f, SpeechStartFrame) else '-'}{f.t - base:.3f}"
            for _, s, f in call.events
            if s == "vad"
            and isinstance(f, SpeechStartFrame | SpeechStopFrame)
            and turn.onset - 0.3 <= f.t <= at - call.t0
        ],
    }
    e = ends.get(chunk.turn)
    if e is None:
        return row | {"decision": None}
    silence = e.t - base
    inside = [p for p in clip.pauses_at if p[0] - 0.05 <= silence <= p[1]]
    return row | {
        "decision": {
            "turn": e.turn,
            "this_turn": turn.onset <= e.decided_t,  # else an earlier turn's sound came late
            "rule": e.rule,
            "heard": e.text,
            "p_end": None if e.p_end is None else round(e.p_end, 3),
            "silence_from_s": round(silence, 3),
            "decided_s": round(e.decided_t - base, 3),
            "silence_counted_ms": round((e.decided_t - e.t) * 1000.0, 1),
            "in_pause": list(inside[0]) if inside else None,
        }
    }


def _why_slow(call: VoiceCall, turn: Turn, end: TurnEndFrame | None, ms: float) -> dict[str, Any]:
    """Where a slow turn's time went, in ms after the true end of speech: the VAD's silence
    start, the covering partial's arrival (and its decode), the decision."""
    row: dict[str, Any] = {"clips": [c.name for c, _ in turn.parts], "first_audio_ms": round(ms, 1)}
    if end is None:
        return row | {"rule": "none"}
    t_end = call.t0 + turn.end
    heard = [
        (at, f)
        for at, s, f in call.events
        if s == "asr" and isinstance(f, TranscriptFrame) and f.turn == end.turn and not f.final
    ]
    cover = next(((at, f) for at, f in heard if f.text == end.text), None)
    told = next((at for at, s, f in call.events if s == "turns" and f is end), None)
    return row | {
        "rule": end.rule,
        "heard": end.text,
        "p_end": None if end.p_end is None else round(end.p_end, 3),
        "silence_from_ms": round((end.t - turn.end) * 1000.0, 1),
        "decided_ms": round((end.decided_t - turn.end) * 1000.0, 1),
        "decided_at_ms": None if told is None else round((told - t_end) * 1000.0, 1),
        "partial_at_ms": None if cover is None else round((cover[0] - t_end) * 1000.0, 1),
        "partial_decode_ms": None if cover is None else round(cover[1].decode_ms, 1),
    }


async def _serial(models: VoiceModels, clips: list[Clip], hangover_ms: float) -> list[float]:
    """End of speech → first audio when every stage waits for the previous one."""
    assert models.asr and models.tts and models.answer_gate
    out = []
    for clip in clips:
        pcm = np.concatenate([clip.pcm, np.zeros(RATE * 2, dtype=np.float32)])
        vad, tracker = SileroVAD(), SpeechTracker(hangover_ms=hangover_ms)
        stop_at = None
        for i in range(0, len(pcm) - CHUNK + 1, CHUNK):
            ev = tracker.update(i / RATE, vad.prob(pcm[i : i + CHUNK]))
            if ev is not None and not tracker.speaking:
                stop_at = (i + CHUNK) / RATE  # when the endpoint is declared
        endpoint_ms = ((stop_at or len(pcm) / RATE) - clip.end) * 1000.0
        t0 = time.perf_counter()
        asr = models.asr_for(clip.lang)
        tr = await asyncio.to_thread(asr.transcribe, clip.pcm, clip.lang, final=True)
        local = models.answer_gate.by_name["local"]
        req = Request(input=tr.text, max_tokens=models.cfg.answer_tokens, delegate=False)
        pieces = [x async for x in local.stream(req, Budget(30_000))]
        text = "".join(p.text if isinstance(p, Piece) else p for p in pieces)
        await models.tts.synth(text or "Okay.", clip.lang)  # the whole answer before any sound
        models.tts._cache.clear()
        out.append(endpoint_ms + (time.perf_counter() - t0) * 1000.0)
    return out


async def _run(
    calls: int,
    seed: int,
    asr_model: str,
    serial_hangover_ms: float,
    semantic_turns: bool,
    asr_step_s: float,
    audio_turns: bool,
    eval_dir: Path | None,
    speculate: bool = False,
    hold: bool = True,
    eot: EotKind = "lm+text",
    asr_prompt: bool = False,
    learned_turns: bool | None = None,
    patient_turns: bool = False,
) -> dict[str, Any]:
    rng = random.Random(seed)
    cfg = VoiceConfig(
        asr_model=asr_model,
        semantic_turns=semantic_turns,
        eot=eot,
        asr_step_s=asr_step_s,
        audio_turns=audio_turns,
        speculate=speculate,
        asr_prompt=asr_prompt,
        learned_turns=VoiceConfig().learned_turns if learned_turns is None else learned_turns,
        patient_turns=patient_turns,
    )
    if not hold:
        cfg = replace(cfg, rules=replace(cfg.turn_rules(), hold_rise_db=None))
    total = CallResult()
    serial: list[float] = []
    async with VoiceModels(cfg) as models:
        if eval_dir is not None:
            from rtgate.apps.voice.evalset import line_noise

            held = load_eval(eval_dir)[:calls] if calls else load_eval(eval_dir)
            for n, (lang, turns, voice) in enumerate(held):
                floor = line_noise(RATE * 7, voice["noise_db"], voice["hum"], seed * 100 + n)
                total.add(await _call(models, turns, rng, lang, floor, voice))
            calls = len(held)
        else:
            clips = load_clips()
            for n in range(calls):
                lang = "zh" if n % 2 == 0 else "en"
                total.add(await _call(models, _script(rng, clips, lang, n), rng, lang))
            questions = [c for c in clips.values() if c.kind in ("question", "deep")]
            serial = await _serial(models, questions, serial_hangover_ms)
    report = _report(calls, total, serial, serial_hangover_ms, cfg)
    report["audio_eot_call_ms"] = percentiles(total.audio_ms)
    report["set"] = "validation" if eval_dir is None else f"eval ({eval_dir})"
    return report


def _on_topic(rows: list[dict[str, Any]]) -> dict[str, Any]:
    scored = [r["on_topic"] for r in rows if r["on_topic"] is not None]
    words = [r["on_topic_keywords"] for r in rows if r["on_topic_keywords"] is not None]
    return {
        "rate": round(sum(scored) / len(scored), 4) if scored else None,
        "turns": len(scored),
        "check": "kb_eval.on_topic (the knowledge base's check; ood: an honest holding answer)",
        "keyword_rate": round(sum(words) / len(words), 4) if words else None,
        "keyword_turns": len(words),
        "keyword_check": "labels.keyword_on_topic (a keyword per topic id; ood left out)",
    }


def _report(
    calls: int, total: CallResult, serial: list[float], serial_hangover_ms: float, cfg: VoiceConfig
) -> dict[str, Any]:
    """The JSON report: the calls' totals, the serial baseline and the settings."""
    rows = [r for c in total.calls for r in c["turns"]]
    by_lang = {
        lang: {
            "turns": n,
            "cut_ins": k,
            "cut_in_rate": round(k / max(1, n), 4),
            "answer_on_topic": _on_topic(
                [r for c in total.calls if c["lang"] == lang for r in c["turns"]]
            ),
        }
        for lang, (n, k) in sorted(total.by_lang.items())
    }
    cut = sum(k for _, k in total.by_lang.values())
    return {
        "calls": calls,
        "turns": total.turns,
        "timing": "from the true end / onset of the caller's voice (10 ms RMS over -45 dBFS)",
        "first_audio_ms": percentiles(total.first_audio_ms),
        "first_audio_turns": len(total.first_audio_ms),
        "answer_audio_ms": percentiles(total.answer_audio_ms),
        "speculation": total.speculation,
        "dropped_frames": total.dropped,
        "bargein_stop_ms": percentiles(total.bargein_stop_ms),
        "turn_end_decision_ms": percentiles(total.decision_ms),
        "asr_decode_ms": percentiles(total.decode_ms),
        "cut_in_rate": round(cut / max(1, total.turns), 4),
        "cut_ins_by_truth": cut,
        "by_lang": by_lang,
        "answer_on_topic_rate": _on_topic(rows)["rate"],
        "unknown_topics": _unknown(rows),
        "answer_on_topic": _on_topic(rows),
        "interruption_rate": round(total.cut_ins / max(1, total.turns), 4),
        "serial_baseline": {
            "first_audio_ms": percentiles(serial),
            "endpoint_silence_ms": serial_hangover_ms,
            "clips": len(serial),
        },
        "bargeins": len(total.bargein_stop_ms),
        "missed_bargeins": total.missed_bargeins,
        # the line's rise paused the agent: then a barge-in, or not speech (played on after
        # hold_s), or let go by the output itself (nobody settled it)
        "holds": dict(zip(("barge_in", "resumed", "expired"), total.holds, strict=True)),
        "asr_model": cfg.asr_model,
        "semantic_turns": cfg.semantic_turns,
        "eot": cfg.eot,
        "audio_turns": cfg.audio_turns,
        "learned_turns": cfg.learned_turns,
        "patient_turns": cfg.patient_turns,
        "speculate": cfg.speculate,
        "hold_rise_db": (cfg.rules or cfg.turn_rules()).hold_rise_db,
        "asr_step_s": cfg.asr_step_s,
        "asr_prompt": cfg.asr_prompt,
        "llm": cfg.llm,
        "cloud": "emulated cloud-70b (local model + CLOUD_70B latency)",
        "turn_end_rules": {k: total.rules.count(k) for k in sorted(set(total.rules))},
        "first_audio_ms_by_rule": {
            rule: percentiles([ms for r, ms in total.by_rule if r == rule])
            for rule in sorted({r for r, _ in total.by_rule})
        },
        "early_decisions": total.cut_in_details,
        "slow_turns": total.slow,
        "calls_detail": total.calls,
        "samples": {
            "first_audio_ms": [round(x, 1) for x in total.first_audio_ms],
            "turn_end_decision_ms": [round(x, 1) for x in total.decision_ms],
            "rules": total.rules,
        },
    }


def run(
    calls: int = 12,
    seed: int = 0,
    asr_model: str = "auto",
    serial_hangover_ms: float = 700.0,
    semantic_turns: bool = True,
    asr_step_s: float | None = None,
    audio_turns: bool = False,
    eval_dir: Path | None = None,
    speculate: bool = False,
    hold: bool = True,
    eot: EotKind = "lm+text",
    asr_prompt: bool = False,
    learned_turns: bool | None = None,
    patient_turns: bool = False,
) -> dict[str, Any]:
    """Run the benchmark (real time: about 15 s per call) and return the JSON report. With
    ``eval_dir`` the held-out calls there (``calls`` 0: all of them)."""
    step = VoiceConfig().asr_step_s if asr_step_s is None else asr_step_s
    return asyncio.run(
        _run(
            calls,
            seed,
            asr_model,
            serial_hangover_ms,
            semantic_turns,
            step,
            audio_turns,
            eval_dir,
            speculate,
            hold,
            eot,
            asr_prompt,
            learned_turns,
            patient_turns,
        )
    )


def smart_turn_cost(calls: int = 50) -> dict[str, Any]:
    """CPU cost of one Smart Turn call (one thread), split into the numpy features and the
    ONNX run, on 8 s windows of the packaged clips."""
    from rtgate.apps.voice.smart_turn import SmartTurn, fit_window, log_mel

    model = SmartTurn(threads=1)
    clips = list(load_clips().values())
    feats_ms, onnx_ms, total_ms = [], [], []
    for i in range(calls + 3):
        window = fit_window(clips[i % len(clips)].pcm)
        t0 = time.perf_counter()
        feats = log_mel(window)[None]
        t1 = time.perf_counter()
        model.session.run(None, {model._input: feats})
        t2 = time.perf_counter()
        if i >= 3:  # the first calls warm the session up
            feats_ms.append((t1 - t0) * 1000.0)
            onnx_ms.append((t2 - t1) * 1000.0)
            total_ms.append((t2 - t0) * 1000.0)
    return {
        "model": str(model.path.name),
        "calls": calls,
        "threads": 1,
        "features_ms": percentiles(feats_ms),
        "onnx_ms": percentiles(onnx_ms),
        "total_ms": percentiles(total_ms),
    }
