"""Frames and stages: control frames jump the queue, interruptions clear, queues are bounded."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from rtgate.apps.voice.frames import (
    AgentTextFrame,
    AudioFrame,
    EndFrame,
    Frame,
    InterruptionFrame,
    StartFrame,
)
from rtgate.apps.voice.pipeline import MAX_CONTROL, Pipeline, Stage
from rtgate.core.errors import QueueFull


class Gated(Stage):
    """Holds each data frame until ``release`` is set; records what it handled."""

    name = "gated"

    def __init__(self, interruptible: bool = False) -> None:
        super().__init__()
        self.interruptible = interruptible
        self.release = asyncio.Event()
        self.busy = asyncio.Event()
        self.seen: list[Frame] = []
        self.cancelled = 0

    async def process_frame(self, frame: Frame, upstream: bool) -> None:
        self.seen.append(frame)
        if isinstance(frame, AgentTextFrame):
            self.busy.set()
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        await self.push(frame, upstream)


def text(n: int) -> AgentTextFrame:
    return AgentTextFrame(turn=1, kind="answer", text=f"s{n}", lang="en")


async def test_control_frames_jump_queued_data() -> None:
    stage = Gated()
    out: list[Frame] = []
    arrived = asyncio.Event()

    def sink(frame: Frame) -> None:
        out.append(frame)
        arrived.set()

    async with Pipeline([stage], sink=sink) as p:
        for n in range(3):
            await p.put(text(n))
        await stage.busy.wait()  # s0 is in progress, s1 and s2 wait
        await p.put(StartFrame(lang="zh"))
        await arrived.wait()
        assert isinstance(out[0], StartFrame)  # ahead of every queued data frame
        stage.release.set()
        await p.put(EndFrame())
        await p.wait()
    assert [f.text for f in out if isinstance(f, AgentTextFrame)] == ["s0", "s1", "s2"]
    assert isinstance(out[-1], EndFrame)  # the end waits for queued data


async def test_interruption_clears_an_interruptible_stage() -> None:
    stage = Gated(interruptible=True)
    out: list[Frame] = []
    async with Pipeline([stage], sink=out.append) as p:
        for n in range(3):
            await p.put(text(n))
        await stage.busy.wait()
        await p.put(InterruptionFrame(t=1.0))
        await p.put(EndFrame())
        await p.wait()
    assert stage.cancelled == 1
    assert not [f for f in out if isinstance(f, AgentTextFrame)]  # queued text dropped
    assert [type(f) for f in out] == [InterruptionFrame, EndFrame]


async def test_audio_policy_drops_oldest_and_control_never_drops() -> None:
    stage = Gated()
    stage.policy = "drop_oldest"
    stage.max_data = 4
    for n in range(10):
        await stage.put(AudioFrame(pcm=np.zeros(512, dtype=np.float32), t=n * 0.032))
    assert len(stage._data) == 4 and stage.dropped == 6
    kept = [f.t for f, _ in stage._data if isinstance(f, AudioFrame)]
    assert kept == pytest.approx([0.192, 0.224, 0.256, 0.288])
    for _ in range(MAX_CONTROL):
        await stage.put(InterruptionFrame(t=0.0))
    with pytest.raises(QueueFull):
        await stage.put(InterruptionFrame(t=0.0))


async def test_a_followup_is_not_started_while_the_caller_speaks() -> None:
    from rtgate.apps.voice.frames import AgentAudioFrame, SpeechStartFrame, SpeechStopFrame
    from rtgate.apps.voice.transport import OutputStage, RecordingOut

    rec = RecordingOut()
    out = OutputStage(rec, pace=False)
    pcm = np.zeros(320, np.float32)

    def audio(kind: str) -> AgentAudioFrame:
        return AgentAudioFrame(turn=1, kind=kind, text=kind, pcm=pcm)  # type: ignore[arg-type]

    async def put(frame: Frame) -> None:
        await p.put(frame)
        await asyncio.sleep(0)
        await out._idle.wait()  # control frames jump the queue: keep the order here

    async with Pipeline([out]) as p:
        await put(SpeechStartFrame(t=1.0))
        await put(audio("followup"))  # the caller has the floor: dropped
        await put(audio("answer"))  # a reply is not (turn-taking decides those)
        await put(SpeechStopFrame(t=2.0))
        await put(audio("followup"))  # the caller is done: played
        await p.put(EndFrame())
        await p.wait()
    assert [c.kind for c in rec.chunks] == ["answer", "followup"]
    assert out.held_back == 1
