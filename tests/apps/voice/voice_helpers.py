"""Helpers shared by the voice tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from rtgate.apps.voice.frames import AudioFrame, EndFrame, Frame, Pcm
from rtgate.apps.voice.pipeline import Pipeline
from rtgate.apps.voice.vad import CHUNK, VADStage


async def until(cond: Callable[[], bool], turns: int = 2000) -> None:
    """Let the pipeline's tasks run until ``cond`` holds (loop turns, no wall-clock wait)."""
    for _ in range(turns):
        if cond():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


async def through_vad(stage: VADStage, pcm: Pcm) -> list[Frame]:
    """Every frame ``stage`` sends on for ``pcm`` played from t = 0, then the end; its audio
    comes out in half chunks (the 16 ms steps)."""
    out: list[Frame] = []
    async with Pipeline([stage], sink=out.append) as p:
        await p.put(AudioFrame(pcm=pcm, t=0.0))
        await p.put(EndFrame())
        await p.wait()
    assert {len(f.pcm) for f in out if isinstance(f, AudioFrame)} == {CHUNK // 2}
    return out
