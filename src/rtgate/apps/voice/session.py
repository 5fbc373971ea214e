"""Assembling a voice call: models loaded once, a pipeline per call, a report per turn.

:class:`VoiceModels` loads what every call shares (Whisper, TTS, the local model and the
gates built on it) and is entered once. :class:`VoiceCall` builds the pipeline
VAD → ASR → turns → agent → TTS → output for one caller, observes the frames and reports
each turn's transcripts, replies and timings.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import TracebackType
from typing import TYPE_CHECKING, Any

from rtgate.apps.voice.agent import AgentStage
from rtgate.apps.voice.asr import ASRStage, WhisperASR, domain_prompts
from rtgate.apps.voice.eot import EndOfTurn, LMEndOfTurn
from rtgate.apps.voice.eot_rule import EotRule
from rtgate.apps.voice.frames import (
    RATE,
    AgentTextFrame,
    AudioFrame,
    EndFrame,
    Frame,
    InterruptionFrame,
    Pcm,
    SpeechStartFrame,
    StartFrame,
    TranscriptFrame,
    TurnEndFrame,
)
from rtgate.apps.voice.packaged import data_path
from rtgate.apps.voice.pipeline import Pipeline, Stage
from rtgate.apps.voice.transport import AudioOut, OutputStage, RecordingOut
from rtgate.apps.voice.tts import TTSStage, VoiceTTS
from rtgate.apps.voice.turns import AudioEndOfTurn, EotKind, TextScorer, TurnRules, TurnStage
from rtgate.apps.voice.vad import SileroVAD, SpeechTracker, VADStage
from rtgate.core.errors import InvalidRequest
from rtgate.domains.loader import GENERIC_JUDGE, load_generic_judge
from rtgate.gate import Gate, GateConfig
from rtgate.tiers.answerability import Judge
from rtgate.tiers.base import Tier

if TYPE_CHECKING:
    from rtgate.backends.llamacpp import LlamaCppBackend

__all__ = ["VoiceCall", "VoiceConfig", "VoiceModels"]


@dataclass(slots=True)
class VoiceConfig:
    """Knobs of a call. Times in milliseconds."""

    lang: str | None = None  # "zh", "en" or None (detect from the first words)
    asr_model: str = "auto"  # "base", "tiny.en", or "auto": tiny.en for English calls
    asr_threads: int = 2
    # seconds of new speech between partial decodes: more often, a partial more often covers
    # the end of speech already; less often, a decode still running when the caller stops
    # delays the one that covers it less often (0.8 s wins on a busy machine, 0.4 s on a
    # quiet one at p50: see docs/voice.md)
    asr_step_s: float = 0.4
    llm: str = "gemma3-270m"
    # one llama.cpp thread: with two, its threads spin-wait for each other and a busy CPU
    # (Whisper decoding on the other core) makes tokens ~10x slower; one thread degrades gently
    llm_threads: int = 1
    piper: bool = True
    vad_hangover_ms: float = 64.0
    # end-of-turn models score the partials as finished turns or not
    semantic_turns: bool = True
    # which: "lm", the local model's end mass on complete-looking clauses (eot.py);
    # "lm+text", and the n-gram model trained on how callers go on on questions
    # (eot_text.py, under 1 ms): a question it reads as going on waits 1.2 s
    eot: EotKind = "lm+text"
    # Smart Turn v3.2 reads the caller's voice; the turn's end fuses it with the words and
    # the silence (turns.py). Off by default: on the validation calls the fusion cut into
    # no fewer turns (0 of 34 either way) and was slower (first audio p95 615 vs 288 ms),
    # and the model costs 50-130 ms of CPU per scored pause here (docs/voice.md); on the
    # long-pause validation calls it told the pauses inside a turn from its end no better
    # than chance, with each part synthesised as a sentence of its own (ROC AUC 0.43-0.52)
    # and with each turn spoken as one utterance, its pauses widened (0.36-0.56:
    # eval/voice-val-pause2, `rtgate voice smart-turn-eval`)
    audio_turns: bool = False
    # one fitted end-of-turn decision over the silence (eot_rule.py, data/eot-rule.json) in
    # place of the word rules' waits (session 15, docs/voice.md); off by default unless the
    # natural7 bench confirmed it
    learned_turns: bool = False
    # every end waits the 1.2 s of an unfinished clause (TurnRules.patient): no answer over
    # a caller who pauses after a complete first question, every first sound 1.2 s later.
    # Off by default; the trade against the word rules on a blind set: docs/voice.md,
    # Session 33
    patient_turns: bool = False
    # prepare the answer (and its audio) at a short pause, speak it only on the turn's end,
    # drop it silently when the caller goes on (agent.py); off: answer from the final
    # transcript. Off by default: on the validation calls, back to back on a quiet machine,
    # first audio p50/p95 was 238/397 ms with it and 169/318 ms without (preparing competes
    # with ASR for the CPU), and the answer's audio came no sooner (docs/voice.md)
    speculate: bool = False
    # None: the operating points chosen for ``eot`` (TurnRules.for_model)
    rules: TurnRules | None = None
    ack_budget_ms: float = 250.0
    answer_budget_ms: float = 2500.0
    full_final: bool = False
    answer_tokens: int = 40
    # give the final decode the domain's words (domains/telecom/asr_prompt.json) as
    # Whisper's previous text (partials never: they are on the way to the first sound).
    # Off by default: offline, first answers on topic 46 -> 50 of 60 (natural5's turns),
    # 31 -> 31 of 36 (val-pause2's), 8 -> 6 of 12 (the packaged clips: "我想换一个流量多
    # 一点的套餐，有推荐的吗" heard as "有推荐?", English clips repeated); docs/voice.md, Session 13
    asr_prompt: bool = False

    def __post_init__(self) -> None:
        if self.patient_turns and self.learned_turns:
            raise InvalidRequest("patient_turns and learned_turns both decide the end: pick one")

    def turn_rules(self) -> TurnRules:
        """The rules a call uses when ``rules`` is not given: the patient ones, or the
        operating points chosen for ``eot``."""
        return TurnRules.patient() if self.patient_turns else TurnRules.for_model(self.eot)


def _tiers(cfg: VoiceConfig) -> tuple[list[Tier], list[Tier], list[Tier], LlamaCppBackend]:
    """Tiers of the ack, answer and deep gates: templates + the local model; the local
    model; the cloud tier (the local model behind ``CLOUD_70B`` latency: named emulation).

    The emulated cloud runs on its own instance of the model (its own worker and queue): a
    real cloud costs the local model nothing, and sharing one worker put every end-of-turn
    score and acknowledgement behind a background answer of a hundred tokens (the score
    came too late, and a finished statement waited the 600 ms of a plain clause)."""
    from rtgate.backends.llamacpp import LlamaCppBackend
    from rtgate.tiers.emulated import CLOUD_70B, EmulatedLatency
    from rtgate.tiers.llm import FewShot, LLMTier
    from rtgate.tiers.templates import TemplateTier

    shots = json.loads(data_path("prompts.json").read_text(encoding="utf-8"))

    def few(kind: str) -> dict[str, FewShot]:
        return {
            lang: FewShot(
                system=v["system"],
                examples=tuple((q, a) for q, a in v["examples"]),
                user_label=v["user"],
                agent_label=v["agent"],
                sep=v["sep"],
            )
            for lang, v in shots[kind].items()
        }

    backend = LlamaCppBackend(cfg.llm, n_threads=cfg.llm_threads)
    templates = TemplateTier.from_file(data_path("acks.json"), name="ack-template", quality=20)
    ack_local = LLMTier(backend, name="ack-local", quality=10, few_shot=few("ack"), max_tokens=10)
    local = LLMTier(
        backend, name="local", quality=50, few_shot=few("answer"), max_tokens=cfg.answer_tokens
    )
    remote = LlamaCppBackend(cfg.llm, n_threads=1)
    deep = LLMTier(remote, name="cloud", quality=90, delegable=True, few_shot=few("answer"))
    cloud = EmulatedLatency(deep, CLOUD_70B, name="cloud")  # named emulation of a 70B model
    return [templates, ack_local], [local], [cloud], backend


class VoiceModels:
    """What calls share; ``async with`` loads, warms and later closes it."""

    def __init__(self, cfg: VoiceConfig | None = None) -> None:
        self.cfg = cfg or VoiceConfig()
        self.asr: WhisperASR | None = None  # multilingual (or the only one)
        self.asr_en: WhisperASR | None = None  # English-only, faster, with "auto"
        self.tts: VoiceTTS | None = None
        self.ack_gate: Gate | None = None
        self.answer_gate: Gate | None = None
        self.deep_gate: Gate | None = None
        self.eot: EndOfTurn | None = None
        self.lm_eot: LMEndOfTurn | None = None
        self.audio_eot: AudioEndOfTurn | None = None
        self.text_eot: TextScorer | None = None  # the text model, for the fitted decision
        self.learned: EotRule | None = None
        # which turns the big model follows up: the domain-free judge (the text's own
        # complexity signals), fitted by `rtgate intents judge`
        self.judge: Judge | None = load_generic_judge() if GENERIC_JUDGE.exists() else None

    async def __aenter__(self) -> VoiceModels:
        cfg = self.cfg
        main = "base" if cfg.asr_model == "auto" else cfg.asr_model
        prompts = domain_prompts() if cfg.asr_prompt else None
        self.asr = await asyncio.to_thread(WhisperASR, main, cfg.asr_threads, prompts)
        if cfg.asr_model == "auto":
            self.asr_en = await asyncio.to_thread(WhisperASR, "tiny.en", cfg.asr_threads, prompts)
        self.tts = VoiceTTS(piper=cfg.piper)
        ack_tiers, answer_tiers, deep_tiers, backend = _tiers(cfg)
        if cfg.semantic_turns:
            self.lm_eot = LMEndOfTurn(backend)
            self.eot = self.lm_eot
            if cfg.eot == "lm+text":
                from rtgate.apps.voice.eot_text import ByCue, TextEndOfTurn

                text = await asyncio.to_thread(TextEndOfTurn.load)
                self.eot = ByCue(clause=self.lm_eot, question=text)
        if cfg.learned_turns:
            from rtgate.apps.voice.eot_text import TextEndOfTurn

            self.text_eot = await asyncio.to_thread(TextEndOfTurn.load)
            self.learned = await asyncio.to_thread(EotRule.load)
        if cfg.audio_turns:
            from rtgate.apps.voice.smart_turn import SmartTurn

            self.audio_eot = await asyncio.to_thread(SmartTurn)
        self.ack_gate = Gate(ack_tiers, config=GateConfig(delegate=False))
        self.answer_gate = Gate(answer_tiers, config=GateConfig(delegate=False))
        self.deep_gate = Gate(deep_tiers)
        for gate in (self.ack_gate, self.answer_gate, self.deep_gate):
            await gate.start()
        await self.warmup()
        return self

    async def warmup(self) -> None:
        """One pass through every model, and the fixed acknowledgements synthesised."""
        from rtgate.core.request import Request

        assert self.asr and self.tts and self.ack_gate and self.answer_gate
        cfg = self.cfg
        for asr in (self.asr, self.asr_en):
            if asr is not None:
                await asyncio.to_thread(asr.transcribe, _silence(1.0), "en")
        probe = "请问我的话费还有多少？"
        await self.ack_gate.warmup(Request(input=probe, max_tokens=8))
        await self.answer_gate.warmup(Request(input=probe, max_tokens=cfg.answer_tokens))
        if self.deep_gate is not None:  # loads the cloud emulation's own model
            await self.deep_gate.warmup(Request(input=probe, max_tokens=4), rounds=1)
        if self.lm_eot is not None:
            await self.lm_eot.prime()
            for lang, line in (("zh", "我想改一下我的地址"), ("en", "I need to change my address")):
                await self.lm_eot.p_end(line, lang)  # and one score each, through the cache
        if self.audio_eot is not None:
            await asyncio.to_thread(self.audio_eot.p_end, _silence(1.0))
        table = json.loads(data_path("acks.json").read_text(encoding="utf-8"))
        for tpl in table["templates"]:
            lang = "zh" if tpl["id"].startswith("zh") else "en"
            await self.tts.prefetch(tpl["reply"], lang)
        for lang, text in (("zh", "嗯，好的。"), ("en", "Okay.")):
            await self.tts.prefetch(text, lang)

    def asr_for(self, lang: str | None) -> WhisperASR:
        """The Whisper model for a call in ``lang`` (English-only tiny.en when loaded)."""
        assert self.asr is not None
        return self.asr_en if lang == "en" and self.asr_en is not None else self.asr

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        for gate in (self.ack_gate, self.answer_gate, self.deep_gate):
            if gate is not None:
                await gate.aclose()  # each closes the shared backend; closing twice is safe


def _silence(seconds: float) -> Pcm:
    import numpy as np

    return np.zeros(int(seconds * RATE), dtype=np.float32)


class VoiceCall:
    """One call through the pipeline. ``async with``; feed audio; ``await finish()``.

    ``live`` audio (a microphone, or a file fed in real time) is dropped oldest-first if a
    stage falls behind; audio fed as fast as it can be read (``live=False``) waits instead.
    """

    def __init__(
        self,
        models: VoiceModels,
        out: AudioOut | None = None,
        *,
        pace_out: bool = True,
        live: bool = True,
        lang: str | None = None,
        lead_s: float = 0.0,
        listener: Callable[[str, Frame], None] | None = None,
    ) -> None:
        cfg = models.cfg
        assert models.asr and models.tts and models.ack_gate and models.answer_gate
        self.models = models
        self.lang = lang or cfg.lang
        self.out: AudioOut = out or RecordingOut()
        self.agent = AgentStage(
            models.ack_gate,
            models.answer_gate,
            models.deep_gate,
            prefetch=models.tts.prefetch,
            ack_budget_ms=cfg.ack_budget_ms,
            answer_budget_ms=cfg.answer_budget_ms,
            answer_tokens=cfg.answer_tokens,
            judge=models.judge,
            speculate=cfg.speculate,
        )
        rules = cfg.rules or cfg.turn_rules()
        if models.learned is not None and rules.learned is None:
            rules = replace(rules, learned=models.learned)
        self.turns = TurnStage(
            rules, eot=models.eot, audio_eot=models.audio_eot, text_eot=models.text_eot
        )
        self.output = OutputStage(self.out, pace=pace_out, lead_s=lead_s)
        self.listener = listener
        stages: list[Stage] = [
            VADStage(SileroVAD(), SpeechTracker(hangover_ms=cfg.vad_hangover_ms), twin=SileroVAD()),
            ASRStage(models.asr_for(self.lang), step_s=cfg.asr_step_s, full_final=cfg.full_final),
            self.turns,
            self.agent,
            TTSStage(models.tts),
            self.output,
        ]
        if not live:  # audio read from a file: back-pressure instead of dropping
            for stage in stages[:3]:
                stage.policy = "wait"
        self.pipeline = Pipeline(stages, observer=self._observe)
        self.events: deque[tuple[float, str, Frame]] = deque(maxlen=50_000)  # bounded: oldest go
        self.t0 = 0.0
        self.fed = 0.0
        self._arrivals: deque[tuple[float, float]] = deque(maxlen=4096)  # (audio t, loop t)

    def _observe(self, stage: Stage, frame: Frame, upstream: bool) -> None:
        if isinstance(frame, AudioFrame):
            return
        loop = asyncio.get_running_loop()
        self.events.append((loop.time(), stage.name, frame))
        if self.listener is not None:
            self.listener(stage.name, frame)

    async def __aenter__(self) -> VoiceCall:
        await self.pipeline.__aenter__()
        self.t0 = asyncio.get_running_loop().time()
        await self.pipeline.put(StartFrame(lang=self.lang))
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.pipeline.__aexit__(et, e, tb)

    async def feed(self, pcm: Pcm, *, pace: bool = True, frame: int = 512) -> None:
        """Send caller audio that follows what was sent before (in real time with ``pace``),
        ``frame`` samples at a time (a phone line delivers 20 ms: 320)."""
        if frame <= 0:
            raise InvalidRequest(f"frame must be a positive number of samples, got {frame}")
        loop = asyncio.get_running_loop()
        for i in range(0, len(pcm), frame):
            part = pcm[i : i + frame]
            t = self.fed
            self.fed += len(part) / RATE
            if pace:
                delay = self.t0 + self.fed - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
            self._arrivals.append((self.fed, loop.time()))
            await self.pipeline.put(AudioFrame(pcm=part, t=t))

    def heard_at(self, t: float) -> float:
        """Loop time at which audio time ``t`` arrived (live audio may not start at ``t0``
        nor keep exact time: a browser's capture clock drifts)."""
        for end, at in self._arrivals:
            if end >= t:
                return at - (end - t)
        return self.t0 + t

    async def finish(self) -> None:
        """End the call once everything queued has been handled."""
        await self.pipeline.put(EndFrame())
        await self.pipeline.wait()

    # -- report ---------------------------------------------------------------------------

    def report(self) -> dict[str, Any]:
        """Per-turn transcripts, replies and timings (ms from the end of the caller's speech,
        as the VAD saw it), plus barge-ins."""
        turns: dict[int, dict[str, Any]] = {}
        speech_starts: list[float] = []

        def ms(at: float, t: float) -> float:
            return round((at - self.heard_at(t)) * 1000.0, 1)

        for at, stage, f in self.events:
            if isinstance(f, SpeechStartFrame) and stage == "vad":
                speech_starts.append(f.t)
            elif isinstance(f, TranscriptFrame) and stage == "asr":
                row = turns.setdefault(f.turn, {"turn": f.turn, "partials": []})
                item = {
                    "text": f.text,
                    "until_s": round(f.until, 3),
                    "decode_ms": round(f.decode_ms, 1),
                }
                if f.final:
                    row["final"] = item
                else:
                    row["partials"].append(item)
            elif isinstance(f, TurnEndFrame) and stage == "turns" and f.id not in _seen(turns):
                row = turns.setdefault(f.turn, {"turn": f.turn, "partials": []})
                row.update(
                    speech_end_s=round(f.t, 3),
                    rule=f.rule,
                    p_end=None if f.p_end is None else round(f.p_end, 3),
                    p_audio=None if f.p_audio is None else round(f.p_audio, 3),
                    turn_end_ms=ms(at, f.t),
                    _end=f.t,
                    _id=f.id,
                )
            elif isinstance(f, AgentTextFrame) and stage == "agent" and f.text:
                row = turns.setdefault(f.turn, {"turn": f.turn, "partials": []})
                row.setdefault(f.kind, []).append(f.text)
                if "_end" in row:
                    row.setdefault(f"{f.kind}_ready_ms", ms(at, row["_end"]))
        rec = self.out if isinstance(self.out, RecordingOut) else None
        if rec is not None:
            for c in rec.chunks:
                row = turns.get(c.turn, {})
                if "_end" in row:
                    row.setdefault("first_audio_ms", ms(c.at, row["_end"]))
                    row.setdefault(f"{c.kind}_audio_ms", ms(c.at, row["_end"]))
        for n, row in turns.items():
            row.pop("_end", None)
            row.pop("_id", None)
            row["route"] = self.agent.routes.get(n)
            row["followup_job"] = self.agent.followups.get(n)
            row["judge"] = self.agent.verdicts.get(n)
        bargeins = [{"speech_t": round(t, 3), "stop_ms": ms(at, t)} for t, at in self.output.stops]
        return {
            "turns": [turns[k] for k in sorted(turns)],
            "bargeins": bargeins,
            "speech_starts": speech_starts,
            "interruptions": sum(
                isinstance(f, InterruptionFrame) for _, s, f in self.events if s == "turns"
            ),
        }


def _seen(turns: dict[int, dict[str, Any]]) -> set[int]:
    return {r["_id"] for r in turns.values() if "_id" in r}
