"""The agent end to end on real models: ack before answer, follow-up after; barge-in."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from rtgate.apps.voice.agent import (
    FOLLOWUP_AFTER_HOLD,
    AgentStage,
    ack_units,
    needs_big_model,
    split_sentences,
)
from rtgate.apps.voice.bench import Clip
from rtgate.apps.voice.eot_text import ByCue
from rtgate.apps.voice.frames import (
    RATE,
    AgentAudioFrame,
    AgentStartedFrame,
    AgentStoppedFrame,
    AgentTextFrame,
    AudioFrame,
    EndFrame,
    Frame,
    InterruptionFrame,
    Pcm,
    SpeechStartFrame,
    SpeechStopFrame,
    TranscriptFrame,
)
from rtgate.apps.voice.pipeline import Pipeline
from rtgate.apps.voice.session import VoiceCall, VoiceModels
from rtgate.apps.voice.transport import RecordingOut
from rtgate.apps.voice.turns import TurnRules, TurnStage
from rtgate.gate import Gate
from tests.apps.voice.voice_helpers import until

session = pytest.mark.asyncio(loop_scope="session")


def test_sentence_splitting_ack_length_and_big_model_questions() -> None:
    done, rest = split_sentences("您好。请稍等，我帮您查一下余额和本月的流量，马上")
    assert done == ["您好。", "请稍等，我帮您查一下余额和本月的流量，"] and rest == "马上"
    assert split_sentences("Sure. One sec")[0] == ["Sure."]
    assert ack_units("好的，我帮您查一下。") == 8 and ack_units("Sure, let me check.") == 4
    assert needs_big_model("如果我这个月退订套餐，已经交的月费怎么退呢？")
    assert needs_big_model("What is your refund policy?")
    assert not needs_big_model("请问我的话费余额还有多少？")


class Watched(RecordingOut):
    """A recording output that signals its first chunk and each barge-in."""

    def __init__(self) -> None:
        super().__init__()
        self.playing = asyncio.Event()
        self.cleared = asyncio.Event()

    def write(self, pcm: Pcm, frame: AgentAudioFrame) -> None:
        super().write(pcm, frame)
        self.playing.set()

    def clear(self) -> None:
        super().clear()
        self.cleared.set()


def pad(pcm: np.ndarray, after: float) -> np.ndarray:
    return np.concatenate(
        [np.zeros(RATE // 4, np.float32), pcm, np.zeros(int(after * RATE), np.float32)]
    )


@pytest.mark.slow
@session
async def test_ack_comes_first_answer_next_followup_last(
    models: VoiceModels, clips: dict[str, Clip]
) -> None:
    out = RecordingOut()
    async with VoiceCall(models, out, pace_out=False, live=False, lang="zh") as call:
        await call.feed(pad(clips["zh_refund"].pcm, 1.2), pace=False)
        await call.finish()
    said = [
        (f.kind, f.text)
        for _, s, f in call.events
        if s == "agent" and isinstance(f, AgentTextFrame) and f.text
    ]
    kinds = [k for k, _ in said]
    assert kinds[0] == "ack" and ack_units(said[0][1]) <= 8
    assert "answer" in kinds and "followup" in kinds
    assert kinds.index("answer") < kinds.index("followup")
    # a multi-part ask: the knowledge base holds it and the big model follows it up
    assert call.agent.routes[1] == "kb-hold" and call.agent.replies[1].followup
    assert said[kinds.index("followup")][1].startswith(FOLLOWUP_AFTER_HOLD["zh"])
    played = [c.kind for c in out.chunks]
    assert played[0] == "ack" and played[-1] == "followup"  # and audio in the same order
    assert 1 not in call.agent.traces  # the in-line answer involved no model tier at all
    assert call.agent.followups[1]["tier"] == "cloud" and call.agent.followups[1]["spoken"]


@pytest.mark.slow
@session
async def test_bargein_stops_audio_cancels_generation_keeps_context(
    models: VoiceModels, clips: dict[str, Clip]
) -> None:
    out = Watched()
    async with VoiceCall(models, out, live=False, lang="zh") as call:
        await call.feed(pad(clips["zh_balance"].pcm, 1.0), pace=False)
        await out.playing.wait()  # the acknowledgement is playing
        answer = call.agent._answer
        await call.feed(pad(clips["zh_bargein"].pcm, 1.0), pace=False)
        await out.cleared.wait()
        stopped = len(out.chunks)
        assert call.output.stops and not call.output.playing
        if answer is not None:
            await asyncio.wait([answer])
            # in flight at the barge-in: cancelled; already finished: left alone
            assert answer.cancelled() == (call.agent.cancelled == 1)
        await call.finish()
    assert call.turns.turn == 2
    assert [m.role for m in call.agent.history][:2] == ["user", "assistant"]
    assert "余额" in call.agent.history[0].content or "多少" in call.agent.history[0].content
    turn1_after = [c for c in out.chunks[stopped:] if c.turn == 1]
    assert not turn1_after  # nothing of the interrupted turn played after the stop


def test_history_keeps_everything_but_prompts_only_finished_answers() -> None:
    agent = AgentStage(Gate([]), Gate([]), history_turns=2)
    agent.turn_text = {1: "余额多少？", 2: "套餐呢？", 3: "等一下"}
    agent.said = {1: ["好的。", "还有50元。"], 2: ["好的。", "有三种"], 3: ["好的，您请说。"]}
    agent.answers = {1: ["还有50元。"], 2: ["有三种"]}
    agent.interrupted = {2}
    assert [m.content for m in agent.history] == [
        "套餐呢？", "好的。 有三种 …", "等一下", "好的，您请说。",
    ]  # fmt: skip
    prompt = agent.history_before(3, prompt=True)
    assert [(m.role, m.content) for m in prompt] == [
        ("user", "余额多少？"), ("assistant", "还有50元。"), ("user", "套餐呢？"),
    ]  # fmt: skip


async def _end_turn(p: Pipeline, text: str) -> None:
    """Turn 1: speech, a covering partial, then silence until turn-taking ends it."""
    await p.put(SpeechStartFrame(t=0.0))
    await p.put(SpeechStopFrame(t=2.0))
    await p.put(TranscriptFrame(turn=1, text=text, lang="zh", until=2.05))
    quiet = np.zeros(RATE // 50, np.float32)
    for i in range(20):
        await p.put(AudioFrame(pcm=quiet, t=2.0 + 0.02 * i, prob=0.01))


async def test_the_agent_keeps_the_floor_between_its_ack_and_its_answer() -> None:
    turns, agent = TurnStage(TurnRules()), AgentStage(Gate([]), Gate([]))
    down: list[Frame] = []
    async with Pipeline([turns, agent], sink=down.append) as p:
        await _end_turn(p, "余额还有多少？")
        await until(lambda: any(isinstance(f, AgentTextFrame) for f in down))  # the ack
        # the output plays the ack, then falls silent while the answer is generated
        await agent.put(AgentStartedFrame(), upstream=True)
        await until(lambda: turns.agent_speaking)
        await agent.put(AgentStoppedFrame(), upstream=True)
        # the caller speaks in that gap: a barge-in, not a new turn to talk over
        await p.put(SpeechStartFrame(t=3.0))
        await until(lambda: any(isinstance(f, InterruptionFrame) for f in down))
        await until(lambda: not turns.agent_speaking)  # the held stop went up after it
        assert [f.t for f in down if isinstance(f, InterruptionFrame)] == [3.0]
        assert agent.interrupted == {1}
        await p.put(EndFrame())
        await p.wait()


async def test_once_the_reply_is_over_the_stop_goes_up_and_speech_is_a_new_turn() -> None:
    turns, agent = TurnStage(TurnRules()), AgentStage(Gate([]), Gate([]))
    down: list[Frame] = []
    async with Pipeline([turns, agent], sink=down.append) as p:
        await _end_turn(p, "余额还有多少？")
        await until(lambda: any(isinstance(f, AgentTextFrame) for f in down))
        await agent.put(AgentStartedFrame(), upstream=True)
        await until(lambda: turns.agent_speaking)
        await agent.put(AgentStoppedFrame(), upstream=True)  # held: the reply is not over
        assert turns.agent_speaking
        # the final transcript is empty: the partial is answered, and once that answer's
        # audio has started (it was queued while the output was silent) and ended, the
        # reply is over
        await agent.put(TranscriptFrame(turn=1, text="", lang="zh", until=2.0, final=True))
        await until(lambda: agent._answer is not None and agent._answer.done())
        assert turns.agent_speaking
        await agent.put(AgentStartedFrame(), upstream=True)
        await agent.put(AgentStoppedFrame(), upstream=True)
        await until(lambda: not turns.agent_speaking)
        await p.put(SpeechStartFrame(t=3.0))
        await p.put(EndFrame())
        await p.wait()
    assert not any(isinstance(f, InterruptionFrame) for f in down)


async def test_the_floor_is_kept_until_the_queued_answer_is_heard() -> None:
    # natural5: the ack played and stopped, the answer's text was queued (the floor let go)
    # and synthesised while the caller began a new turn; it then started over them
    turns, agent = TurnStage(TurnRules()), AgentStage(Gate([]), Gate([]))
    down: list[Frame] = []
    async with Pipeline([turns, agent], sink=down.append) as p:
        await _end_turn(p, "请问我的话费余额还有多少？")
        await until(lambda: any(isinstance(f, AgentTextFrame) for f in down))  # the ack
        await agent.put(AgentStartedFrame(), upstream=True)
        await until(lambda: turns.agent_speaking)
        await agent.put(AgentStoppedFrame(), upstream=True)  # the ack is over: held
        final = "请问我的话费余额还有多少？"
        await agent.put(TranscriptFrame(turn=1, text=final, lang="zh", until=2.0, final=True))
        await until(lambda: any(isinstance(f, AgentTextFrame) and f.kind == "answer"
                                for f in down))  # fmt: skip
        await until(lambda: agent._answer is not None and agent._answer.done())
        assert turns.agent_speaking  # queued, not yet heard: still the agent's floor
        await p.put(SpeechStartFrame(t=3.0))  # so the caller starting now is a barge-in
        await until(lambda: any(isinstance(f, InterruptionFrame) for f in down))
        assert agent.interrupted == {1}
        await p.put(EndFrame())
        await p.wait()


async def test_once_the_queued_answer_plays_the_floor_goes_with_its_end() -> None:
    turns, agent = TurnStage(TurnRules()), AgentStage(Gate([]), Gate([]))
    down: list[Frame] = []
    async with Pipeline([turns, agent], sink=down.append) as p:
        await _end_turn(p, "请问我的话费余额还有多少？")
        await until(lambda: any(isinstance(f, AgentTextFrame) for f in down))
        await agent.put(AgentStartedFrame(), upstream=True)
        await agent.put(AgentStoppedFrame(), upstream=True)
        final = "请问我的话费余额还有多少？"
        await agent.put(TranscriptFrame(turn=1, text=final, lang="zh", until=2.0, final=True))
        await until(lambda: agent._answer is not None and agent._answer.done())
        await agent.put(AgentStartedFrame(), upstream=True)  # the answer's audio starts
        await agent.put(AgentStoppedFrame(), upstream=True)  # and ends: the stop goes up
        await until(lambda: not turns.agent_speaking)
        await p.put(SpeechStartFrame(t=9.0))  # a new turn, not a barge-in
        await p.put(EndFrame())
        await p.wait()
    assert not any(isinstance(f, InterruptionFrame) for f in down)


@pytest.mark.slow
@session
async def test_the_emulated_cloud_does_not_queue_on_the_local_model(models: VoiceModels) -> None:
    from rtgate.tiers.emulated import EmulatedLatency
    from rtgate.tiers.llm import LLMTier

    assert models.deep_gate is not None and models.answer_gate is not None
    (cloud,) = models.deep_gate.tiers
    (local,) = models.answer_gate.tiers
    assert isinstance(cloud, EmulatedLatency) and isinstance(cloud.inner, LLMTier)
    assert isinstance(local, LLMTier)
    # a background answer on the cloud's worker leaves the local worker free for scores
    assert cloud.inner.backend is not local.backend
    assert models.lm_eot is not None
    scorer: object = models.lm_eot.scorer  # a Scorer (protocol), which the backend is
    assert scorer is local.backend
    assert isinstance(models.eot, ByCue)  # the text model on questions, by default
