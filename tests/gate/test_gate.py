"""The gate's policy on virtual loop time: choice, cut-off, fallback, delegation, hedging."""

from __future__ import annotations

import asyncio

import pytest

from rtgate.core.latency import Prior
from rtgate.core.request import Piece, Request
from rtgate.gate import DoneEvent, FollowupEvent, Gate, GateConfig, TokenEvent
from rtgate.gate.inprocess_queue import InProcessQueue
from rtgate.tiers.fake import FakeTier

pytestmark = pytest.mark.looptime


def priors(**p99: float) -> dict[str, Prior]:
    return {name: Prior(ms, ms) for name, ms in p99.items()}


def chain(
    cloud: FakeTier | None = None, local: FakeTier | None = None, template: FakeTier | None = None
) -> list[FakeTier]:
    return [
        cloud or FakeTier("cloud", 80, ["deep"], ttft_ms=600, delegable=True),
        local or FakeTier("local", 50, ["quick"], ttft_ms=60),
        template or FakeTier("template", 10, ["canned"], ttft_ms=1),
    ]


async def test_picks_best_tier_whose_p99_fits() -> None:
    gate = Gate(chain(), priors=priors(cloud=1800, local=110, template=4))
    assert gate.choose(2000).name == "cloud"  # type: ignore[union-attr]
    assert gate.choose(150).name == "local"  # type: ignore[union-attr]
    assert gate.choose(20).name == "template"  # type: ignore[union-attr]
    assert gate.choose(2) is None


async def test_hanging_best_tier_is_cut_off_and_budget_holds() -> None:
    cloud = FakeTier("cloud", 80, hang=True, delegable=True)
    local = FakeTier("local", 50, ["quick"], ttft_ms=60)
    async with Gate(chain(cloud, local), priors=priors(cloud=250, local=110, template=4)) as gate:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        res = await gate.answer(Request("hi", delegate=False), budget_ms=400)
        elapsed = (loop.time() - t0) * 1000
    assert res.route == "local"
    assert res.text == "quick"
    assert elapsed <= 400
    outcomes = {a.tier: a.outcome for a in res.trace.attempts}
    assert outcomes == {"cloud": "cut_off", "local": "answered"}
    # the cut-off kept the local tier's p99 in reserve
    cloud_att = res.trace.attempts[0]
    assert cloud_att.ended_ms is not None and cloud_att.ended_ms <= 400 - 110
    await asyncio.sleep(0)  # let the abandoned stream close in the background
    assert cloud.cancelled == 1


async def test_every_tier_hanging_still_answers_silently_in_budget() -> None:
    tiers = [FakeTier(n, q, hang=True) for n, q in (("cloud", 80), ("local", 50), ("tpl", 10))]
    cfg = GateConfig(placeholder="正在为你生成建议…")
    async with Gate(tiers, config=cfg, priors=priors(cloud=100, local=50, tpl=5)) as gate:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        res = await gate.answer(Request("x"), budget_ms=150)
        assert (loop.time() - t0) * 1000 <= 150
    assert res.route == "silent" and res.placeholder
    assert res.text == "正在为你生成建议…"
    assert res.trace.degraded == "no tier answered in budget"
    # cloud keeps only the template's p99 in reserve (cloud + local p99 > budget), so the
    # local tier no longer fits once cloud is cut off (nor as a last resort: its p99 is far
    # beyond the few ms left)
    assert [a.outcome for a in res.trace.attempts] == ["cut_off", "skipped", "cut_off"]


async def test_slow_tier_is_skipped_and_delegated_answer_follows_on_same_stream() -> None:
    async with Gate(chain(), priors=priors(cloud=1800, local=110, template=4)) as gate:
        events = [ev async for ev in gate.stream(Request("复杂问题"), 300, follow=True)]
    kinds = [type(e) for e in events]
    assert kinds == [TokenEvent, DoneEvent, FollowupEvent]
    done = events[1]
    assert isinstance(done, DoneEvent)
    assert done.result.route == "local"
    assert done.result.job_id is not None
    assert done.result.trace.delegated_to == "cloud"
    assert done.result.trace.attempts[0].outcome == "skipped"
    follow = events[2]
    assert isinstance(follow, FollowupEvent)
    assert follow.job.status == "done" and follow.job.text == "deep"
    assert follow.job.id == done.result.job_id


async def test_job_is_retrievable_by_id_and_latency_learned_from_background() -> None:
    async with Gate(chain(), priors=priors(cloud=1800, local=110, template=4)) as gate:
        res = await gate.answer(Request("q"), 300)
        assert res.job_id is not None
        assert gate.jobs.get(res.job_id).status in ("queued", "running")
        job = await gate.wait_job(res.job_id)
        assert job.status == "done" and job.text == "deep"
        assert job.ttft_ms == pytest.approx(600, abs=1)
        # the observation replaced the prior: cloud's p99 is now ~600 ms
        assert gate.models["cloud"].predict_total() == pytest.approx(600, rel=0.03)


async def test_no_delegation_when_request_says_no_or_answer_is_better() -> None:
    async with Gate(chain(), priors=priors(cloud=1800, local=110, template=4)) as gate:
        res = await gate.answer(Request("q", delegate=False), 300)
        assert res.job_id is None
        res = await gate.answer(Request("q"), 3000)
        assert res.route == "cloud" and res.job_id is None


async def test_fallback_chain_error_then_decline_then_template() -> None:
    cloud = FakeTier("cloud", 80, fail_at=0)
    local = FakeTier("local", 50, decline=True, ttft_ms=5)
    async with Gate(chain(cloud, local), priors=priors(cloud=100, local=50, template=4)) as gate:
        res = await gate.answer(Request("q"), 500)
    assert res.route == "template" and res.text == "canned"
    assert [a.outcome for a in res.trace.attempts] == ["error", "declined", "answered"]
    assert "RuntimeError" in res.trace.attempts[0].detail
    assert res.trace.degraded == "fell back past cloud, local"


async def test_cold_tier_without_prior_is_treated_as_slow() -> None:
    tiers = chain()
    async with Gate(tiers, priors=priors(local=110, template=4)) as gate:
        assert gate.models["cloud"].cold
        res = await gate.answer(Request("q", delegate=False), 5000)
        assert res.route == "local"
        await gate.warmup(Request("probe"))
        assert gate.warm and not gate.models["cloud"].cold
        res = await gate.answer(Request("q"), 5000)
        assert res.route == "cloud"


async def test_learns_that_a_tier_got_slower() -> None:
    cloud = FakeTier("cloud", 80, ["deep"], ttft_ms=200)
    async with Gate(chain(cloud), priors=priors(cloud=250, local=110, template=4)) as gate:
        for _ in range(5):
            res = await gate.answer(Request("q", delegate=False), 1000)
            assert res.route == "cloud"
        cloud.ttft_ms = 5000
        results = [await gate.answer(Request("q", delegate=False), 1000) for _ in range(4)]
    # one cut-off is enough: it is recorded pessimistically, cloud predicts itself out
    assert results[0].trace.attempts[0].outcome == "cut_off"
    assert results[0].route != "cloud"
    assert [r.route for r in results[1:]] == ["local"] * 3
    assert all(r.trace.attempts[0].outcome == "skipped" for r in results[1:])


async def test_streaming_scope_bounds_first_piece_not_the_rest() -> None:
    local = FakeTier("local", 50, ["a", "b", "c", "d"], ttft_ms=40, tpot_ms=50)
    async with Gate([local], priors=priors(local=60)) as gate:
        events = [ev async for ev in gate.stream(Request("q"), 100)]
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    assert "".join(t.text for t in tokens) == "abcd"
    assert tokens[0].t_ms == pytest.approx(40, abs=1)
    assert tokens[-1].t_ms == pytest.approx(190, abs=1)
    done = events[-1]
    assert isinstance(done, DoneEvent)
    stats = gate.metrics.routes["local"]
    assert stats.deadline_misses == 0 and stats.met_slo == 1


async def test_complete_scope_falls_back_when_answer_cannot_finish() -> None:
    local = FakeTier("local", 50, ["a", "b", "c", "d"], ttft_ms=20, tpot_ms=50)
    async with Gate(chain(local=local), priors=priors(cloud=2000, local=60, template=4)) as gate:
        res = await gate.answer(Request("q", delegate=False), 100)
    assert res.route == "template"
    assert [a.outcome for a in res.trace.attempts] == ["skipped", "too_slow", "answered"]
    assert res.trace.elapsed_ms <= 100


async def test_metrics_follow_vllm_definitions() -> None:
    local = FakeTier("local", 50, ["a", "b", "c", "d", "e"], ttft_ms=100, tpot_ms=10)
    async with Gate([local], priors=priors(local=200)) as gate:
        await gate.answer(Request("q"), 1000)
    snap = gate.metrics.snapshot()
    r = snap["routes"]["local"]
    assert r["ttft_ms"]["p50"] == pytest.approx(100, rel=0.01)
    assert r["tpot_ms"]["p50"] == pytest.approx(10, rel=0.01)  # (140 - 100) / (5 - 1)
    assert r["e2e_ms"]["p50"] == pytest.approx(140, rel=0.01)
    assert r["itl_ms"]["count"] == 4
    assert snap["share"] == {"local": 1.0}
    assert snap["deadline_misses"] == 0


async def test_deadline_misses_counted_when_budget_is_too_small_for_anything() -> None:
    tier = FakeTier("only", 10, ["x"], ttft_ms=1)
    async with Gate([tier], priors=priors(only=1)) as gate:
        res = await gate.answer(Request("q"), 1.5)
    # 1 ms safety leaves 0.5 ms: the tier is skipped, the answer is silent and on time
    assert res.route == "silent"
    assert gate.metrics.snapshot()["deadline_misses"] == 0


async def test_full_delegation_queue_refuses_and_says_so() -> None:
    cloud = FakeTier("cloud", 80, ["deep"], ttft_ms=10_000, delegable=True)
    queue = InProcessQueue(maxsize=1, workers=1)
    async with Gate(
        chain(cloud), queue=queue, priors=priors(cloud=20_000, local=110, template=4)
    ) as gate:
        first = await gate.answer(Request("a"), 300)  # taken by the worker
        await asyncio.sleep(0)
        second = await gate.answer(Request("b"), 300)  # waits in the queue
        third = await gate.answer(Request("c"), 300)  # refused
    assert first.job_id and second.job_id
    assert third.job_id is None
    assert third.route == "local"
    assert third.trace.degraded is not None and "queue full" in third.trace.degraded


async def test_hedging_starts_the_next_tier_after_p90_and_takes_the_first_answer() -> None:
    cloud = FakeTier("cloud", 80, ["deep"], ttft_ms=100)
    local = FakeTier("local", 50, ["quick"], ttft_ms=30)
    cfg = GateConfig(hedge=True, max_hedge_rate=0.5)
    async with Gate([cloud, local], config=cfg, priors=priors(cloud=400, local=60)) as gate:
        for _ in range(20):  # learn cloud: p90 ~100 ms
            await gate.answer(Request("q"), 1000)
        cloud.ttft_ms = 300  # now it is late
        events = [ev async for ev in gate.stream(Request("q", delegate=False), 1000)]
    done = events[-1]
    assert isinstance(done, DoneEvent)
    res = done.result
    assert res.trace.hedged
    assert res.route == "local"
    outcomes = {a.tier: a.outcome for a in res.trace.attempts}
    assert outcomes == {"cloud": "hedge_lost", "local": "answered"}
    # local started at cloud's p90 (~100 ms) and answered 30 ms later
    assert res.trace.ttft_ms == pytest.approx(130, abs=5)


async def test_hedge_rate_is_capped() -> None:
    cloud = FakeTier("cloud", 80, ["deep"], ttft_ms=100)
    local = FakeTier("local", 50, ["quick"], ttft_ms=30)
    cfg = GateConfig(hedge=True, max_hedge_rate=0.05)
    async with Gate([cloud, local], config=cfg, priors=priors(cloud=400, local=60)) as gate:
        for _ in range(20):
            await gate.answer(Request("q"), 1000)
        cloud.ttft_ms = 300
        hedged = 0
        for _ in range(30):
            async for ev in gate.stream(Request("q", delegate=False), 1000):
                if isinstance(ev, DoneEvent) and ev.result.trace.hedged:
                    hedged += 1
    assert 1 <= hedged <= 6  # ~5% of the requests once the cap is reached


async def test_pieces_keep_structured_data_and_trace_serialises() -> None:
    tpl = FakeTier("template", 10, [Piece("我想把积分兑换成话费", {"intent": "points_exchange"})])
    async with Gate([tpl], priors=priors(template=1)) as gate:
        res = await gate.answer(Request("我想把"), 150)
    assert res.data == [{"intent": "points_exchange"}]
    d = res.to_dict()
    assert d["route"] == "template" and d["trace"]["attempts"][0]["outcome"] == "answered"


async def test_client_that_stops_reading_cancels_the_tier() -> None:
    local = FakeTier("local", 50, ["a", "b", "c"], ttft_ms=10, tpot_ms=1000)
    async with Gate([local], priors=priors(local=20)) as gate:
        agen = gate.stream(Request("q"), 100)
        first = await anext(agen)
        assert isinstance(first, TokenEvent) and first.text == "a"
        await agen.aclose()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
    assert local.cancelled == 1 and local.completed == 0


async def test_skipped_tier_is_probed_in_background_and_recovers() -> None:
    local = FakeTier("local", 50, ["quick"], ttft_ms=50)
    cfg = GateConfig(probe_interval_ms=5000)
    pri = priors(cloud=5000, local=500, template=4)
    async with Gate(chain(local=local), config=cfg, priors=pri) as gate:
        res = await gate.answer(Request("q", delegate=False), 100)
        assert res.route == "template"  # local's prior (500 ms) is too pessimistic
        await asyncio.sleep(1)  # never measured: probed at once, in the background (50 ms)
        assert local.calls == 1
        assert gate.models["local"].predict_ttft() == pytest.approx(50, rel=0.03)
        res = await gate.answer(Request("q", delegate=False), 100)
    assert res.route == "local"


async def test_probes_of_a_slow_tier_are_rate_limited() -> None:
    local = FakeTier("local", 50, ["quick"], ttft_ms=400)
    cfg = GateConfig(probe_interval_ms=5000)
    async with Gate(chain(local=local), config=cfg, priors=priors(cloud=5000, template=4)) as gate:
        for _ in range(20):
            await gate.answer(Request("q", delegate=False), 100)
            await asyncio.sleep(0.5)  # 10 s of traffic
    # the first skip probes at once, then at most one probe per 5 s: 3 in 10 s
    assert 2 <= local.calls <= 3


async def test_cancel_a_running_delegated_job() -> None:
    cloud = FakeTier("cloud", 80, ["deep"], ttft_ms=10_000, delegable=True)
    async with Gate(chain(cloud), priors=priors(cloud=20_000, local=110, template=4)) as gate:
        res = await gate.answer(Request("q"), 300)
        assert res.job_id is not None
        await asyncio.sleep(1)
        assert gate.jobs.get(res.job_id).status == "running"
        assert gate.cancel_job(res.job_id)
        job = await gate.wait_job(res.job_id)
        assert job.status == "cancelled"
        assert not gate.cancel_job(res.job_id)
        await asyncio.sleep(0)
        assert cloud.cancelled == 1
        # the worker survived: the next job still runs
        cloud.ttft_ms = 10
        res2 = await gate.answer(Request("q2"), 300)
        assert res2.job_id is not None
        assert (await gate.wait_job(res2.job_id)).status == "done"


async def test_cancel_a_queued_delegated_job() -> None:
    cloud = FakeTier("cloud", 80, ["deep"], ttft_ms=1000, delegable=True)
    queue = InProcessQueue(maxsize=4, workers=1)
    pri = priors(cloud=20_000, local=110, template=4)
    async with Gate(chain(cloud), queue=queue, priors=pri) as gate:
        a = await gate.answer(Request("a"), 300)
        b = await gate.answer(Request("b"), 300)
        assert a.job_id and b.job_id
        assert gate.cancel_job(b.job_id)
        assert (await gate.wait_job(b.job_id)).status == "cancelled"
        assert (await gate.wait_job(a.job_id)).status == "done"
        await asyncio.sleep(2)
    assert cloud.calls == 1  # b never ran


async def test_first_token_scope_lets_the_tier_finish_past_the_budget() -> None:
    seen: list[float] = []

    class Watcher(FakeTier):
        async def stream(self, request, budget):  # type: ignore[no-untyped-def]
            seen.append(budget.left_ms())
            async for p in super().stream(request, budget):
                yield p

    tier = Watcher("local", 50, ["a", "b"], ttft_ms=10)
    cfg = GateConfig(stream_max_ms=5000)
    async with Gate([tier], config=cfg, priors=priors(local=20)) as gate:
        [ev async for ev in gate.stream(Request("q"), 100)]
        await gate.answer(Request("q"), 100)
    assert seen[0] == pytest.approx(5100, abs=1)  # streaming: budget + stream_max_ms
    assert seen[1] == pytest.approx(100, abs=1)  # whole answer bounded: the budget itself


async def test_stream_is_capped_by_stream_max_ms() -> None:
    tier = FakeTier("local", 50, ["a"] * 100, ttft_ms=10, tpot_ms=100)
    cfg = GateConfig(stream_max_ms=1000)
    async with Gate([tier], config=cfg, priors=priors(local=20)) as gate:
        events = [ev async for ev in gate.stream(Request("q"), 100)]
    done = events[-1]
    assert isinstance(done, DoneEvent)
    assert len(done.result.text) < 100
    assert done.result.trace.degraded == "local ran out of stream time"


async def test_warmup_records_only_the_last_round() -> None:

    class ColdFirst(FakeTier):
        async def stream(self, request, budget):  # type: ignore[no-untyped-def]
            self.ttft_ms = 300 if self.calls == 0 else 30
            async for p in super().stream(request, budget):
                yield p

    tier = ColdFirst("local", 50, ["a"])
    async with Gate([tier]) as gate:
        await gate.warmup(rounds=2)
    assert gate.models["local"].predict_ttft() == pytest.approx(30, rel=0.03)


class SlowToCancel(FakeTier):
    """Hangs, and takes ``cleanup_ms`` to unwind when cancelled (closing a connection)."""

    cleanup_ms = 100.0

    async def stream(self, request, budget):  # type: ignore[no-untyped-def]
        try:
            await asyncio.Event().wait()
            yield "never"
        finally:
            await asyncio.sleep(self.cleanup_ms / 1000)


async def test_a_tier_slow_to_cancel_does_not_delay_the_fallback() -> None:
    slow = SlowToCancel("cloud", 80)
    local = FakeTier("local", 50, ["quick"], ttft_ms=40)
    async with Gate([slow, local], priors=priors(cloud=150, local=60)) as gate:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        res = await gate.answer(Request("q", delegate=False), 300)
        elapsed = (loop.time() - t0) * 1000
    assert res.route == "local"
    # cut at 300 - 60 - 2*2 = 236 ms; local answers 40 ms later, not 100 ms of cleanup later
    assert elapsed == pytest.approx(276, abs=2)


async def test_reserved_tier_still_runs_when_the_cut_off_overran() -> None:
    class Overrun(FakeTier):
        async def stream(self, request, budget):  # type: ignore[no-untyped-def]
            try:
                await asyncio.Event().wait()
                yield "never"
            except asyncio.CancelledError:
                await asyncio.sleep(0.03)  # 30 ms to unwind, inside the caller's await
                raise

    # predicted below inline_ms: awaited in place, so the overrun lands on the request
    cfg = GateConfig(inline_ms=1000)
    over = Overrun("cloud", 80)
    local = FakeTier("local", 50, ["quick"], ttft_ms=10)
    async with Gate([over, local], config=cfg, priors=priors(cloud=150, local=60)) as gate:
        res = await gate.answer(Request("q", delegate=False), 300)
    assert [a.outcome for a in res.trace.attempts] == ["cut_off", "answered"]
    assert res.route == "local" and res.trace.elapsed_ms <= 300


async def test_a_stale_outlier_does_not_silence_a_fast_tier() -> None:
    template = FakeTier("template", 10, ["canned"], ttft_ms=0.2)
    async with Gate([template], priors=priors(template=1)) as gate:
        gate.models["template"].observe(67.0, 67.0)  # one stall, now its p99
        res = await gate.answer(Request("q"), 50)
    assert res.route == "template"
    assert [a.outcome for a in res.trace.attempts] == ["skipped", "answered"]
    assert res.trace.attempts[-1].detail == "last resort"


async def test_last_resort_never_spends_the_budget_on_a_slow_or_delegable_tier() -> None:
    cloud = FakeTier("cloud", 80, ["deep"], ttft_ms=600, delegable=True)
    local = FakeTier("local", 50, ["quick"], ttft_ms=60)
    async with Gate([cloud, local], priors=priors(cloud=1800, local=1000)) as gate:
        res = await gate.answer(Request("q", delegate=False), 150)
    # cloud is delegable, local's p99 (1000) is beyond 4x the 148 ms left: silent at once
    assert res.route == "silent"
    assert [a.outcome for a in res.trace.attempts] == ["skipped", "skipped"]
    assert res.trace.elapsed_ms < 5


async def test_warmup_survives_a_broken_tier_and_reports_it() -> None:
    class Broken(FakeTier):
        async def warmup(self) -> None:
            raise ConnectionError("unreachable")

    broken = Broken("cloud", 80)
    failing = FakeTier("local", 50, fail_at=0)
    ok = FakeTier("template", 10, ["a"], ttft_ms=1)
    async with Gate([broken, failing, ok]) as gate:
        await gate.warmup()
    assert gate.warmup_status["cloud"].startswith("warmup failed: ConnectionError")
    assert gate.warmup_status["local"].startswith("RuntimeError")
    assert gate.warmup_status["template"] == "ok"
    assert not gate.models["template"].cold and gate.models["cloud"].cold
    assert gate.snapshot()["warmup"]["template"] == "ok"


def test_duplicate_names_are_refused() -> None:
    with pytest.raises(ValueError, match="unique"):
        Gate([FakeTier("a", 1), FakeTier("a", 2)])
    with pytest.raises(ValueError, match="silent"):
        Gate([FakeTier("silent", 1)])
