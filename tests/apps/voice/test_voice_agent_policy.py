"""The agent's policies: which turns the big model follows up, and acks said whole."""

from __future__ import annotations

from rtgate.apps.voice.agent import AgentStage
from rtgate.core.request import Piece, Request
from rtgate.domains.loader import GENERIC_JUDGE, load_generic_judge
from rtgate.gate import Gate
from rtgate.tiers.answerability import Verdict


class Parts:
    """Distrusts a turn with two or more question marks."""

    threshold = 0.5

    def judge(self, request: Request, piece: Piece | None) -> Verdict:
        n = request.input.count("？") + request.input.count("?")
        return Verdict(0.2 if n >= 2 else 0.9, self.threshold, (f"{n} questions",))


def test_a_turn_the_judge_distrusts_is_followed_up_and_recorded() -> None:
    agent = AgentStage(Gate([]), Gate([]), judge=Parts())
    assert agent.wants_followup(1, "话费多少？流量还剩多少？", "zh")
    assert not agent.wants_followup(2, "请问我的话费余额还有多少？", "zh")
    assert agent.verdicts[1]["p_right"] == 0.2 and "2 questions" in agent.verdicts[1]["why"]
    assert agent.verdicts[2]["policy_words"] is False
    # refunds and policies go to the big model whatever the judge says
    assert agent.wants_followup(3, "What is your refund policy?", "en")
    assert agent.verdicts[3]["policy_words"] is True


def test_without_a_judge_the_policy_words_decide() -> None:
    agent = AgentStage(Gate([]), Gate([]))
    assert not agent.wants_followup(1, "话费多少？流量还剩多少？", "zh")
    assert agent.wants_followup(2, "怎么退订套餐？", "zh") and agent.verdicts == {}


def test_the_shipped_domain_free_judge_tells_a_multi_part_ask_from_a_simple_one() -> None:
    assert GENERIC_JUDGE.exists()
    judge = load_generic_judge()
    multi = "我想改套餐，如果下个月换成大流量的，这个月没用完的流量还能用吗？月租怎么算？"
    simple = "我的话费余额还有多少"
    p_multi = judge.judge(Request(multi), None)
    p_simple = judge.judge(Request(simple), None)
    assert not p_multi.answerable and p_simple.answerable
    agent = AgentStage(Gate([]), Gate([]), judge=judge)
    assert agent.wants_followup(1, multi, "zh") and not agent.wants_followup(2, simple, "zh")


def test_an_acknowledgement_is_a_whole_phrase_or_nothing() -> None:
    from rtgate.apps.voice.agent import whole_phrase

    assert whole_phrase("好的，我帮您查一下。") == "好的，我帮您查一下。"
    assert whole_phrase("Sure, let me check.") == "Sure, let me check."
    # a local model's ack cut by its budget mid-word: only what is whole is kept
    assert whole_phrase("I'm sorry, I don'") == "I'm sorry."
    assert whole_phrase("Yes. I'm sorry, I") == "Yes."
    assert whole_phrase("好的，我帮您") == "好的。"
    assert whole_phrase("I'm") is None and whole_phrase("Yes, I") is None
    assert whole_phrase("好") is None
