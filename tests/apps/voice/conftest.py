"""Shared voice fixtures: the packaged caller clips and models loaded once per session."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import pytest_asyncio

from rtgate.apps.voice.agent import AgentStage
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


async def inline(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


@pytest.fixture(autouse=True)
def reads_inline(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The agent's blocking reads run inline, not in a worker thread: a test then waits
    on loop turns (``until``), never on the wall clock. The thread itself has its own
    test (test_voice_speculation)."""
    monkeypatch.setattr(AgentStage, "run_blocking", staticmethod(inline))
    yield
