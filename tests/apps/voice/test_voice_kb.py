"""The agent answers from the knowledge base first: an entry's text for a simple ask, a
holding answer and the big model's follow-up (without repeats) for the rest; and the
evaluation of first answers on the shipped caller transcripts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rtgate.apps.voice.agent import (
    FOLLOWUP_AFTER_HOLD,
    KEEP_TURNS,
    NO_REPEAT,
    AgentStage,
    fresh_followup,
)
from rtgate.apps.voice.frames import (
    AgentTextFrame,
    EndFrame,
    Frame,
    InterruptionFrame,
    TranscriptFrame,
    TurnEndFrame,
)
from rtgate.apps.voice.kb_eval import (
    CALL_SETS,
    TUNED_ON,
    call_set,
    evaluate,
    load_calls,
    on_topic,
    run_sets,
    topic_ids,
    unknown_topics,
)
from rtgate.apps.voice.pipeline import Pipeline
from rtgate.core.budget import Budget
from rtgate.core.errors import ConfigError
from rtgate.core.latency import Prior
from rtgate.core.request import Piece, Request
from rtgate.domains.knowledge import shipped
from rtgate.gate import Gate
from rtgate.tiers.fake import FakeTier
from tests.apps.voice.voice_helpers import until


class Cloud(FakeTier):
    """A delegable tier that keeps the requests it was sent."""

    def __init__(self, pieces: list[str]) -> None:
        super().__init__("cloud", 90, pieces, delegable=True)
        self.requests: list[Request] = []

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        self.requests.append(request)
        async for piece in super().stream(request, budget):
            yield piece


async def _one_turn(text: str, lang: str, cloud: Cloud) -> tuple[AgentStage, list[Frame]]:
    down: list[Frame] = []
    async with Gate([cloud]) as deep:
        agent = AgentStage(Gate([]), Gate([]), deep)
        async with Pipeline([agent], sink=down.append) as p:
            await p.put(TranscriptFrame(turn=1, text=text, lang=lang, until=1.0, final=True))
            await until(lambda: agent._answer is not None and agent._answer.done())
            if agent._deep is not None:
                await asyncio.wait([agent._deep])
            await p.put(EndFrame())
            await p.wait()
    return agent, down


def _said(down: list[Frame], kind: str) -> list[str]:
    return [f.text for f in down if isinstance(f, AgentTextFrame) and f.kind == kind and f.text]


async def test_a_simple_ask_is_answered_with_the_entry_and_the_cloud_is_not_asked() -> None:
    cloud = Cloud(["Anything else."])
    agent, down = await _one_turn("How much data do I have left this month?", "en", cloud)
    entry = shipped().entry("data_left", "en")
    assert entry is not None
    assert " ".join(_said(down, "answer")) == entry.reply
    assert agent.routes[1] == "kb" and agent.verdicts[1]["intent"] == "data_left"
    assert cloud.calls == 0 and not _said(down, "followup")


async def test_a_multi_part_ask_is_held_and_followed_up_without_repeating() -> None:
    ask = "我这个月话费多扣了五十块，另外宽带也断网了，能不能派师傅来修？"
    new = "多扣的五十元我已经帮您提交核查，宽带报修单也已经派给师傅。"
    cloud = Cloud([new])
    agent, down = await _one_turn(ask, "zh", cloud)
    hold = "".join(_said(down, "answer"))  # in TTS-sized pieces
    assert agent.routes[1] == "kb-hold" and hold == agent.replies[1].text
    assert agent.replies[1].followup and cloud.calls == 1
    # the big model is given the first answer and asked not to repeat it
    msgs = [(m.role, m.content) for m in cloud.requests[0].messages]
    assert msgs[-2:] == [("assistant", hold), ("user", NO_REPEAT["zh"])]
    assert _said(down, "followup") == [FOLLOWUP_AFTER_HOLD["zh"] + new]
    assert agent.followups[1]["spoken"] and not agent.followups[1]["dropped_as_repeat"]


async def test_a_followup_that_only_repeats_the_first_answer_is_dropped() -> None:
    ask = "帮我订一张明天去上海的火车票"
    hold = shipped().holding_text("zh")
    cloud = Cloud([hold])  # the big model says again what was said
    agent, down = await _one_turn(ask, "zh", cloud)
    assert "".join(_said(down, "answer")) == hold and cloud.calls == 1
    assert agent.followups[1]["dropped_as_repeat"] and not agent.followups[1]["spoken"]
    assert not _said(down, "followup")


def test_fresh_followup_keeps_only_new_sentences() -> None:
    said = ["Please restart your router and wait two minutes."]
    text = "Please restart your router and wait two minutes. A technician can come tomorrow."
    assert fresh_followup(text, said, "en") == "A technician can come tomorrow."
    twice = "我帮您查到了。我帮您查到了。"
    assert fresh_followup(twice, [], "zh") == "我帮您查到了。"  # a sentence said twice, once
    assert fresh_followup(said[0], said, "en") == ""


def test_a_followup_sentence_that_loops_on_itself_is_not_spoken() -> None:
    # the local model behind the emulated cloud, on natural9 (session 27)
    looped = "谢谢，我今天去开通了宽带，但是我的宽带" + "卡" * 25
    assert fresh_followup(looped, [], "zh") == ""
    assert fresh_followup("我帮您查到了。" + looped, [], "zh") == "我帮您查到了。"
    words = "Your refund is on its way. " + "the bill the bill " * 4 + "the bill."
    assert fresh_followup(words, [], "en") == "Your refund is on its way."
    # a word said twice, a number with repeated digits or an ellipsis is not a loop
    fine = "Yes, yes, it is 100000 pounds..... and the 1111 code works."
    assert fresh_followup(fine, [], "en") == fine
    assert fresh_followup("请拨打13800000000。", [], "zh") == "请拨打13800000000。"


def test_without_a_knowledge_base_the_agent_works_as_before() -> None:
    agent = AgentStage(Gate([]), Gate([]), kb=None)
    assert agent.kb is None
    assert agent.wants_followup(1, "怎么退订套餐？", "zh")  # the policy words, as before


# -- evaluation ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["eval", "eval2", "eval3"])
def test_the_call_sets_load_and_are_disjoint(name: str) -> None:
    tuned = {c.text for name in TUNED_ON for c in load_calls(CALL_SETS[name])}
    held = load_calls(CALL_SETS[name])
    assert name not in TUNED_ON and "tune2" in TUNED_ON
    assert len(held) >= 150 and {c.lang for c in held} == {"zh", "en"}
    assert {c.kind for c in held} == {"simple", "multi", "ood"} and any(c.asr for c in held)
    assert not tuned & {c.text for c in held}
    corpus = (CALL_SETS[name].parent / "corpus.jsonl").read_text(encoding="utf-8")
    assert not any(f'"{c.text}"' in corpus for c in held)  # no held-out line was trained on


def test_a_calls_file_outside_the_package_is_evaluated_by_its_path(tmp_path: Path) -> None:
    """A blind set kept outside the package (eval/calls-eval4/) is read by its path."""
    path = tmp_path / "blind.jsonl"
    rows = ['{"text": "怎么退订这个包月会员", "lang": "zh", "kind": "simple", '
            '"topic": "cancel_subscription"}',
            '{"text": "what is the weather in Leeds tomorrow", "lang": "en", "kind": "ood", '
            '"topic": null}']  # fmt: skip
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    assert call_set("tune") == CALL_SETS["tune"] and call_set(str(path)) == path
    report = run_sets([str(path)])
    block = report[str(path)]["all"]
    assert block["n"] == 2 and block["simple"]["n"] == 1 and block["ood"]["n"] == 1
    assert block["ood"]["followed_up"] == 1.0  # the weather is held and followed up
    with pytest.raises(ConfigError, match="unknown call set"):
        call_set(str(tmp_path / "missing.jsonl"))


def test_a_malformed_call_is_refused_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    path.write_text('{"text": "hi", "lang": "en", "kind": "simple", "topic": "nope"}\n')
    with pytest.raises(ConfigError, match=":1:"):
        load_calls(path)


def test_on_the_tuning_calls_every_multi_part_and_ood_ask_is_followed_up() -> None:
    report = evaluate(shipped(), load_calls(CALL_SETS["tune"]))["all"]
    assert report["multi"]["followed_up"] == 1.0 and report["ood"]["followed_up"] == 1.0
    assert report["simple"]["wrong_entry"] == 0


def test_on_topic_is_the_shipped_knowledge_base_check() -> None:
    kb = shipped()
    entry = kb.entry("refund", "en")
    assert entry is not None
    assert on_topic(entry.reply, "refund", "en") and not on_topic(entry.reply, "roaming", "en")
    assert on_topic(kb.holding_text("en"), "ood", "en")


async def _cut_then_more(head: str, tail: str, *, head_final_first: bool) -> AgentStage:
    """Turn 1 ends at a pause (``head``), the caller goes on over the agent (a barge-in),
    and turn 2 (``tail``) ends; turn 1's final comes after the barge-in, or before it."""
    async with Gate([Cloud(["..."])]) as deep:
        agent = AgentStage(Gate([]), Gate([]), deep)
        async with Pipeline([agent], sink=lambda f: None) as p:
            await p.put(TurnEndFrame(turn=1, text=head, lang="en", t=1.0, decided_t=1.2,
                                     rule="question"))  # fmt: skip
            final = TranscriptFrame(turn=1, text=head, lang="en", until=1.2, final=True)
            if head_final_first:
                await p.put(final)
                await until(lambda: 1 in agent.replies)
            await p.put(InterruptionFrame(t=1.5))
            if not head_final_first:
                await p.put(final)
            await p.put(TurnEndFrame(turn=2, text=tail, lang="en", t=3.0, decided_t=3.2,
                                     rule="clause"))  # fmt: skip
            await p.put(TranscriptFrame(turn=2, text=tail, lang="en", until=3.2, final=True))
            await until(lambda: 2 in agent.replies)
            await p.put(EndFrame())
            await p.wait()
    return agent


async def test_a_turn_cut_before_its_answer_is_read_with_the_words_that_follow() -> None:
    head, tail = "I'm flying to Tokyo next Friday, will my phone work out there?", (
        "I mean for data, I don't really care about calls.")  # fmt: skip
    agent = await _cut_then_more(head, tail, head_final_first=False)
    assert 1 not in agent.replies  # talked over before its answer: not answered
    assert agent.replies[2].heard == f"{head} {tail}" and agent.joined == {2: 1}
    assert agent.verdicts[2]["joined_turn"] == 1 and agent.turn_text[2] == tail
    # turn 1 answered before the caller talked over it: the next turn is read alone
    agent = await _cut_then_more(head, tail, head_final_first=True)
    assert agent.replies[2].heard == tail and agent.joined == {}


def test_a_sets_own_labels_are_read_as_the_domains_ids() -> None:
    # natural5's author wrote "other" for asks outside the domain and split
    # suspension_reconnection in two: read raw, no answer could be on those turns
    kb = shipped()
    line = kb.entry("suspension_reconnection", "zh")
    assert line is not None
    for label in ("reconnection", "suspension"):
        assert topic_ids(label) == "suspension_reconnection" and on_topic(line.reply, label, "zh")
    plain = kb.holding_text("en")
    assert on_topic(plain, "other", "en") and on_topic(plain, None, "en")
    assert not on_topic(kb.holding_text("en", ["roaming"]), "other", "en")
    assert topic_ids(["refund", "reconnection"]) == ["refund", "suspension_reconnection"]
    assert unknown_topics("other") == [] and unknown_topics(["refund", "none"]) == []
    assert unknown_topics(["billing", "refund"]) == ["billing"]  # a label nobody mapped


async def _phrased(line: str) -> tuple[AgentStage, list[Frame]]:
    down: list[Frame] = []
    model = FakeTier("local", 50, [line])
    async with Gate([model], priors={"local": Prior(1.0, 1.0)}) as local:  # warm: in budget
        agent = AgentStage(Gate([]), local, phrase=True)
        async with Pipeline([agent], sink=down.append) as p:
            await p.put(TranscriptFrame(turn=1, text="What are your opening hours?", lang="en",
                                        until=1.0, final=True))  # fmt: skip
            await until(lambda: agent._answer is not None and agent._answer.done())
            await p.put(EndFrame())
            await p.wait()
    return agent, down


async def test_the_local_models_phrasing_is_spoken_only_when_it_keeps_the_entry() -> None:
    good = "Our stores are open 9 a.m. to 9 p.m. daily, weekends too."
    agent, down = await _phrased(good)
    assert agent.routes[1] == "kb-phrased" and " ".join(_said(down, "answer")) == good
    agent, down = await _phrased("The store is closed today.")  # not what the entry says
    entry = shipped().entry("store_hours", "en")
    assert entry is not None and agent.routes[1] == "kb"
    assert " ".join(_said(down, "answer")) == entry.reply
    assert agent.traces[1]["phrasing_ok"] is False


async def _long_call(turns: int, keep_turns: int = KEEP_TURNS) -> AgentStage:
    """``turns`` turns, each ended and answered from the knowledge base (with a follow-up
    for the multi-part ones), on one agent."""
    asks = ("What is your refund policy, and can I get my money back?",
            "How much data do I have left this month?")  # fmt: skip
    async with Gate([Cloud(["Refunds take five days."])]) as deep:
        agent = AgentStage(Gate([]), Gate([]), deep, keep_turns=keep_turns)
        async with Pipeline([agent], sink=lambda f: None) as p:
            for n in range(1, turns + 1):
                text, t = asks[n % 2], 2.0 * n
                await p.put(TurnEndFrame(turn=n, text=text, lang="en", t=t, decided_t=t + 0.2,
                                         rule="question"))  # fmt: skip
                await p.put(TranscriptFrame(turn=n, text=text, lang="en", until=t, final=True))
                await until(lambda n=n: n in agent.replies)  # type: ignore[misc]
                await until(lambda: agent._answer is not None and agent._answer.done())
            if agent._deep is not None:
                await asyncio.wait([agent._deep])
            await p.put(EndFrame())
            await p.wait()
    return agent


async def test_a_long_call_keeps_the_latest_turns_records_only() -> None:
    agent = await _long_call(7, keep_turns=3)
    # at turn 7's end, turns 5-7 are the latest three: 1-4 are forgotten everywhere
    for record in (agent.replies, agent.turn_text, agent.said, agent.routes, agent.verdicts):
        assert sorted(record) == [5, 6, 7]
    assert set(agent.followups) <= {5, 6, 7} and agent.interrupted <= {5, 6, 7}
    assert agent._deeps == {}  # every follow-up job finished and left its table
    # the default keeps 64: a call of 70 turns holds turns 7-70
    agent = await _long_call(70)
    assert sorted(agent.turn_text) == list(range(7, 71)) and len(agent.said) == 64


@pytest.mark.parametrize("label", ["ood", "other", "none"])
def test_a_writers_label_for_outside_the_domain_reads_as_no_topic(
    tmp_path: Path, label: str
) -> None:
    path = tmp_path / "calls.jsonl"
    path.write_text(
        f'{{"text": "will it rain", "lang": "en", "kind": "ood", "topic": "{label}"}}\n'
    )
    (call,) = load_calls(path)
    assert call.topics == () and call.topic is None
    simple = f'{{"text": "top up", "lang": "en", "kind": "simple", "topic": "{label}"}}\n'
    path.write_text(simple)
    with pytest.raises(ConfigError, match=":1:"):
        load_calls(path)  # a simple ask still needs one of the domain's topics


def test_the_point_picks_the_readers_bar_that_follows_up_what_only_it_catches() -> None:
    from rtgate.apps.voice.kb_eval import Call, _pick, _Row

    def row(kind: str, topics: tuple[str, ...], p_out: float, right: bool) -> _Row:
        # every row passes the classifier, the clauses and the judge at any threshold
        return _Row(Call("x", "en", kind, topics), topics[0] if topics else "refund", 0.95,
                    [], [], right, p_out)  # fmt: skip

    rows = [row("simple", ("refund",), 0.2, True), row("simple", ("roaming",), 0.3, True),
            row("multi", ("refund", "roaming"), 0.7, False),
            row("ood", (), 0.9, False)]  # fmt: skip
    sure = [0.99] * len(rows)
    without = _pick(rows, sure)
    assert without["followed_up"] == 0.0 and without["bar"] == 1.01
    chosen = _pick(rows, sure, bars=(0.1, 0.25, 0.5, 0.8, 1.01))
    assert chosen["followed_up"] == 1.0 and chosen["bar"] == 0.5 and chosen["right"] == 2
