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
    for key in ("infer_batch_ms", "infer_single_stream_us", "onset_to_stop_ms", "stop_to_order_ms"):
        assert res[key]["p50"] is not None, key
