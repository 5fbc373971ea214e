"""A judge that does not trust a fast answer: the gate delegates anyway, by policy."""

from __future__ import annotations

from dataclasses import dataclass, field

from rtgate.core.latency import Prior
from rtgate.core.request import Piece, Request
from rtgate.gate import DoneEvent, FollowupEvent, Gate, GateConfig, TokenEvent
from rtgate.gate.inprocess_queue import InProcessQueue
from rtgate.tiers.answerability import Verdict
from rtgate.tiers.fake import FakeTier


@dataclass
class ByWord:
    """Trusts an answer unless the ask holds ``word``; records what it was shown."""

    word: str = "and"
    threshold: float = 0.5
    seen: list[tuple[str, Piece | None]] = field(default_factory=list)

    def judge(self, request: Request, piece: Piece | None) -> Verdict:
        self.seen.append((request.input, piece))
        p = 0.1 if self.word in request.input.split() else 0.9
        return Verdict(p, self.threshold, ("2 clauses",) if p < 0.5 else ())


def lineup(fast_pieces: list[str | Piece] | None = None) -> list[FakeTier]:
    # the fast tier outranks the cloud, as in the autocomplete: without a judge, its answer
    # is final and the cloud never hears of the ask
    fast = FakeTier("template", 40, fast_pieces or [Piece("canned", {"confidence": 0.8})])
    cloud = FakeTier("cloud", 10, ["deep"], delegable=True)
    return [fast, cloud]


PRIORS = {"cloud": Prior(1800, 1800), "template": Prior(1, 1)}


async def test_without_a_judge_a_fast_answer_outranking_the_cloud_is_final() -> None:
    async with Gate(lineup(), priors=PRIORS, queue=InProcessQueue()) as g:
        res = await g.answer(Request("bill and installments"), 100)
    assert res.route == "template" and res.job_id is None
    assert res.trace.confidence is None and not res.trace.partial


async def test_a_distrusted_fast_answer_is_marked_partial_and_the_cloud_is_asked() -> None:
    judge = ByWord()
    async with Gate(lineup(), priors=PRIORS, queue=InProcessQueue(), judge=judge) as g:
        assert g.judge is judge
        res = await g.answer(Request("bill and installments"), 100)
        assert res.route == "template" and res.text == "canned"
        assert res.trace.partial and res.trace.confidence == 0.1
        assert res.trace.abstained is not None and "2 clauses" in res.trace.abstained
        assert res.trace.degraded == res.trace.abstained  # the trace says why
        assert res.job_id is not None and res.trace.delegated_to == "cloud"
        job = await g.wait_job(res.job_id)
        assert job.status == "done" and job.text == "deep"
        # the judge saw the fast tier's first piece, with the confidence it claimed
        (text, piece), *_ = judge.seen
        assert text == "bill and installments" and piece is not None
        assert piece.data == {"confidence": 0.8}
        counts = g.metrics.attempt_outcomes
        assert counts[("template", "abstained")] == 1


async def test_a_trusted_fast_answer_stands_alone() -> None:
    async with Gate(lineup(), priors=PRIORS, queue=InProcessQueue(), judge=ByWord()) as g:
        res = await g.answer(Request("my bill"), 100)
    assert res.route == "template" and res.job_id is None
    assert res.trace.confidence == 0.9 and not res.trace.partial
    assert res.trace.abstained is None


async def test_the_placeholder_policy_replaces_the_fast_answer() -> None:
    config = GateConfig(on_abstain="placeholder", placeholder="one moment")
    g = Gate(lineup(), priors=PRIORS, queue=InProcessQueue(), judge=ByWord(), config=config)
    async with g:
        events = [ev async for ev in g.stream(Request("bill and fee"), 100, follow=True)]
    assert not any(isinstance(ev, TokenEvent) for ev in events)  # nothing of "canned" shown
    done = next(ev for ev in events if isinstance(ev, DoneEvent))
    assert done.result.route == "silent" and done.result.text == "one moment"
    assert done.result.job_id is not None and not done.result.trace.partial
    assert done.result.trace.attempts[0].detail == "not trusted alone"
    follow = next(ev for ev in events if isinstance(ev, FollowupEvent))
    assert follow.job.text == "deep"


async def test_abstain_below_overrides_the_judges_threshold() -> None:
    config = GateConfig(abstain_below=0.95)  # even a 0.9 answer is not trusted now
    g = Gate(lineup(), priors=PRIORS, queue=InProcessQueue(), judge=ByWord(), config=config)
    async with g:
        res = await g.answer(Request("my bill"), 100)
    assert res.trace.partial and res.job_id is not None
    assert res.trace.abstained is not None and "0.95" in res.trace.abstained


async def test_a_request_that_wants_no_big_model_is_not_judged() -> None:
    judge = ByWord()
    async with Gate(lineup(), priors=PRIORS, queue=InProcessQueue(), judge=judge) as g:
        res = await g.answer(Request("bill and fee", delegate=False), 100)
    assert judge.seen == [] and res.job_id is None and not res.trace.partial


async def test_the_big_models_own_answer_served_again_is_not_judged() -> None:
    judge = ByWord()
    deep = Piece("from the cloud earlier", {"deep": True})
    async with Gate(lineup([deep]), priors=PRIORS, queue=InProcessQueue(), judge=judge) as g:
        res = await g.answer(Request("bill and fee"), 100)
    assert judge.seen == [] and res.job_id is None and not res.trace.partial


async def test_the_trace_dict_carries_the_verdict() -> None:
    async with Gate(lineup(), priors=PRIORS, queue=InProcessQueue(), judge=ByWord()) as g:
        res = await g.answer(Request("bill and fee"), 100)
    d = res.trace.to_dict()
    assert d["partial"] is True and d["confidence"] == 0.1
    assert d["abstained"].startswith("template not trusted alone (p=0.10 < 0.50")


async def test_a_trusted_fast_answer_is_final_even_below_a_skipped_better_tier() -> None:
    # the cloud outranks the fast tier (as on the server): without a judge every fast
    # answer is followed by a job; a judge that trusts it saves the big model the work
    fast = FakeTier("template", 10, [Piece("canned", {"confidence": 0.8})])
    cloud = FakeTier("cloud", 80, ["deep"], delegable=True)
    async with Gate([fast, cloud], priors=PRIORS, queue=InProcessQueue()) as g:
        assert (await g.answer(Request("my bill"), 100)).job_id is not None
    async with Gate([fast, cloud], priors=PRIORS, queue=InProcessQueue(), judge=ByWord()) as g:
        trusted = await g.answer(Request("my bill"), 100)
        distrusted = await g.answer(Request("bill and fee"), 100)
    assert trusted.job_id is None and distrusted.job_id is not None
