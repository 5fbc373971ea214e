"""The sync facade: submit never waits on the gate, answers and follow-ups arrive, cancel,
bounded queues, warm start and a clean shutdown. Synchronisation is by events, not time."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from concurrent.futures import CancelledError

import pytest

from rtgate.core.budget import Budget
from rtgate.core.errors import InvalidBudget, QueueFull, RtgateError
from rtgate.core.latency import Prior
from rtgate.core.request import Piece, Request
from rtgate.gate import Gate, GateEvent, Scope
from rtgate.gate.inprocess_queue import InProcessQueue
from rtgate.gate.sync_facade import SyncGate
from rtgate.tiers.base import Tier
from rtgate.tiers.fake import FakeTier

WAIT = 10.0  # generous ceiling for event waits; never reached when the code is right


class Valve(Tier):
    """A tier that answers only when the test opens it; records entry, exit and close."""

    def __init__(self, name: str, quality: int, text: str = "ok", delegable: bool = False):
        self.name, self.quality, self.delegable, self.text = name, quality, delegable, text
        self.latency_prior = Prior(5.0, 5.0)
        self.entered = threading.Event()
        self.exited = threading.Event()
        self.closed = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._open: asyncio.Event | None = None
        self.calls = 0

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        self.calls += 1
        self._loop = asyncio.get_running_loop()
        if self._open is None:
            self._open = asyncio.Event()
        self.entered.set()
        try:
            await self._open.wait()
            yield Piece(self.text, {"tier": self.name})
        finally:
            self.exited.set()

    def open(self) -> None:
        """Let every waiting and future stream answer (called from the test thread)."""
        assert self._loop is not None and self._open is not None
        self._loop.call_soon_threadsafe(self._open.set)

    async def aclose(self) -> None:
        self.closed.set()


def chain_gate() -> tuple[Gate, Valve]:
    """A delegable cloud tier that never fits inline (answers when opened), and a fast
    local one; one background worker, so delegated jobs finish in order."""
    cloud = Valve("cloud", 80, "deep", delegable=True)
    cloud.latency_prior = Prior(1800, 1800)
    local = FakeTier("local", 50, ["quick"])
    gate = Gate([cloud, local], queue=InProcessQueue(workers=1), priors={"local": Prior(1, 1)})
    return gate, cloud


def test_submit_returns_before_a_hanging_tier_answers() -> None:
    tier = Valve("local", 50)
    with SyncGate([tier]).start(warmup=False) as sg:
        h = sg.submit(Request("hi", delegate=False), budget_ms=60_000)
        # submit has returned; the tier has not answered (it cannot until opened)
        assert not h.ready and h.result() is None and not h.done
        assert tier.entered.wait(WAIT)  # the tier is running on the gate's thread
        assert not h.ready
        tier.open()
        assert h.wait(WAIT)
    res = h.result()
    assert res is not None and res.text == "ok" and res.route == "local"
    assert h.done_at is not None


def test_answer_then_followup_delivered_on_the_handle() -> None:
    gate, cloud = chain_gate()
    with SyncGate(gate).start(warmup=False) as sg:
        h = sg.submit(Request("tell me more"), budget_ms=150)
        assert h.wait(WAIT)
        assert h.followup_pending and h.followup() is None
        assert cloud.entered.wait(WAIT)
        cloud.open()
        assert h.wait_followup(WAIT)
        res, job = h.result(), h.followup()
        assert sg.drain() == []  # poll mode: nothing is queued
    assert res is not None and res.route == "local" and res.text == "quick"
    assert res.job_id is not None
    assert job is not None and job.status == "done" and job.text == "deep"
    assert not h.followup_pending


def test_queue_mode_delivers_primaries_first_and_respects_max_items() -> None:
    gate, cloud = chain_gate()
    with SyncGate(gate, mode="queue").start(warmup=False) as sg:
        handles = [sg.submit(Request(f"q{i}"), budget_ms=150, tag=i) for i in range(3)]
        for h in handles:
            assert h.wait(WAIT)
        assert cloud.entered.wait(WAIT)
        cloud.open()
        for h in handles:
            assert h.wait_followup(WAIT)
        first = sg.drain(max_items=2)
        rest = sg.drain()
        assert sg.drain() == []
        stats = sg.stats()
    kinds = [d.kind for d in first + rest]
    assert kinds == ["result"] * 3 + ["followup"] * 3
    assert len(first) == 2
    assert [d.handle.tag for d in first + rest][:3] == [0, 1, 2]
    assert all(d.job is not None and d.job.text == "deep" for d in rest[1:])
    assert stats["pending"] == 0 and stats["delivered"] == 6


def test_max_pending_refuses_the_newcomer_and_never_drops_a_primary() -> None:
    tier = Valve("local", 50)
    with SyncGate([tier], mode="queue", max_pending=2).start(warmup=False) as sg:
        a = sg.submit(Request("a", delegate=False), 60_000)
        b = sg.submit(Request("b", delegate=False), 60_000)
        with pytest.raises(QueueFull):
            sg.submit(Request("c", delegate=False), 60_000)
        assert tier.entered.wait(WAIT)
        tier.open()
        assert a.wait(WAIT) and b.wait(WAIT)
        # both answers wait in the queue, undrained: the slots stay taken
        with pytest.raises(QueueFull):
            sg.submit(Request("d", delegate=False), 60_000)
        got = sg.drain()
        assert {d.handle for d in got} == {a, b} and len(got) == 2
        c = sg.submit(Request("c", delegate=False), 60_000)  # slots are free again
        assert c.wait(WAIT)
        assert sg.stats()["refused"] == 2


def test_full_followup_queue_drops_the_oldest_followup() -> None:
    gate, cloud = chain_gate()
    with SyncGate(gate, mode="queue", followup_size=1).start(warmup=False) as sg:
        h1 = sg.submit(Request("one"), 150)
        h2 = sg.submit(Request("two"), 150)
        assert h1.wait(WAIT) and h2.wait(WAIT)
        assert cloud.entered.wait(WAIT)
        cloud.open()  # one worker: job 1 finishes, then job 2
        assert h1.wait_followup(WAIT) and h2.wait_followup(WAIT)
        got = sg.drain()
        stats = sg.stats()
    assert [(d.kind, d.handle) for d in got] == [("result", h1), ("result", h2), ("followup", h2)]
    assert stats["dropped_followups"] == 1
    assert h1.followup() is not None  # the handle keeps it even though the queue dropped it


def test_cancel_pending_request_stops_the_tier() -> None:
    tier = Valve("local", 50)
    with SyncGate([tier], mode="queue").start(warmup=False) as sg:
        h = sg.submit(Request("x", delegate=False), 60_000)
        assert tier.entered.wait(WAIT)
        assert h.cancel() is True
        assert h.cancelled and h.done and not h.ready
        with pytest.raises(CancelledError):
            h.result()
        assert tier.exited.wait(WAIT)  # the gate's stream was cancelled on its thread
        assert h.cancel() is False
        assert sg.drain() == [] and sg.stats()["pending"] == 0


def test_cancel_after_answer_stops_the_followup_delivery() -> None:
    cloud = Valve("cloud", 80, "deep", delegable=True)
    cloud.latency_prior = Prior(1800, 1800)
    gate = Gate([cloud, FakeTier("local", 50, ["quick"], delegable=False)], priors={})
    gate.models["local"].observe(1, 1)
    with SyncGate(gate, mode="queue").start(warmup=False) as sg:
        h = sg.submit(Request("why?"), 150)
        assert h.wait(WAIT)
        res = h.result()
        assert res is not None and res.job_id is not None and h.followup_pending
        assert cloud.entered.wait(WAIT)  # the delegated job is running
        assert h.cancel() is True
        cloud.open()
        job = sg.call(lambda: gate.wait_job(res.job_id or ""), timeout=WAIT)
        assert job.status == "done"  # the job finished in the gate...
        assert h.followup() is None  # ...but was not delivered
        assert sg.drain() == []  # the primary was withdrawn from the queue too


def test_cold_tier_is_skipped_until_warm_start() -> None:
    def tiers() -> list[Tier]:
        return [FakeTier("local", 50, ["model"]), FakeTier("tpl", 10, ["canned"])]

    with SyncGate(tiers()).start(warmup=False) as cold:
        h = cold.submit(Request("hello", delegate=False), 150)
        assert h.wait(WAIT)
        assert not cold.warm
        cold_route = h.result().route  # type: ignore[union-attr]
    with SyncGate(tiers()).start(warmup=True) as warm:
        assert warm.warm
        h = warm.submit(Request("hello", delegate=False), 150)
        assert h.wait(WAIT)
        warm_route = h.result().route  # type: ignore[union-attr]
        snap = warm.gate.snapshot()
    assert cold_route == "silent"  # no prior, no observation: predicted +inf
    assert warm_route == "local"
    assert not snap["tiers"]["local"]["cold"]


def test_bad_input_and_lifecycle_errors() -> None:
    sg = SyncGate([FakeTier("local", 50)])
    with pytest.raises(RuntimeError):
        sg.submit(Request("x"), 100)  # not started
    with sg:
        with pytest.raises(InvalidBudget):
            sg.submit(Request("x"), -5)
        with pytest.raises(InvalidBudget):
            sg.submit(Request("x"), float("nan"))
    with pytest.raises(RuntimeError):
        sg.submit(Request("x"), 100)  # closed
    with pytest.raises(RuntimeError):
        sg.start()


def test_shutdown_cancels_in_flight_and_closes_tiers() -> None:
    tier = Valve("local", 50)
    sg = SyncGate([tier]).start(warmup=False)
    h = sg.submit(Request("x", delegate=False), 60_000)
    assert tier.entered.wait(WAIT)
    thread = sg._thread
    sg.close()
    assert thread is not None and not thread.is_alive()
    assert h.cancelled and h.wait(0)
    assert tier.exited.is_set() and tier.closed.is_set()
    assert not sg.running
    sg.close()  # idempotent


class Broken(Gate):
    async def stream(  # type: ignore[override]
        self,
        request: Request,
        budget_ms: float | Budget,
        *,
        scope: Scope = "first_token",
        follow: bool = False,
    ) -> AsyncIterator[GateEvent]:
        raise ValueError("boom")
        yield  # pragma: no cover


def test_a_failure_is_delivered_not_lost() -> None:
    with SyncGate(Broken([FakeTier("local", 50)]), mode="queue").start(warmup=False) as sg:
        h = sg.submit(Request("x"), 100)
        assert h.wait(WAIT)
        got = sg.drain()
    assert h.ready and [d.kind for d in got] == ["error"]
    with pytest.raises(RtgateError, match="boom"):
        h.result()


class TwoPart(Valve):
    """Yields a first piece at once, the second only when opened."""

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        self._loop = asyncio.get_running_loop()
        self._open = self._open or asyncio.Event()
        yield "first "
        self.entered.set()  # the gate asked for more: the first piece reached the handle
        await self._open.wait()
        yield "second"


def test_partial_text_grows_while_the_rest_streams() -> None:
    tier = TwoPart("local", 50)
    with SyncGate([tier], scope="first_token").start(warmup=False) as sg:
        h = sg.submit(Request("x", delegate=False), 60_000)
        assert tier.entered.wait(WAIT)
        assert h.partial == "first " and not h.ready
        tier.open()
        assert h.wait(WAIT)
    res = h.result()
    assert res is not None and res.text == h.partial == "first second"


class Unloadable(FakeTier):
    async def warmup(self) -> None:
        raise RuntimeError("weights missing")


def test_a_failed_warmup_is_raised_by_start_and_stops_the_thread() -> None:
    sg = SyncGate([Unloadable("local", 50)])
    with pytest.raises(RuntimeError, match="weights missing"):
        sg.start()
    assert not sg.running and not sg.warm
    assert sg._thread is not None and not sg._thread.is_alive()
