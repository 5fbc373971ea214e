"""The ASR stage's schedule and local agreement, on a fake Whisper; the forced prefix on the
real one."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from rtgate.apps.voice.asr import (
    ASRStage,
    Transcript,
    WhisperASR,
    cut_copy,
    domain_prompts,
    drop_repeats,
)
from rtgate.apps.voice.bench import Clip
from rtgate.apps.voice.evalset import line_noise
from rtgate.apps.voice.frames import (
    RATE,
    AudioFrame,
    EndFrame,
    Frame,
    Pcm,
    SpeechStartFrame,
    StartFrame,
    TranscriptFrame,
)
from rtgate.apps.voice.pipeline import Pipeline

STEP = 0.1  # seconds of speech per frame in these tests


class ScriptedASR:
    """Returns scripted token sequences in order and records the prefix it was given; each
    decode waits for ``go`` so a test decides when it finishes."""

    def __init__(self, outputs: list[tuple[int, ...]]) -> None:
        self.outputs = list(outputs)
        self.prefixes: list[tuple[int, ...]] = []
        self.prompted: list[bool] = []
        self.go = threading.Semaphore(0)

    def transcribe(
        self,
        audio: Pcm,
        lang: str | None = None,
        *,
        final: bool = False,
        pad_s: float = 1.0,
        prefix: Sequence[int] = (),
        prompted: bool = True,
    ) -> Transcript:
        self.go.acquire(timeout=10)
        self.prefixes.append(tuple(prefix))
        self.prompted.append(prompted)
        tokens = self.outputs.pop(0)
        assert tokens[: len(prefix)] == tuple(prefix)  # forced: the output starts with it
        return Transcript(" ".join(map(str, tokens)), "en", 1.0, tokens)


def _speech(i: int) -> AudioFrame:
    return AudioFrame(pcm=np.zeros(int(STEP * RATE), np.float32), t=i * STEP, prob=0.9)


async def _partials(
    asr: ScriptedASR, n: int, *, agree: bool = True, prompt_partials: bool = False
) -> list[TranscriptFrame]:
    """Feed speech so that ``n`` partials are asked for, one after the other."""
    out: list[Frame] = []
    got = asyncio.Event()

    def sink(f: Frame) -> None:
        out.append(f)
        if isinstance(f, TranscriptFrame):
            got.set()

    stage = ASRStage(
        asr,  # type: ignore[arg-type]
        step_s=STEP * 0.9,
        agree=agree,
        prompt_partials=prompt_partials,
    )
    async with Pipeline([stage], sink=sink) as p:
        await p.put(StartFrame(lang="en"))
        await p.put(SpeechStartFrame(t=0.0))
        for i in range(n):
            got.clear()
            await p.put(_speech(i))  # a step of new speech: one partial is requested
            asr.go.release()
            await asyncio.wait_for(got.wait(), 10)
        await p.put(EndFrame())
        asr.go.release()  # the final decode at the end of the call
        await p.wait()
    return [f for f in out if isinstance(f, TranscriptFrame)]


async def test_partials_are_forced_to_start_with_what_two_partials_agree_on() -> None:
    asr = ScriptedASR(
        [
            (1, 2, 3, 4),
            (1, 2, 3, 9, 9),  # agrees with the first on 1 2 3
            (1, 2, 3, 9, 9, 7),  # ... now on 1 2 3 9 9
            (1, 2, 3, 9, 9, 7, 8),
            (1, 2, 3, 9, 9, 7, 8, 6),  # the final: not forced
        ]
    )
    frames = await _partials(asr, 4)
    # hold = 2: the last two agreed tokens stay open to correction
    assert asr.prefixes == [(), (), (1,), (1, 2, 3), ()]
    assert [f.final for f in frames] == [False] * 4 + [True]
    assert frames[-1].text == "1 2 3 9 9 7 8 6"


async def test_only_the_final_decode_is_given_the_domains_words() -> None:
    asr = ScriptedASR([(1,), (1, 2), (1, 2, 3), (1, 2, 3)])
    frames = await _partials(asr, 3)
    # the partials lead to the first sound: no prompt; the final (the answer's) has it
    assert asr.prompted == [False, False, False, True]
    assert [f.final for f in frames] == [False, False, False, True]
    asr = ScriptedASR([(1,), (1, 2), (1, 2)])
    await _partials(asr, 2, prompt_partials=True)
    assert asr.prompted == [True, True, True]


async def test_without_agreement_nothing_is_forced() -> None:
    asr = ScriptedASR([(1, 2, 3, 4), (1, 2, 3, 4, 5), (1, 2, 3, 4, 5, 6), (1, 2, 3, 4, 5, 6)])
    await _partials(asr, 3, agree=False)
    assert asr.prefixes == [(), (), (), ()]


def test_agreement_starts_over_each_turn() -> None:
    stage = ASRStage(ScriptedASR([]), hold=1)  # type: ignore[arg-type]
    stage._hyps.extend([(1, 2, 3), (1, 2, 4)])
    assert stage.stable() == (1,)
    stage._hyps.clear()  # what a new turn's SpeechStartFrame does
    stage._hyps.append((1, 2, 3))
    assert stage.stable() == ()


@pytest.mark.slow
def test_whisper_keeps_a_forced_prefix_and_decodes_the_rest(
    asr: WhisperASR, clips: dict[str, Clip]
) -> None:
    pcm = clips["zh_signal"].pcm
    free = asr.transcribe(pcm, "zh")
    assert len(free.tokens) > 8 and "信号" in free.text
    head = free.tokens[:6]
    forced = asr.transcribe(pcm, "zh", prefix=head)
    assert forced.tokens[:6] == head and "看看" in forced.text
    # a prefix the audio does not say is kept as given: forcing is real, not a hint
    other = tuple(asr.tok.encode("你好", add_special_tokens=False).ids)
    wrong = asr.transcribe(pcm, "zh", prefix=other)
    assert wrong.tokens[: len(other)] == other and wrong.text.startswith("你好")


def test_the_domains_words_per_language() -> None:
    prompts = domain_prompts()
    assert set(prompts) == {"zh", "en"}  # the file's comment is no language
    assert "话费" in prompts["zh"] and "roaming" in prompts["en"]
    assert domain_prompts(Path("/nonexistent")) == {}


@pytest.mark.slow
def test_whisper_given_the_domains_words_still_hears_the_caller(
    asr: WhisperASR, clips: dict[str, Clip]
) -> None:
    assert asr.previous("zh") == []  # the session's Whisper: no prompts (the default)
    prompted = WhisperASR("base", 1, prompts=domain_prompts())
    prev = prompted.previous("zh")
    assert prev[0] == prompted._id("<|startofprev|>") and len(prev) > 5
    assert prompted.previous("fr") == []  # a language without a line: no prompt
    pcm = clips["zh_signal"].pcm
    heard = prompted.transcribe(pcm, "zh")
    assert "信号" in heard.text and "套餐" not in heard.text  # the caller's words, not ours
    assert prev[0] not in heard.tokens  # the prompt is not part of the transcript
    assert prompted.transcribe(pcm, "zh", prompted=False).tokens == asr.transcribe(pcm, "zh").tokens
    # no speech: a prompted Whisper recites the prompt; the no-speech guard decodes it plain
    for quiet in (np.zeros(RATE, np.float32), line_noise(RATE, -45.0, False, 2)):
        heard = prompted.transcribe(quiet.astype(np.float32), "zh")
        assert heard.text == asr.transcribe(quiet.astype(np.float32), "zh").text
        assert not any(w in heard.text for w in ("话费", "流量", "套餐", "宽带", "退款", "转网"))


def test_a_forced_decode_that_starts_the_utterance_over_is_cut() -> None:
    said = (10, 11, 12, 13, 14, 15, 16, 17, 18)  # "Can I switch to a plan with more data?"
    looped = (*said, 10, 11, 12, 13, 14, 15)  # "… Can I switch to a plan"
    assert cut_copy(looped, start=4) == said
    assert cut_copy(said, start=4) == said  # nothing copied: nothing cut
    # a short repeat ("no, no") is speech, not a loop; and the forced prefix is never cut
    assert cut_copy((1, 2, 1, 2, 3), start=0) == (1, 2, 1, 2, 3)
    assert cut_copy((1, 2, 3, 4, 5, 1, 2, 3, 4, 5), start=7) == (1, 2, 3, 4, 5, 1, 2, 3, 4, 5)


async def test_a_fade_starts_the_end_of_speech_decode_once() -> None:
    asr = ScriptedASR([(1, 2), (1, 2, 3), (1, 2, 3), (1, 2, 3)])
    out: list[Frame] = []
    stage = ASRStage(asr, step_s=10.0, fade_s=0.048)  # type: ignore[arg-type]
    async with Pipeline([stage], sink=out.append) as p:
        await p.put(StartFrame(lang="en"))
        await p.put(SpeechStartFrame(t=0.0))
        pcm = np.zeros(int(0.032 * RATE), np.float32)
        frames = [AudioFrame(pcm=pcm, t=0.032 * i, prob=0.9) for i in range(3)]  # speech
        # the level falls while the probability still says speech
        frames += [AudioFrame(pcm=pcm, t=0.032 * i, prob=0.9, faded=True) for i in (3, 4, 5)]
        # more faded frames: the fade has been decoded, no decode per frame
        frames += [AudioFrame(pcm=pcm, t=0.032 * i, prob=0.9, faded=True) for i in (6, 7)]
        # then the probability falls too: that end is decoded again, with more silence
        frames += [AudioFrame(pcm=pcm, t=0.032 * i, prob=0.1, faded=True) for i in (8, 9)]
        for f in frames:
            await p.put(f)
        asr.go.release()
        asr.go.release()
        await p.put(EndFrame())
        asr.go.release()
        await p.wait()
    got = [f for f in out if isinstance(f, TranscriptFrame)]
    assert [f.final for f in got] == [False, False, True]
    assert got[0].until == pytest.approx(0.032 * 5)  # decoded after 2 faded frames (64 ms)
    assert got[1].until >= 0.032 * 9 - 1e-9  # up to the drop at least


class LoopingASR(ScriptedASR):
    """Hears every stretch as one sentence twice and a cut copy (tiny.en after a pause)."""

    def transcribe(self, audio: Pcm, lang: str | None = None, **kw: object) -> Transcript:
        self.go.acquire(timeout=10)
        loop = "The text said it was running low. " * 2 + "The text said it"
        return Transcript(loop, "en", 1.0, (1,))


async def test_the_final_transcript_drops_a_sentence_heard_twice_partials_keep_it() -> None:
    frames = await _partials(LoopingASR([]), 2, agree=False)
    assert [f.final for f in frames] == [False, False, True]
    assert frames[0].text.count("running low") == 2  # partials: as heard (turn-taking reads them)
    assert frames[-1].text == "The text said it was running low."


@pytest.mark.parametrize(
    ("heard", "kept"),
    [
        ("I hate me change the thing. I hate me change the thing. I hate me change",
         "I hate me change the thing."),
        ("我想查一下话费。我想查一下话费。", "我想查一下话费。"),
        ("Can I switch plans? Can I switch plans", "Can I switch plans?"),
        # short repeats, new sentences and a longer second sentence stay
        ("Hello? Hello?", "Hello? Hello?"),
        ("喂？喂？", "喂？喂？"),
        ("Can I switch plans? And the price?", "Can I switch plans? And the price?"),
        ("I want to cancel. I want to cancel it.", "I want to cancel. I want to cancel it."),
        ("", ""),
    ],
)  # fmt: skip
def test_drop_repeats(heard: str, kept: str) -> None:
    assert drop_repeats(heard) == kept
