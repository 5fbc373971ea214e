"""Turn-taking: transcript cues set the silence needed; speech over the agent barges in."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from typer.testing import CliRunner

from rtgate.apps.voice.cli import bench_app
from rtgate.apps.voice.frames import (
    RATE,
    AgentStartedFrame,
    AgentStoppedFrame,
    AudioFrame,
    EndFrame,
    Frame,
    InterruptionFrame,
    SpeechStartFrame,
    SpeechStopFrame,
    TranscriptFrame,
    TurnEndFrame,
)
from rtgate.apps.voice.pipeline import Pipeline
from rtgate.apps.voice.session import VoiceConfig
from rtgate.apps.voice.turns import TurnRules, TurnStage, cue, text_class, voice_class
from rtgate.core.errors import InvalidRequest

RULES = TurnRules(question_ms=100, clause_ms=400, complete_p=0.6, timeout_ms=900)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("请问我的话费余额还有多少？", "question"),
        ("上个月的账单一共是多少钱", "question"),
        ("有推荐的吗", "question"),
        ("我想问一下那个", None),
        ("然后", None),
        ("我家里的信号最近特别差。", "clause"),
        ("What is my current balance?", "question"),
        ("Can I switch to a plan with more data", "question"),
        ("So I was wondering if", None),
        ("I would like to ask about the...", None),
        ("My internet has been down since Monday.", "clause"),
        # a subordinate clause is not a turn until its main clause comes
        ("如果我这个月退订套餐", None),
        ("如果我这个月退订套餐，已经交的月费怎么退？", "question"),
        ("因为我下个月要出国，", None),
        ("If I cancel my contract this month.", None),
        ("When I call you, it drops.", "clause"),
        ("When I call you", None),
        ("When does the store close", "question"),
        # 几 that counts is no question: the statement may go on
        ("我家的网速这几天特别慢。", "clause"),
        ("这个月还剩几个G", "question"),
        # a greeting alone: the ask comes after it
        ("你好，", None),
        ("喂，你好。", None),
        ("Hi.", None),
        ("Hello there", None),
        ("Hi, do you know a good restaurant near the station?", "question"),
        ("", None),
        # a question may end on a particle; a hyphenated word is one word
        ("When will it be back on?", "question"),
        ("I want to cancel my voicemail add-on.", "clause"),
        ("I want to cancel my voicemail add on", None),
        ("Can I pay for it with", None),
    ],
)
def test_cues(text: str, expected: str | None) -> None:
    assert cue(text) == expected


def silence(t: float, seconds: float) -> list[AudioFrame]:
    n = int(seconds / 0.032)
    return [AudioFrame(pcm=np.zeros(512, np.float32), t=t + i * 0.032, prob=0.01) for i in range(n)]


async def run(frames: list[Frame]) -> tuple[TurnStage, list[Frame]]:
    stage = TurnStage(RULES)
    out: list[Frame] = []
    async with Pipeline([stage], sink=out.append) as p:
        for f in frames:
            await p.put(f)
        await p.put(EndFrame())
        await p.wait()
    return stage, out


def partial(text: str, until: float) -> TranscriptFrame:
    return TranscriptFrame(turn=1, text=text, lang="zh", until=until)


async def test_a_question_ends_the_turn_after_a_short_silence() -> None:
    frames: list[Frame] = [SpeechStartFrame(t=0.0), SpeechStopFrame(t=2.0)]
    frames += [partial("请问我的话费余额还有多少？", until=2.05), *silence(2.0, 0.3)]
    _stage, out = await run(frames)
    ends = [f for f in out if isinstance(f, TurnEndFrame)]
    assert len(ends) == 1 and ends[0].rule == "question"
    assert 0.1 <= ends[0].decided_t - 2.0 < 0.2


async def test_a_breath_inside_a_question_is_not_its_end() -> None:
    # "Can I switch to a plan with more data? | ... for the same price": a 0.13 s breath
    stage = TurnStage(TurnRules())
    out: list[Frame] = []
    q = TranscriptFrame(turn=1, text="Can I switch to a plan with more data?", lang="en",
                        until=2.0)  # fmt: skip
    whole = TranscriptFrame(turn=1, text=q.text[:-1] + " for the same price?", lang="en",
                            until=3.0)  # fmt: skip
    # audio and transcripts are data frames: handled in this order (speech events jump it)
    frames = [*silence(2.0, 0.13), *voiced(2.128, 0.872), whole, *silence(3.0, 0.3)]
    async with Pipeline([stage], sink=out.append) as p:
        await p.put(SpeechStartFrame(t=0.0))
        for f in [q, *frames]:
            await p.put(f)
        await p.put(EndFrame())
        await p.wait()
    ends = [f for f in out if isinstance(f, TurnEndFrame)]
    assert [e.rule for e in ends] == ["question"] and "price" in ends[0].text
    assert ends[0].t == 3.0 and ends[0].decided_t - 3.0 < 0.25


async def test_a_trailing_clause_waits_and_speech_resuming_keeps_the_turn() -> None:
    frames: list[Frame] = [SpeechStartFrame(t=0.0), SpeechStopFrame(t=1.0)]
    frames += [partial("我想问一下那个", until=1.05), *silence(1.0, 0.7)]
    frames += [SpeechStartFrame(t=1.7), SpeechStopFrame(t=3.0)]
    frames += [partial("我想问一下那个，上个月的账单是多少钱？", until=3.1), *silence(3.0, 0.3)]
    _stage, out = await run(frames)
    ends = [f for f in out if isinstance(f, TurnEndFrame)]
    assert [e.rule for e in ends] == ["question"]  # no cut-in during the 0.7 s pause
    assert ends[0].t == 3.0 and "账单" in ends[0].text


async def test_a_stale_transcript_is_not_trusted_and_times_out() -> None:
    frames: list[Frame] = [SpeechStartFrame(t=0.0), SpeechStopFrame(t=2.0)]
    frames += [partial("请问我的话费", until=1.2), *silence(2.0, 1.0)]  # ends before speech did
    _, out = await run(frames)
    ends = [f for f in out if isinstance(f, TurnEndFrame)]
    assert [e.rule for e in ends] == ["timeout"]
    assert ends[0].decided_t - 2.0 >= 0.9


async def test_speech_while_the_agent_talks_is_a_bargein() -> None:
    frames: list[Frame] = [AgentStartedFrame(), SpeechStartFrame(t=5.0)]
    _stage, out = await run(frames)
    assert isinstance(out[0], InterruptionFrame) and out[0].t == 5.0
    assert isinstance(out[1], SpeechStartFrame)
    _, quiet = await run([SpeechStartFrame(t=5.0)])
    assert not any(isinstance(f, InterruptionFrame) for f in quiet)


class FakeEndOfTurn:
    """Scores from a table; ``scored`` is set once a score was handed out."""

    def __init__(self, table: dict[str, float]) -> None:
        self.table = table
        self.asked: list[str] = []
        self.scored = asyncio.Event()

    async def p_end(self, text: str, lang: str) -> float | None:
        self.asked.append(text)
        self.scored.set()
        return self.table.get(text)


async def run_scored(
    eot: FakeEndOfTurn, text: str, rules: TurnRules = RULES, pause_s: float = 0.7
) -> tuple[TurnStage, list[TurnEndFrame]]:
    """A clause partial, then (once scored) ``pause_s`` of silence; the turn ends somewhere
    (rule ``end``: not before the call did)."""
    eot.scored.clear()
    stage = TurnStage(rules, eot=eot)
    out: list[Frame] = []
    async with Pipeline([stage], sink=out.append) as p:
        await p.put(SpeechStartFrame(t=0.0))
        await p.put(SpeechStopFrame(t=2.0))
        await p.put(partial(text, until=2.0))
        await asyncio.wait_for(eot.scored.wait(), 5.0)
        for f in silence(2.0, pause_s):
            await p.put(f)
        await p.put(EndFrame())
        await p.wait()
    return stage, [f for f in out if isinstance(f, TurnEndFrame)]


async def test_a_clause_read_as_finished_ends_sooner() -> None:
    eot = FakeEndOfTurn({"等一下我换个问题": 0.8})
    _stage, ends = await run_scored(eot, "等一下我换个问题")
    assert eot.asked == ["等一下我换个问题"]
    assert [e.rule for e in ends] == ["complete"]
    assert 0.2 <= ends[0].decided_t - 2.0 < 0.3


async def test_a_clause_read_as_unfinished_waits_the_clause_silence() -> None:
    eot = FakeEndOfTurn({"我家里的信号最近特别差": 0.35})
    _stage, ends = await run_scored(eot, "我家里的信号最近特别差")
    assert [e.rule for e in ends] == ["clause"]
    assert ends[0].decided_t - 2.0 >= 0.4


async def test_no_score_leaves_the_rule_alone_and_questions_are_not_scored() -> None:
    eot = FakeEndOfTurn({})  # the model had no opinion (busy, late)
    _stage, ends = await run_scored(eot, "我家里的信号最近特别差")
    assert [e.rule for e in ends] == ["clause"] and ends[0].decided_t - 2.0 >= 0.4
    asked = FakeEndOfTurn({})
    stage = TurnStage(RULES, eot=asked)
    async with Pipeline([stage], sink=lambda f: None) as p:
        await p.put(SpeechStartFrame(t=0.0))
        await p.put(partial("请问我的话费余额还有多少？", until=1.0))
        await p.put(partial("我想问一下那个", until=1.5))
        await p.put(EndFrame())
        await p.wait()
    assert asked.asked == []  # a question ends fast anyway; a fragment never ends early


def test_the_surer_the_model_the_shorter_the_wait() -> None:
    rules = TurnRules(clause_ms=1200, complete_p=0.6, sure_ms=200, sure_p=0.7)
    waits = [rules.wait_ms("clause", p) for p in (None, 0.3, 0.6, 0.65, 0.7, 0.95)]
    assert waits == pytest.approx([1200, 1200, 1200, 700, 200, 200])
    # unscored or read as going on, a clause outwaits the pauses callers make inside a turn
    assert TurnRules().wait_ms("clause", 0.3) >= 1200.0
    assert TurnRules().wait_ms("clause", None) >= 1200.0
    assert rules.wait_ms("question", 0.1) == rules.question_ms  # a question needs no score
    assert rules.wait_ms(None, 0.99) == rules.timeout_ms  # nor does a fragment get one


async def test_a_clause_read_as_surely_finished_ends_sooner_still() -> None:
    eot = FakeEndOfTurn({"等一下我换个问题": 0.8, "我想改一下我的地址": 0.65})
    fast = TurnRules(question_ms=100, clause_ms=400, complete_p=0.6, sure_ms=100, sure_p=0.75)
    decided = {}
    for text in ("等一下我换个问题", "我想改一下我的地址"):
        _stage, (end,) = await run_scored(eot, text, fast)
        assert end.rule == "complete"
        decided[text] = end.decided_t - 2.0
    assert 0.1 <= decided["等一下我换个问题"] < 0.2
    assert 0.25 <= decided["我想改一下我的地址"] < 0.35  # 0.65: a third of the way down


async def test_a_clause_read_as_going_on_outwaits_a_one_second_pause() -> None:
    # the natural-voice calls: pauses of 0.6-1.0 s after a clause the model scored 0.01-0.3
    eot = FakeEndOfTurn({"我的号码昨天突然停机了": 0.2, "我要取消彩铃业务": 0.8})
    _stage, ends = await run_scored(eot, "我的号码昨天突然停机了", TurnRules(), pause_s=1.0)
    assert [e.rule for e in ends] == ["end"]  # not decided within the pause
    _stage, ends = await run_scored(eot, "我的号码昨天突然停机了", TurnRules(), pause_s=1.4)
    assert [e.rule for e in ends] == ["clause"]
    assert ends[0].decided_t - 2.0 >= 1.2
    _stage, ends = await run_scored(eot, "我要取消彩铃业务", TurnRules(), pause_s=1.0)
    assert [e.rule for e in ends] == ["complete"] and ends[0].decided_t - 2.0 < 0.3


async def test_the_agent_starting_over_a_talking_caller_is_a_bargein() -> None:
    # the caller started a new turn while the agent was between sentences; then the agent's
    # next sentence starts: it is stopped at once
    frames: list[Frame] = [AgentStoppedFrame(), SpeechStartFrame(t=7.0), AgentStartedFrame()]
    _stage, out = await run(frames)
    stops = [f for f in out if isinstance(f, InterruptionFrame)]
    assert len(stops) == 1 and stops[0].t == 7.0
    # once the caller is quiet again, or the turn is over, the agent may talk
    _, quiet = await run([SpeechStartFrame(t=7.0), SpeechStopFrame(t=8.0), AgentStartedFrame()])
    assert not any(isinstance(f, InterruptionFrame) for f in quiet)
    ended: list[Frame] = [SpeechStartFrame(t=0.0), SpeechStopFrame(t=2.0)]
    ended += [partial("请问我的话费余额还有多少？", until=2.05), *silence(2.0, 0.3)]
    _, acked = await run([*ended, AgentStartedFrame()])
    assert any(isinstance(f, TurnEndFrame) for f in acked)
    assert not any(isinstance(f, InterruptionFrame) for f in acked)


async def test_the_silence_is_dated_from_the_fade_not_from_the_probability() -> None:
    pcm = np.zeros(int(0.016 * RATE), np.float32)
    frames: list[Frame] = [SpeechStartFrame(t=0.0)]
    frames += [AudioFrame(pcm=pcm, t=1.0 + 0.016 * i, prob=0.99) for i in range(5)]
    # the voice has ended (faded) at 1.08; the probability only drops 0.096 s later
    frames += [AudioFrame(pcm=pcm, t=1.08 + 0.016 * i, prob=0.9, faded=True) for i in range(6)]
    frames += [AudioFrame(pcm=pcm, t=1.176 + 0.016 * i, prob=0.1, faded=True) for i in range(3)]
    stage, _ = await run(frames)
    assert stage.quiet_since == pytest.approx(1.08)
    # without a fade the probability dates it, and the fade never reaches back further
    # than backdate_s
    frames = [SpeechStartFrame(t=0.0), AudioFrame(pcm=pcm, t=1.0, prob=0.99)]
    frames += [AudioFrame(pcm=pcm, t=1.016 + 0.016 * i, prob=0.9, faded=True) for i in range(30)]
    frames += [AudioFrame(pcm=pcm, t=1.5, prob=0.1, faded=True)]
    stage, _ = await run(frames)
    assert stage.quiet_since == pytest.approx(1.5 - RULES.backdate_s)


async def test_while_the_agent_talks_a_lower_probability_is_a_bargein() -> None:
    pcm = np.zeros(int(0.016 * RATE), np.float32)
    stage = TurnStage(RULES)
    out: list[Frame] = []
    async with Pipeline([stage], sink=out.append) as p:
        # the caller's turn is over (its speech stopped); the agent talks
        for f in (SpeechStartFrame(t=0.0), SpeechStopFrame(t=1.0), AgentStartedFrame()):
            await p.put(f)
        # a faint onset (0.35), then the VAD's own speech start
        await p.put(AudioFrame(pcm=pcm, t=2.0, prob=0.1))
        await p.put(AudioFrame(pcm=pcm, t=2.016, prob=0.35))
        for _ in range(100):
            if any(isinstance(f, InterruptionFrame) for f in out):
                break
            await asyncio.sleep(0)
        await p.put(AudioFrame(pcm=pcm, t=2.032, prob=0.8))
        await p.put(SpeechStartFrame(t=2.032))
        await p.put(EndFrame())
        await p.wait()
    stops = [f for f in out if isinstance(f, InterruptionFrame)]
    assert [f.t for f in stops] == [2.016]  # at the 0.35 frame, and only once
    # the turn just ended on a question, the VAD has not seen the speech stop yet, and the
    # agent starts its ack: the caller's trailing probability (0.4) is not a barge-in
    trailing: list[Frame] = []
    async with Pipeline([TurnStage(RULES)], sink=trailing.append) as p:
        await p.put(SpeechStartFrame(t=0.0))
        await p.put(partial("请问我的话费余额还有多少？", until=2.0))
        for i in range(12):
            await p.put(AudioFrame(pcm=pcm, t=2.0 + 0.016 * i, prob=0.45))
        for _ in range(100):
            if any(isinstance(f, TurnEndFrame) for f in trailing):
                break
            await asyncio.sleep(0)
        await p.put(AgentStartedFrame())
        for i in range(5):
            await p.put(AudioFrame(pcm=pcm, t=2.2 + 0.016 * i, prob=0.4))
        await p.put(EndFrame())
        await p.wait()
    assert any(isinstance(f, TurnEndFrame) for f in trailing)
    assert not any(isinstance(f, InterruptionFrame) for f in trailing)


class FixedVoice:
    """An audio end-of-turn model that always hears the same thing (records what it got)."""

    def __init__(self, p: float) -> None:
        self.p = p
        self.heard: list[int] = []

    def p_end(self, audio: np.ndarray) -> float:
        self.heard.append(len(audio))
        return self.p


def voiced(t0: float, seconds: float, prob: float = 0.99) -> list[AudioFrame]:
    n = int(seconds / 0.032)
    tone = (0.1 * np.sin(np.arange(512) * 0.2)).astype(np.float32)
    return [AudioFrame(pcm=tone, t=t0 + i * 0.032, prob=prob) for i in range(n)]


async def run_fused(frames: list[Frame], voice: FixedVoice) -> tuple[TurnStage, list[Frame]]:
    stage = TurnStage(TurnRules(), audio_eot=voice)
    out: list[Frame] = []
    async with Pipeline([stage], sink=out.append) as p:
        for f in frames:
            await p.put(f)
            # as in real time: the frame handled, and a score it started done, before the next
            await stage._idle.wait()
            if stage._audio_task is not None:
                await asyncio.wait({stage._audio_task})
        await p.put(EndFrame())
        await p.wait()
    return stage, out


def turn_with(text: str, silence_s: float) -> list[Frame]:
    frames: list[Frame] = [*silence(0.0, 0.9), SpeechStartFrame(t=1.0), *voiced(1.0, 1.0)]
    frames += [SpeechStopFrame(t=2.0), partial(text, until=2.05), *silence(2.0, silence_s)]
    return frames


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("请问我的话费余额还有多少？", "ask"),
        ("有推荐的吗", "ask"),
        ("上个月的账单一共是多少钱", "question"),
        ("Can I switch to a plan with more data", "question"),
        ("我家里的信号最近特别差。", "clause"),
        ("我想问一下那个", "open"),
        (None, "open"),
    ],
)
def test_text_classes(text: str | None, expected: str) -> None:
    assert text_class(text, None, TurnRules()) == expected


def test_words_and_voice_together_set_the_wait() -> None:
    r = TurnRules()
    assert r.fused_wait_ms("ask", "done") < r.fused_wait_ms("ask", "unsure")
    assert r.fused_wait_ms("ask", "unsure") < r.fused_wait_ms("ask", "more")
    # a voice that goes on waits past the longest pause inside a turn (1 s) unless the
    # words end on a question
    for text in ("sure", "complete", "clause", "open"):
        assert r.fused_wait_ms(text, "more") >= 1000.0
    # a finished-sounding voice never shortens a clause the words say goes on
    assert r.fused_wait_ms("clause", "done") >= r.clause_ms
    assert r.fused_wait_ms("question", None) < r.fused_wait_ms("question", "more")
    assert text_class("我家里的信号最近特别差。", 0.75, r) == "sure"
    assert text_class("我家里的信号最近特别差。", 0.65, r) == "complete"
    assert [voice_class(p, r) for p in (0.9, 0.5, 0.1)] == ["done", "unsure", "more"]


async def test_a_question_that_sounds_finished_ends_at_once() -> None:
    voice = FixedVoice(0.95)
    _, out = await run_fused(turn_with("请问我的话费余额还有多少？", 0.3), voice)
    ends = [f for f in out if isinstance(f, TurnEndFrame)]
    assert [e.rule for e in ends] == ["ask/done"] and ends[0].p_audio == pytest.approx(0.95)
    assert ends[0].decided_t - 2.0 < 0.2
    # it heard the turn from half a second before the speech started, not the whole call
    assert voice.heard and max(voice.heard) <= int((2.3 - 0.5) * RATE) + 512


async def test_a_question_whose_voice_goes_on_waits_longer() -> None:
    _, out = await run_fused(turn_with("上个月的账单一共是多少钱", 0.5), FixedVoice(0.05))
    assert [f.rule for f in out if isinstance(f, TurnEndFrame)] == ["end"]  # not in 0.5 s
    _, out = await run_fused(turn_with("上个月的账单一共是多少钱", 0.8), FixedVoice(0.05))
    assert [f.rule for f in out if isinstance(f, TurnEndFrame)] == ["question/more"]
    _, out = await run_fused(turn_with("上个月的账单一共是多少钱", 0.3), FixedVoice(0.95))
    assert [f.rule for f in out if isinstance(f, TurnEndFrame)] == ["question/done"]


async def test_a_clause_whose_voice_goes_on_outwaits_a_one_second_pause() -> None:
    _, out = await run_fused(turn_with("我家里的信号最近特别差。", 1.0), FixedVoice(0.05))
    assert [f.rule for f in out if isinstance(f, TurnEndFrame)] == ["end"]
    # a finished-sounding voice does not shorten it: the words alone wait 1.2 s
    _, out = await run_fused(turn_with("我家里的信号最近特别差。", 1.0), FixedVoice(0.9))
    assert [f.rule for f in out if isinstance(f, TurnEndFrame)] == ["end"]
    _, out = await run_fused(turn_with("我家里的信号最近特别差。", 1.4), FixedVoice(0.9))
    ends = [f for f in out if isinstance(f, TurnEndFrame)]
    assert [e.rule for e in ends] == ["clause/done"]
    assert 1.2 <= ends[0].decided_t - 2.0 < 1.4


def test_a_score_from_before_the_caller_resumed_does_not_count() -> None:
    stage = TurnStage(TurnRules(), audio_eot=FixedVoice(0.9))
    stage.in_turn, stage.turn, stage.quiet_since = True, 1, 3.0
    stage.p_audio = (1, 2.5, 0.9)  # scored at 2.5 s: the caller spoke again after it
    assert stage._voice() is None
    stage.p_audio = (1, 3.1, 0.9)
    assert stage._voice() == "done"
    stage.p_audio = (0, 3.1, 0.9)  # the previous turn's
    assert stage._voice() is None


@pytest.mark.parametrize("c", ["question", "clause", None])
@pytest.mark.parametrize("p_end", [None, 0.05, 0.65, 0.99])
def test_patient_rules_wait_the_clause_silence_whatever_the_words(
    c: str | None, p_end: float | None
) -> None:
    rules = TurnRules.patient()
    assert rules.wait_ms(c, p_end) == rules.clause_ms == 1200.0  # type: ignore[arg-type]
    # and with the voice fused in, no row answers sooner either
    assert min(min(row) for row in rules.fused.values()) >= rules.clause_ms


async def _question_pause_more(rules: TurnRules, pause_s: float) -> list[TurnEndFrame]:
    """ "Can I get a refund for last month?" | pause | "I was abroad the whole time." """
    stage = TurnStage(rules)
    out: list[Frame] = []
    first = TranscriptFrame(turn=1, text="Can I get a refund for last month?", lang="en", until=2.0)
    whole = TranscriptFrame(
        turn=1, text=first.text + " I was abroad the whole time.", lang="en", until=4.0 + pause_s
    )
    async with Pipeline([stage], sink=out.append) as p:
        await p.put(SpeechStartFrame(t=0.0))
        frames = [*voiced(0.0, 2.0), first, *silence(2.0, pause_s)]
        frames += [*voiced(2.0 + pause_s, 2.0), whole, *silence(4.0 + pause_s, 1.4)]
        for f in frames:
            await p.put(f)
            await stage._idle.wait()  # as in real time: no frame dropped by the audio policy
        await p.put(EndFrame())
        await p.wait()
    return [f for f in out if isinstance(f, TurnEndFrame)]


async def test_patient_rules_do_not_answer_a_complete_question_the_caller_goes_on_from() -> None:
    # the word rules end a complete question after 160 ms: inside this 0.9 s pause
    ends = await _question_pause_more(TurnRules(), pause_s=0.9)
    assert ends[0].rule == "question" and "abroad" not in ends[0].text
    assert ends[0].t == pytest.approx(2.0, abs=0.04) and ends[0].decided_t < 2.9
    ends = await _question_pause_more(TurnRules.patient(), pause_s=0.9)
    assert len(ends) == 1 and "abroad" in ends[0].text
    assert ends[0].t == pytest.approx(4.9, abs=0.04) and ends[0].decided_t - ends[0].t >= 1.2


def test_a_call_ends_its_turns_one_way() -> None:
    assert VoiceConfig().turn_rules() == TurnRules.for_model("lm+text")
    assert VoiceConfig(patient_turns=True).turn_rules() == TurnRules.patient()
    with pytest.raises(InvalidRequest, match="pick one"):
        VoiceConfig(patient_turns=True, learned_turns=True)
    # the bench refuses the pair before it loads a model
    result = CliRunner().invoke(bench_app, ["voice", "--patient-turns", "--learned-turns"])
    assert result.exit_code == 2 and "pick one" in result.output
