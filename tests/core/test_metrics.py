"""The gate's metrics as a scrape reads them: the Prometheus text matches what was recorded."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from rtgate.core.metrics import GateMetrics


def _samples(m: GateMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(m.registry).decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_histograms_and_counters_read_as_recorded() -> None:
    m = GateMetrics()
    for e2e_ms in (0.3, 2.0, 20_000.0):  # under the first bucket, inside, past the last
        m.record("template", ttft_ms=e2e_ms, e2e_ms=e2e_ms, budget_ms=150.0)
    m.record("local", ttft_ms=10.0, e2e_ms=40.0, piece_times_ms=[10.0, 25.0, 40.0])
    m.attempt("cloud", "skipped")
    m.attempt("cloud", "skipped")
    m.delegated("cloud", "queued")
    got = _samples(m)

    def bucket(route: str, le: str) -> float:
        return got[("rtgate_e2e_seconds_bucket", (("le", le), ("route", route)))]

    assert bucket("template", "0.0005") == 1
    assert bucket("template", "0.0025") == 2
    assert bucket("template", "10.0") == 2
    assert bucket("template", "+Inf") == 3
    assert got[("rtgate_e2e_seconds_count", (("route", "template"),))] == 3
    assert abs(got[("rtgate_e2e_seconds_sum", (("route", "template"),))] - 20.0023) < 1e-9
    assert got[("rtgate_requests_total", (("route", "template"),))] == 3
    assert got[("rtgate_deadline_misses_total", (("route", "template"),))] == 1
    assert got[("rtgate_tpot_seconds_count", (("route", "local"),))] == 1
    assert abs(got[("rtgate_tpot_seconds_sum", (("route", "local"),))] - 0.015) < 1e-12
    attempts = (("outcome", "skipped"), ("tier", "cloud"))
    assert got[("rtgate_tier_attempts_total", attempts)] == 2
    assert got[("rtgate_delegated_total", (("result", "queued"), ("tier", "cloud")))] == 1
    assert ("rtgate_tpot_seconds_count", (("route", "template"),)) not in got  # one piece
    assert m.snapshot()["deadline_misses"] == 1
