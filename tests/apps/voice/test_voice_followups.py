"""The big model's follow-up waits for the floor: never over the caller, across their next
turn, dropped when they take the ask back or it goes stale (#17, session 14).

The queue is tested on a fake clock; the agent on the event loop's virtual time
(``looptime``): the emulated cloud answers after 5 s that cost nothing."""

from __future__ import annotations

import asyncio

import pytest

from rtgate.apps.voice.agent import FOLLOWUP_AFTER_HOLD, FOLLOWUP_LATER, AgentStage
from rtgate.apps.voice.followups import FollowupPolicy, FollowupQueue, cancels
from rtgate.apps.voice.frames import (
    AgentTextFrame,
    EndFrame,
    Frame,
    InterruptionFrame,
    SpeechStartFrame,
    SpeechStopFrame,
    TranscriptFrame,
    TurnEndFrame,
)
from rtgate.apps.voice.pipeline import Pipeline
from rtgate.gate import Gate
from rtgate.tiers.fake import FakeTier


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_a_line_waits_across_one_turn_not_two() -> None:
    clock = Clock()
    q = FollowupQueue(clock)
    q.ask(1, "zh")
    q.turn_ended(1)
    assert q.due() == []  # still out
    q.ready(1, "退款三到五个工作日到账。")
    q.turn_ended(2)  # the caller's next turn: it may still be said after that one's answer
    (line,) = q.due()
    assert (line.turn, line.line) == (1, "退款三到五个工作日到账。")
    assert q.outcomes == {1: "spoken"} and q.due() == []
    q.ask(3, "zh")
    q.ready(3, "something")
    q.turn_ended(4)
    q.turn_ended(5)  # two turns later and never said: stale
    assert q.due() == [] and q.outcomes[3] == "stale"


def test_a_line_goes_stale_after_its_seconds() -> None:
    clock = Clock()
    q = FollowupQueue(clock, FollowupPolicy(stale_s=30.0))
    q.ask(1, "en")
    clock.t = 29.0
    q.ready(1, "It takes three days.")
    clock.t = 31.0
    assert q.due() == [] and q.outcomes == {1: "stale"}
    q.ready(1, "late")  # a job that comes back after it was dropped stays dropped
    assert q.due() == []


def test_a_cancel_line_drops_the_asks_before_it_only() -> None:
    q = FollowupQueue(Clock())
    q.ask(1, "zh")
    q.ask(3, "zh")
    assert q.heard(2, "流量还剩多少？") == []
    assert q.heard(2, "停，先别说了。") == [1]
    q.ready(3, "ok")
    assert q.outcomes == {1: "cancelled"} and [p.turn for p in q.due()] == [3]
    q.ask(4, "zh")
    q.ready(4, None)  # the job failed or only repeated the answer
    assert q.outcomes[4] == "failed" and q.due() == []


def test_the_record_of_outcomes_keeps_the_latest_turns_only() -> None:
    clock = Clock()
    q = FollowupQueue(clock, FollowupPolicy(keep_outcomes=3))
    for turn in range(1, 6):  # spoken, failed, spoken, failed, spoken
        q.ask(turn, "en")
        q.ready(turn, "more" if turn % 2 else None)
        assert [p.turn for p in q.due()] == ([turn] if turn % 2 else [])
        q.turn_ended(turn)
    assert q.outcomes == {3: "spoken", 4: "failed", 5: "spoken"}  # turns 1 and 2 forgotten


def test_a_long_call_holds_a_bounded_record() -> None:
    clock = Clock()
    q = FollowupQueue(clock)
    for turn in range(1, 501):
        q.ask(turn, "zh")
        q.ready(turn, "好的。")
        q.due()
        q.turn_ended(turn)
        clock.t += 10.0
    assert len(q.outcomes) == FollowupPolicy().keep_outcomes == 64
    assert min(q.outcomes) == 437 and q.outcomes[500] == "spoken"


@pytest.mark.parametrize(
    ("text", "taken_back"),
    [
        ("No, no, stop there.", True),
        ("Actually, forget that.", True),
        ("Actually, never mind.", True),
        ("停，先别说了。", True),
        ("你先停一下。", True),
        ("算了算了。", True),
        ("Hold on a second.", False),
        ("不对不对。", False),
        ("Sorry, let me ask something else.", False),
        ("I want to stop my broadband subscription from next month please.", False),
        ("怎么停机保号？", False),
        ("", False),
    ],
)
def test_what_takes_an_ask_back(text: str, taken_back: bool) -> None:
    assert cancels(text) is taken_back


ASK = "我这个月话费多扣了五十块，另外宽带也断网了，能不能派师傅来修？"
DEEP = "多扣的五十元我已经帮您提交核查，宽带报修单也已经派给师傅。"


def _end(turn: int, text: str, t: float) -> list[Frame]:
    return [
        SpeechStopFrame(t=t),
        TurnEndFrame(turn=turn, text=text, lang="zh", t=t, decided_t=t + 0.2, rule="question"),
        TranscriptFrame(turn=turn, text=text, lang="zh", until=t, final=True),
    ]


def _said(down: list[Frame]) -> list[tuple[int, str, str]]:
    return [(f.turn, f.kind, f.text) for f in down if isinstance(f, AgentTextFrame) and f.text]


async def _call(script: list[Frame | float], cloud_ms: float = 5000.0) -> list[Frame]:
    """The agent alone, fed ``script`` (frames, and seconds of virtual time to let pass);
    the emulated cloud answers every follow-up after ``cloud_ms``. A check list of what the
    agent said is returned, with the caller's frames interleaved."""
    seen: list[Frame] = []
    cloud = FakeTier("cloud", 90, [DEEP], ttft_ms=cloud_ms, delegable=True)
    async with Gate([cloud]) as deep:
        agent = AgentStage(Gate([]), Gate([]), deep)
        async with Pipeline([agent], sink=seen.append) as p:
            for step in script:
                if isinstance(step, float):
                    await asyncio.sleep(step)
                    continue
                seen.append(step)  # where the caller was when the agent spoke
                await p.put(step)
                await asyncio.sleep(0.01)  # virtual: every task runs until it waits
            await p.put(EndFrame())
            await p.wait()
    return seen


def _followups_while_caller_has_the_floor(seen: list[Frame]) -> list[str]:
    """Follow-up lines the agent sent between the caller's first sound and the end of
    that turn."""
    open_turn, out = False, []
    for f in seen:
        if isinstance(f, SpeechStartFrame):
            open_turn = True
        elif isinstance(f, TurnEndFrame):
            open_turn = False
        elif isinstance(f, AgentTextFrame) and f.kind == "followup" and open_turn:
            out.append(f.text)
    return out


@pytest.mark.looptime
@pytest.mark.parametrize("caller", ["speaking", "pausing"])
async def test_a_followup_back_during_the_next_turn_is_said_after_its_answer(
    caller: str,
) -> None:
    # the old agent dropped a follow-up that came back while the caller was speaking, and
    # started one that came back in a pause inside the caller's next turn over them
    script: list[Frame | float] = [
        SpeechStartFrame(t=0.0),
        *_end(1, ASK, 3.0),
        1.0,
        SpeechStartFrame(t=4.5),  # the next turn starts before the cloud is back
    ]
    if caller == "pausing":
        script.append(SpeechStopFrame(t=5.5))  # a pause inside that turn
    script += [6.0, SpeechStartFrame(t=11.0), *_end(2, "流量还剩多少？", 12.0), 1.0]
    seen = await _call(script)
    said = _said(seen)
    assert _followups_while_caller_has_the_floor(seen) == []
    follow = [(t, text) for t, kind, text in said if kind == "followup"]
    assert follow == [(1, FOLLOWUP_LATER["zh"] + DEEP)]
    kinds = [(t, kind) for t, kind, _ in said]
    # after the second turn's answer, never before it
    assert kinds.index((1, "followup")) > max(i for i, k in enumerate(kinds) if k == (2, "answer"))


@pytest.mark.looptime
async def test_a_followup_back_before_the_caller_goes_on_is_said_at_once() -> None:
    seen = await _call([SpeechStartFrame(t=0.0), *_end(1, ASK, 3.0), 6.0])
    follow = [text for t, kind, text in _said(seen) if kind == "followup"]
    assert follow == [FOLLOWUP_AFTER_HOLD["zh"] + DEEP]


@pytest.mark.looptime
async def test_a_barge_in_keeps_the_followup_a_cancel_line_drops_it() -> None:
    def script(line: str) -> list[Frame | float]:
        return [
            SpeechStartFrame(t=0.0),
            *_end(1, ASK, 3.0),
            0.5,
            SpeechStartFrame(t=3.8),  # over the holding answer
            InterruptionFrame(t=3.8),
            *_end(2, line, 5.0),
            8.0,
        ]

    kept = [
        text for t, k, text in _said(await _call(script("不对不对。"))) if (t, k) == (1, "followup")
    ]
    assert kept == [FOLLOWUP_LATER["zh"] + DEEP]  # the old agent cancelled it at the barge-in
    gone = [
        t for t, k, _ in _said(await _call(script("停，先别说了。"))) if (t, k) == (1, "followup")
    ]
    assert gone == []


@pytest.mark.looptime
async def test_a_followup_two_turns_late_is_dropped() -> None:
    seen = await _call(
        [
            SpeechStartFrame(t=0.0),
            *_end(1, ASK, 3.0),
            0.5,
            SpeechStartFrame(t=4.0),
            *_end(2, "流量还剩多少？", 5.0),  # the cloud is still out after this answer
            0.5,
            SpeechStartFrame(t=6.0),
            *_end(3, "营业厅几点关门？", 7.0),
            10.0,  # back only now: two turns later
        ]
    )
    assert [(t, k) for t, k, _ in _said(seen) if (t, k) == (1, "followup")] == []
