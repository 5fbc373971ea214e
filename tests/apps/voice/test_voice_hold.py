"""A rise of the caller's line while the agent talks pauses the agent before the barge-in."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
import pytest

from rtgate.apps.voice.frames import (
    RATE,
    AgentAudioFrame,
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
)
from rtgate.apps.voice.pipeline import Pipeline
from rtgate.apps.voice.transport import OutputStage, RecordingOut
from rtgate.apps.voice.turns import TurnRules, TurnStage
from rtgate.apps.voice.vad import VADStage
from tests.apps.voice.test_voice_vad import LevelVAD, tone
from tests.apps.voice.voice_helpers import through_vad, until

STEP = 0.016
PCM = np.zeros(int(STEP * RATE), np.float32)


def step(i: int, over: float | None, prob: float = 0.05, t0: float = 2.0) -> AudioFrame:
    return AudioFrame(pcm=PCM, t=t0 + STEP * i, prob=prob, over_floor_db=over)


async def talking(
    frames: Sequence[Frame], rules: TurnRules | None = None
) -> list[HoldFrame | ResumeFrame | InterruptionFrame]:
    """What the turn stage sends while the agent talks after the caller's turn, for
    ``frames`` of caller audio (in order)."""
    out: list[Frame] = []
    stage = TurnStage(rules or TurnRules())
    async with Pipeline([stage], sink=out.append) as p:
        start: list[Frame] = [SpeechStartFrame(t=0.0), SpeechStopFrame(t=1.0), AgentStartedFrame()]
        for f in start:
            await p.put(f)
        await until(lambda: stage.agent_speaking)
        for f in frames:
            if isinstance(f, AgentStartedFrame | AgentStoppedFrame):
                await asyncio.sleep(0)
                await stage._idle.wait()  # control frames jump the queue: keep the order
            await p.put(f)
        await p.put(EndFrame())
        await p.wait()
    return [f for f in out if isinstance(f, HoldFrame | ResumeFrame | InterruptionFrame)]


async def test_a_rise_pauses_the_agent_and_speech_makes_it_a_bargein_dated_from_the_rise() -> None:
    frames = [step(0, 2.0), step(1, 14.0), step(2, 15.0), step(3, 16.0, prob=0.35)]
    out = await talking(frames)
    assert [type(f) for f in out] == [HoldFrame, InterruptionFrame]
    # the rise began at the second step; the barge-in is dated there, not at the 0.35 step
    assert out[0].t == pytest.approx(2.016) and out[1].t == pytest.approx(2.016)


async def test_one_step_over_the_bar_or_a_rise_under_it_is_no_hold() -> None:
    spike = [step(0, 30.0), step(1, 1.0), step(2, 9.0), step(3, 9.5), step(4, 0.0)]
    assert await talking(spike) == []


async def test_a_rise_that_is_not_speech_resumes_and_gets_no_second_hold() -> None:
    knock = [step(i, 20.0 if i < 3 else 0.0) for i in range(25)]  # 0.4 s of audio
    again = [step(30 + i, 20.0) for i in range(5)]
    out = await talking(knock + again)
    assert [type(f) for f in out] == [HoldFrame, ResumeFrame]
    assert out[1].t - out[0].t >= TurnRules().hold_s - STEP
    # a new stretch of agent speech may hold again
    later = [AgentStoppedFrame(), AgentStartedFrame(), step(60, 20.0), step(61, 20.0)]
    out = await talking(knock + later)
    assert [type(f) for f in out] == [HoldFrame, ResumeFrame, HoldFrame]


async def test_no_hold_without_the_bar_or_while_the_agent_is_quiet() -> None:
    rise = [step(i, 20.0) for i in range(4)]
    assert await talking(rise, TurnRules(hold_rise_db=None)) == []
    out: list[Frame] = []
    async with Pipeline([TurnStage(TurnRules())], sink=out.append) as p:
        for f in rise:
            await p.put(f)
        await p.put(EndFrame())
        await p.wait()
    assert not any(isinstance(f, HoldFrame) for f in out)


async def test_the_vad_says_how_far_over_the_noise_floor_each_step_is() -> None:
    pcm = np.concatenate([tone(1.0, -60.0, 1), tone(0.5, -40.0, 2)])
    # the fake hears levels: it hears the line as it comes
    stage = VADStage(LevelVAD(), twin=LevelVAD(), lift_max_db=0.0)  # type: ignore[arg-type]
    frames = [f for f in await through_vad(stage, pcm) if isinstance(f, AudioFrame)]
    assert frames[0].over_floor_db is None  # no floor heard yet
    quiet = [f.over_floor_db for f in frames if 0.3 <= f.t < 0.98]
    loud = [f.over_floor_db for f in frames if f.t >= 1.0]
    assert all(o is not None and abs(o) < 3.0 for o in quiet)
    assert all(o is not None and 17.0 < o < 23.0 for o in loud)
    assert stage.noise_floor() == pytest.approx(-60.0, abs=1.0)


def agent_audio(chunks: int) -> AgentAudioFrame:
    pcm = (np.arange(chunks * 320) / (chunks * 320)).astype(np.float32)
    return AgentAudioFrame(turn=1, kind="answer", text="answer", pcm=pcm)


async def test_a_hold_pauses_the_output_and_a_resume_plays_every_chunk() -> None:
    rec = RecordingOut()
    out = OutputStage(rec, pace=False)
    async with Pipeline([out]) as p:
        await p.put(HoldFrame(t=1.0))
        await until(lambda: out._held_at is not None)
        await p.put(agent_audio(5))
        for _ in range(50):
            await asyncio.sleep(0)
        assert rec.chunks == []  # held: nothing played, nothing dropped
        await p.put(ResumeFrame(t=1.3))
        await p.put(EndFrame())
        await p.wait()
    assert len(rec.chunks) == 5
    whole = np.concatenate([c.pcm for c in rec.chunks])
    np.testing.assert_array_equal(whole, agent_audio(5).pcm)
    assert out.holds == 1 and out.expired == 0 and out.stops == []


async def test_a_bargein_during_a_hold_counts_from_the_hold() -> None:
    rec = RecordingOut()
    out = OutputStage(rec, pace=False)
    async with Pipeline([out]) as p:
        await p.put(agent_audio(1))
        await until(lambda: len(rec.chunks) == 1)
        await p.put(HoldFrame(t=1.0))
        await until(lambda: out._held_at is not None)
        held_at = out._held_at
        await p.put(agent_audio(4))
        for _ in range(50):
            await asyncio.sleep(0)
        await p.put(InterruptionFrame(t=1.0))
        await until(lambda: bool(out.stops))
        await p.put(EndFrame())
        await p.wait()
    assert len(rec.chunks) == 1  # what came after the hold was never played
    assert out.stops == [(1.0, held_at)]
    assert rec.clears and rec.clears[0] >= held_at  # type: ignore[operator]


async def test_a_hold_nobody_settles_lets_go_by_itself() -> None:
    rec = RecordingOut()
    out = OutputStage(rec, pace=False, max_hold_s=0.0)
    async with Pipeline([out]) as p:
        await p.put(HoldFrame(t=1.0))
        await until(lambda: out._held_at is not None)
        await p.put(agent_audio(3))
        await p.put(EndFrame())
        await p.wait()
    assert len(rec.chunks) == 3 and out.expired == 1


async def test_the_page_is_told_to_mute_on_a_hold_and_to_play_on_a_resume() -> None:
    from rtgate.apps.voice.web import _listener

    class Events:
        def __init__(self) -> None:
            self.got: list[tuple[str, dict[str, object]]] = []

        def event(self, kind: str, **data: object) -> None:
            self.got.append((kind, data))

    sent = Events()
    on = _listener(sent, [])  # type: ignore[arg-type]
    on("turns", HoldFrame(t=1.25))
    on("turns", ResumeFrame(t=1.6))
    on("output", HoldFrame(t=2.0))  # seen again further down: told once
    assert sent.got == [("hold", {"t": 1.25}), ("resume", {"t": 1.6})]
