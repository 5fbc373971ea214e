from __future__ import annotations

import pytest

from rtgate.apps.guard.bench import run

pytestmark = pytest.mark.slow


def test_bench_runs_stations_in_real_time_through_mosquitto() -> None:
    res = run(streams=6, seconds=2.0, llm=False, fault_share=1.0, unique_clips=6, seed=3)
    assert res["streams"] == 6 and res["explainer"] == "rules"
    assert res["faulty_stations"] == 6
    # every stop that was decided was received by the subscriber and got a work order
    assert res["stops_received"] == res["work_orders"] >= 1
    assert res["stops_received"] - res["false_stops"] == res["faulty_stations"] - res["misses"]
    assert res["window_end_to_receipt_ms"]["p50"] > 0
    assert 0 < res["real_time_factor"] < 1
    # a live tick's budget, as guard run's; what the lines put off is counted (none enrolled
    # here: no lines, nothing put off)
    assert res["tick_budget_ms"] == 14.0
    assert res["lines_share"] == {"deferred": 0, "skipped": 0, "longest_wait_ticks": 0}
    for key in ("infer_batch_ms", "infer_single_stream_us", "onset_to_stop_ms", "stop_to_order_ms"):
        assert res[key]["p50"] is not None, key
    # every detected fault is counted once by level and once by kind
    detected = res["faulty_stations"] - res["misses"]
    assert sum(v["n"] for v in res["onset_to_stop_ms_by_severity"].values()) == detected
    by_fault = res["onset_to_stop_ms_by_fault"]
    assert set(by_fault) <= {"outer", "inner", "ball"}
    assert sum(v["n"] for v in by_fault.values()) == detected


def test_realtime_broker_serves_stops_and_stops_on_exit() -> None:
    import socket
    import uuid

    from rtgate.apps.guard.events import StopMessage
    from rtgate.apps.guard.mqtt import Broker, StopPublisher
    from rtgate.apps.guard.rtbroker import realtime_broker
    from rtgate.core.errors import ConfigError

    try:
        cm = realtime_broker(10)
        url = cm.__enter__()
    except ConfigError as e:
        pytest.skip(str(e))
    try:
        pub = StopPublisher(Broker.parse(url), f"t-{uuid.uuid4().hex[:8]}")
        assert pub.start(wait_s=5.0)
        pub.publish("t/stop", StopMessage("C", 1.0, 0.0, 0.0, "r"))
        assert pub.wait_delivered(5.0) and pub.failsafe_runs == 0
        pub.close()
    finally:
        cm.__exit__(None, None, None)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", Broker.parse(url).port), 0.5).close()
