"""Preparing is not speaking (#17): an answer prepared at a pause is said only after a
confident end, dropped without a sound when the caller goes on, and the first sound never
waits on the cloud tier. No models: the turn stage and the agent with the shipped
knowledge base, fed frames by hand."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Callable
from typing import Any

import numpy as np
import pytest

from rtgate.apps.voice.agent import AgentStage, in_thread
from rtgate.apps.voice.frames import (
    RATE,
    AgentTextFrame,
    AudioFrame,
    EndFrame,
    Frame,
    SpeechStartFrame,
    SpeechStopFrame,
    TranscriptFrame,
    TurnEndFrame,
    TurnPauseFrame,
)
from rtgate.apps.voice.pipeline import Pipeline
from rtgate.apps.voice.turns import TurnRules, TurnStage
from rtgate.core.request import Request
from rtgate.domains.knowledge import KnowledgeBase
from rtgate.gate import Gate, GateEvent
from tests.apps.voice.voice_helpers import until


async def _speak_then_pause(p: Pipeline, text: str, frames: int, t0: float = 0.0) -> None:
    """Speech, a partial covering its end, then ``frames`` 20 ms frames of silence."""
    await p.put(SpeechStartFrame(t=t0))
    await p.put(SpeechStopFrame(t=t0 + 2.0))
    await p.put(TranscriptFrame(turn=1, text=text, lang="zh", until=t0 + 2.05))
    quiet = np.zeros(RATE // 50, np.float32)
    for i in range(frames):
        await p.put(AudioFrame(pcm=quiet, t=t0 + 2.0 + 0.02 * i, prob=0.01))


class Synth:
    """A TTS cache that records what was prepared."""

    def __init__(self) -> None:
        self.made: list[str] = []

    async def prefetch(self, text: str, lang: str) -> None:
        self.made.append(text)


def _said(down: list[Frame]) -> list[tuple[str, str]]:
    return [(f.kind, f.text) for f in down if isinstance(f, AgentTextFrame) and f.text]


async def test_a_caller_who_goes_on_discards_the_prepared_answer_without_a_sound() -> None:
    synth = Synth()
    turns = TurnStage(TurnRules())
    agent = AgentStage(Gate([]), Gate([]), prefetch=synth.prefetch, speculate=True)
    down: list[Frame] = []
    async with Pipeline([turns, agent], sink=down.append) as p:
        # a clause and a short pause: far under the clause's wait, so no end
        await _speak_then_pause(p, "我这个月的话费，", frames=5)
        await until(lambda: agent.speculation["prepared"] == 1)
        assert agent._prepared is not None and agent._prepared.text == "我这个月的话费，"
        await until(lambda: bool(synth.made))  # its audio was being made
        assert not turns.ended and not _said(down)
        await p.put(SpeechStartFrame(t=2.2))  # the caller goes on
        await until(lambda: agent.speculation["discarded"] == 1)
        assert agent._prepared is None and not _said(down)  # prepared, never said
        await p.put(EndFrame())  # the call ends (an end of turn: an ack, no prepared answer)
        await p.wait()
    assert not any(k == "answer" for k, _ in _said(down)) and agent.speculation["used"] == 0
    assert not any(isinstance(f, TurnPauseFrame) for f in down)  # consumed by the agent


async def test_a_confident_end_speaks_the_prepared_answer_without_the_final_decode() -> None:
    synth = Synth()
    turns = TurnStage(TurnRules())
    agent = AgentStage(Gate([]), Gate([]), prefetch=synth.prefetch, speculate=True)
    down: list[Frame] = []
    ask = "请问我的话费余额还有多少？"
    async with Pipeline([turns, agent], sink=down.append) as p:
        await _speak_then_pause(p, ask, frames=10)  # a question: ends at 64 ms
        await until(lambda: any(k == "answer" for k, _ in _said(down)))
        assert turns.paused[0].text == ask and turns.ended[0].text == ask
        assert agent.speculation["used"] == 1
        kinds = [k for k, _ in _said(down)]
        assert kinds[0] == "ack" and "answer" in kinds  # the ack first, then the answer
        answer = [t for k, t in _said(down) if k == "answer"]
        assert all(a in synth.made for a in answer)  # its audio was prepared at the pause
        # the final transcript comes later: kept, compared, not answered a second time
        await agent.put(TranscriptFrame(turn=1, text=ask, lang="zh", until=2.1, final=True))
        await p.put(EndFrame())
        await p.wait()
    assert [k for k, _ in _said(down)].count("answer") == len(answer)
    assert agent.turn_text[1] == ask and agent.speculation["final_differs"] == 0


async def test_an_end_on_other_words_answers_from_the_final_transcript() -> None:
    agent = AgentStage(Gate([]), Gate([]), speculate=True)
    down: list[Frame] = []
    async with Pipeline([agent], sink=down.append) as p:
        await p.put(TurnPauseFrame(turn=1, text="我想问一下，", lang="zh", t=1.0))
        await until(lambda: agent.speculation["prepared"] == 1)
        end = TurnEndFrame(turn=1, text="我想问一下营业厅几点关门？", lang="zh", t=2.0,
                           decided_t=2.1, rule="question")  # fmt: skip
        await p.put(end)
        await until(lambda: agent.speculation["stale"] == 1)
        assert not any(k == "answer" for k, _ in _said(down))  # waits for the final
        await p.put(TranscriptFrame(turn=1, text=end.text, lang="zh", until=2.0, final=True))
        await until(lambda: any(k == "answer" for k, _ in _said(down)))
        await p.put(EndFrame())
        await p.wait()
    assert agent.speculation["used"] == 0


class StuckCloud(Gate):
    """A cloud tier that never answers; records what the agent had said when asked."""

    def __init__(self, agent: list[AgentStage]) -> None:
        super().__init__([])
        self.agent = agent
        self.asked: list[list[str]] = []
        self.never = asyncio.Event()

    async def stream(
        self, request: Request, budget_ms: Any, **kw: Any
    ) -> AsyncGenerator[GateEvent, None]:
        self.asked.append(list(self.agent[0].said.get(1, [])))
        await self.never.wait()
        return
        yield  # an async generator that never yields


async def test_the_first_sound_and_the_prepared_answer_never_wait_on_the_cloud() -> None:
    ref: list[AgentStage] = []
    cloud = StuckCloud(ref)
    turns = TurnStage(TurnRules())
    agent = AgentStage(Gate([]), Gate([]), cloud, speculate=True)
    ref.append(agent)
    down: list[Frame] = []
    ask = "我有两个问题，账单里的短信费是怎么回事，能不能开发票？"
    async with Pipeline([turns, agent], sink=down.append) as p:
        await _speak_then_pause(p, ask, frames=10)
        await until(lambda: any(k == "answer" for k, _ in _said(down)))
        assert agent.replies[1].followup  # a multi-part ask: the big model is asked ...
        await until(lambda: bool(cloud.asked))
        assert cloud.asked[0][:1] == [_said(down)[0][1]]  # ... only after the ack was said
        assert not cloud.never.is_set()  # and it never answered: ack and answer went anyway
        await agent.cleanup()
        await p.put(EndFrame())
        await p.wait()
    assert [k for k, _ in _said(down)][:2] == ["ack", "answer"]


def _read_when_released(monkeypatch: pytest.MonkeyPatch) -> tuple[asyncio.Event, asyncio.Event]:
    """The agent's blocking reads start (the first event is set) and finish only when the
    test sets the second: what a slow read in a worker thread looks like, without a clock."""
    reading, release = asyncio.Event(), asyncio.Event()

    async def held(fn: Callable[..., Any], *args: Any) -> Any:
        reading.set()
        await release.wait()
        return fn(*args)

    monkeypatch.setattr(AgentStage, "run_blocking", staticmethod(held))
    return reading, release


async def test_a_pause_read_in_flight_is_dropped_when_the_caller_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reply to a pause is read off the event loop: the caller's next words are
    handled while it reads, and what it read then lands nowhere."""
    reading, release = _read_when_released(monkeypatch)
    turns = TurnStage(TurnRules())
    agent = AgentStage(Gate([]), Gate([]), prefetch=Synth().prefetch, speculate=True)
    down: list[Frame] = []
    async with Pipeline([turns, agent], sink=down.append) as p:
        await _speak_then_pause(p, "我这个月的话费，", frames=5)
        await until(reading.is_set)
        await p.put(SpeechStartFrame(t=2.2))  # handled while the pause is being read
        await until(lambda: agent.caller_speaking)
        release.set()
        await until(lambda: agent.speculation["superseded"] == 1)
        assert agent._prepared is None and agent.speculation["prepared"] == 0
        await p.put(EndFrame())
        await p.wait()
    assert not any(k == "answer" for k, _ in _said(down))


async def test_the_knowledge_base_is_read_in_a_worker_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(AgentStage, "run_blocking", staticmethod(in_thread))
    loop_thread = threading.get_ident()
    agent = AgentStage(Gate([]), Gate([]), speculate=True)
    assert agent.kb is not None
    read_in: list[int] = []
    reply = KnowledgeBase.reply

    def traced(kb: KnowledgeBase, text: str, lang: str | None = None) -> Any:
        read_in.append(threading.get_ident())
        return reply(kb, text, lang)

    monkeypatch.setattr(KnowledgeBase, "reply", traced)
    async with Pipeline([agent], sink=lambda f: None) as p:
        await p.put(TurnPauseFrame(turn=1, text="我这个月的话费还剩多少", lang="zh", t=1.0))
        await until(lambda: bool(agent._tasks))
        await asyncio.gather(*list(agent._tasks))  # the reading's own task: no wall clock
        assert agent.speculation["prepared"] == 1 and agent._prepared is not None
        await p.put(EndFrame())
        await p.wait()
    assert read_in and all(t != loop_thread for t in read_in)


async def test_an_answer_read_while_the_caller_starts_again_is_not_spoken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The knowledge base's reply to a final transcript is read off the event loop; a
    caller who starts speaking before it is ready is not talked over: the turn is kept as
    talked over, and its words join the next turn's ask."""
    reading, release = _read_when_released(monkeypatch)
    agent = AgentStage(Gate([]), Gate([]))
    down: list[Frame] = []
    async with Pipeline([agent], sink=down.append) as p:
        await p.put(TranscriptFrame(turn=1, text="我想查一下话费", lang="zh", until=1.0,
                                    final=True))  # fmt: skip
        await until(reading.is_set)
        await p.put(SpeechStartFrame(t=1.3))  # the caller goes on while it reads
        await until(lambda: agent.caller_speaking)
        release.set()
        await until(lambda: 1 in agent.interrupted)
        assert agent.whole_ask(2, "还有流量", "zh") == "我想查一下话费还有流量"
        await p.put(EndFrame())
        await p.wait()
    assert not any(k == "answer" for k, _ in _said(down)) and 1 not in agent.replies
