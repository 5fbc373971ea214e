"""Shared voice fixtures: the packaged caller clips and models loaded once per session."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from rtgate.apps.voice.asr import WhisperASR
from rtgate.apps.voice.bench import Clip, load_clips
from rtgate.apps.voice.session import VoiceConfig, VoiceModels


@pytest.fixture(scope="session")
def clips() -> dict[str, Clip]:
    return load_clips()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def models() -> AsyncIterator[VoiceModels]:
    """Whisper base, espeak-ng/Piper, Gemma 3 270M behind the gates: loaded once."""
    async with VoiceModels(VoiceConfig()) as m:
        yield m


@pytest.fixture(scope="session")
def asr(models: VoiceModels) -> WhisperASR:
    assert models.asr is not None
    return models.asr
