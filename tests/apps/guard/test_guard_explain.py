from __future__ import annotations

import asyncio
import re
import threading
from pathlib import Path

import numpy as np
import pytest

from rtgate.apps.guard.diagnose import Diagnosis
from rtgate.apps.guard.events import StopEvent, StopMessage
from rtgate.apps.guard.explain_worker import (
    ExplainWorker,
    LLMExplainer,
    Machine,
    RuleExplainer,
    StopContext,
    truncate,
)
from rtgate.apps.guard.simulate import Clip
from rtgate.apps.guard.store import WorkOrder, WorkOrderStore

CJK = re.compile(r"[\u4e00-\u9fff]")


def _record(orders: list[WorkOrder], done: threading.Event, order: WorkOrder) -> None:
    orders.append(order)
    done.set()


def _ctx(kind: str | None = "outer", impact: float = 107.0) -> StopContext:
    diag = Diagnosis(impact, (2000.0, 4000.0), 9.0, 12.0, kind, 3.6)
    return StopContext("C", 0.97, 1.0, 0.99, "r", np.zeros(16000, np.float32), diagnosis=diag)


def _event(
    station: str = "C", clip: np.ndarray | None = None, ts: float | None = None
) -> StopEvent:
    import time

    now = time.time() if ts is None else ts
    c = clip if clip is not None else np.zeros(16000, np.float32)
    return StopEvent(StopMessage(station, 0.97, now, now - 0.001, "r"), "t", 0, c, now)


@pytest.mark.parametrize(
    ("kind", "part"), [("outer", "外圈"), ("inner", "内圈"), ("ball", "滚动体"), (None, "冲击")]
)
def test_rule_explainer_writes_a_short_chinese_hypothesis(kind: str | None, part: str) -> None:
    text = RuleExplainer().sentence(_ctx(kind))
    assert part in text and "C工位" in text
    assert len(text) <= 30 and len(CJK.findall(text)) >= 10


def test_rule_explainer_cuts_long_station_names() -> None:
    ctx = _ctx()
    long = StopContext(
        "压装线第三工段左侧主电机驱动端", 0.97, 1, 1, "r", ctx.clip, diagnosis=ctx.diagnosis
    )
    assert len(RuleExplainer().sentence(long)) == 30


def test_truncate_keeps_the_first_line_only() -> None:
    assert truncate("  疑似外圈剥落。\n第二行", 30) == "疑似外圈剥落。"
    assert truncate("一" * 40) == "一" * 30
    assert truncate("") == ""


class Failing:
    name = "broken"

    async def explain(self, context: StopContext) -> str:
        raise RuntimeError("model crashed")


class Hanging:
    name = "hanging"

    async def explain(self, context: StopContext) -> str:
        await asyncio.Event().wait()
        return "never"


@pytest.mark.parametrize("explainer", [None, Failing(), Hanging()])
def test_worker_falls_back_to_rules(tmp_path: Path, explainer: object, fault_clip: Clip) -> None:
    done = threading.Event()
    orders: list[WorkOrder] = []
    worker = ExplainWorker(
        WorkOrderStore(tmp_path / "o.sqlite"),
        explainer,  # type: ignore[arg-type]
        budget_s=0.4,
        machines={"C": Machine(fault_clip.motor.shaft_hz, fault_clip.motor.bearing)},
        on_order=lambda o: _record(orders, done, o),
    )
    worker.answer_s = 0.05  # the model is expected to make it: it is tried
    worker.start()
    clip = fault_clip.audio[24000:40000]
    assert worker.offer(_event(clip=clip))
    assert done.wait(5.0)
    worker.stop()
    assert orders[0].explainer == "rules" and worker.fallbacks == 1
    assert "外圈" in orders[0].explanation  # the envelope found the outer-race defect
    if isinstance(explainer, Hanging):  # the model was given until the deadline, not less
        assert orders[0].created_ts - orders[0].stop_ts >= 0.4 - worker.margin_s


def test_busy_model_means_rules_for_the_next_stop(tmp_path: Path) -> None:
    gate = threading.Event()

    class Slow:
        name = "slow"

        async def explain(self, context: StopContext) -> str:
            await asyncio.to_thread(gate.wait, 10)
            return "疑似轴承外圈剥落，建议停机检查"

    orders: list[WorkOrder] = []
    first = threading.Event()
    worker = ExplainWorker(
        WorkOrderStore(tmp_path / "o.sqlite"),
        Slow(),
        budget_s=10.0,  # roomy: on a busy machine the holder still answers in time
        on_order=lambda o: _record(orders, first, o),
    )
    worker.answer_s = 9.0  # the model may start within ~1 s of a stop, no later
    worker.start()
    worker.offer(_event("A"))  # one of the two takes the model and holds it until the gate
    worker.offer(_event("B"))  # opens; the other cannot get it in time: rules, written now
    assert first.wait(10.0)
    assert len(orders) == 1 and orders[0].explainer == "rules"  # the model is still held
    gate.set()
    worker.stop()
    assert len(orders) == 2 and orders[1].station != orders[0].station
    assert orders[1].explainer == "slow" and orders[1].explanation.startswith("疑似")


def test_full_feed_keeps_the_latest_stop_per_station(tmp_path: Path) -> None:
    gate = threading.Event()

    class Slow:
        name = "slow"

        async def explain(self, context: StopContext) -> str:
            await asyncio.to_thread(gate.wait, 10)
            return "疑似轴承外圈剥落，建议停机检查"

    store = WorkOrderStore(tmp_path / "o.sqlite")
    worker = ExplainWorker(store, Slow(), capacity=1, budget_s=30.0).start()
    accepted = [worker.offer(_event(s)) for s in ("A", "B", "C", "C", "D")]
    # one is being explained or waiting (capacity 1): the rest overflow, one kept per station
    assert accepted[0] is True and accepted.count(False) >= 3
    gate.set()
    worker.stop()
    orders = store.list()
    assert worker.dropped == accepted.count(False)
    assert {o.station for o in orders} == {"A", "B", "C", "D"}
    overflowed = [o for o in orders if "队列已满" in o.facts]
    assert overflowed and all(o.explainer == "rules" for o in overflowed)


def test_store_roundtrip(tmp_path: Path) -> None:
    store = WorkOrderStore(tmp_path / "o.sqlite")
    a = store.add(station="A", score=0.95, stop_ts=10.0, explanation="甲", created_ts=10.5)
    store.add(station="B", score=0.99, stop_ts=11.0, explanation="乙")
    again = WorkOrderStore(tmp_path / "o.sqlite")
    assert [o.station for o in again.list()] == ["A", "B"]
    assert [o.id for o in again.list(station="A")] == [a.id]
    assert again.list()[0].public() == {
        "id": a.id,
        "station": "A",
        "score": 0.95,
        "stop_ts": 10.0,
        "created_ts": 10.5,
        "explanation": "甲",
    }


@pytest.mark.slow
@pytest.mark.skipif(not LLMExplainer.available(), reason="llama.cpp or Gemma 3 not installed")
async def test_local_model_writes_a_chinese_hypothesis() -> None:
    llm = LLMExplainer()
    try:
        text = await asyncio.wait_for(llm.explain(_ctx("outer")), 30)
    finally:
        await llm.aclose()
    assert 4 <= len(CJK.findall(text)) and len(text) <= 30


def test_machines_come_from_the_rules_file(tmp_path: Path) -> None:
    from rtgate.apps.guard.explain_worker import load_machines
    from rtgate.apps.guard.rules import Rules
    from rtgate.core.errors import ConfigError

    p = tmp_path / "rules.toml"
    p.write_text(
        'threshold = 0.9\n[machines.C]\nshaft_hz = 29.95\nbearing = "6205"\n'
        "[machines.D]\nshaft_hz = 24\nn_balls = 8\nball_mm = 7.9\npitch_mm = 33.5\n"
    )
    assert Rules.load(p).default.threshold == 0.9  # the rule engine ignores [machines]
    m = load_machines(p)
    assert m["C"].bearing is not None and m["C"].bearing.n_balls == 9
    assert m["D"].bearing is not None and m["D"].bearing.pitch_mm == 33.5
    p.write_text('[machines.E]\nbearing = "9999"\n')
    with pytest.raises(ConfigError, match=r"machines\.E"):
        load_machines(p)
