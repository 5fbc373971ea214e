"""The acoustic guard's section of `rtgate demo`: a few stations, a fault, a stop, a ticket.

Four stations replay simulated motors the detector never saw, in real time, through the
local Mosquitto (a topic unique to the run); two of them develop a bearing fault. The stop
path publishes each stop (QoS 1), a subscriber in its own process stamps its arrival, and
the explainer (in its own process) writes the work order afterwards. The figure shows the
detector's score per station over time, with the fault onset and the received stop marked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rtgate.apps.guard.bench import run
from rtgate.apps.guard.features import HOP, RATE
from rtgate.demo.runner import DemoSection

__all__ = ["demo", "score_plot"]


def score_plot(record: dict[str, Any], path: Path, threshold: float = 0.92) -> Path:
    """Detector score over time per station, onset (dashed) and stop receipt (dot)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scores = np.asarray(record["scores"])
    t = (np.arange(len(scores)) + 1) * HOP / RATE
    t0 = float(record["t0"])
    fig, ax = plt.subplots(figsize=(8, 4))
    for i, name in enumerate(record["names"]):
        sev = record["severity_db"][i]
        label = f"{name} ({'healthy' if sev is None else f'fault, {sev:.0f} dB'})"
        (line,) = ax.plot(t, scores[:, i], linewidth=1, label=label)
        onset = record["onsets_s"][i]
        if np.isfinite(onset):
            ax.axvline(onset, color=line.get_color(), linestyle="--", linewidth=1)
        for recv, msg in record["receipts"]:
            if msg["station"] == name:
                ax.plot([recv - t0], [msg["score"]], "o", color=line.get_color(), markersize=7)
    ax.axhline(threshold, color="red", linewidth=0.8, linestyle=":", label="threshold")
    ax.set_xlabel("audio time (s); dashed: fault onset, dot: stop received")
    ax.set_ylabel("detector score")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("Acoustic guard: score per 20 ms window, stops through Mosquitto")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="center left", fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def demo(out_dir: Path, *, seconds: float = 8.0, llm: bool = True) -> DemoSection:
    """Run four stations for ``seconds`` of audio; ``llm=False`` writes rule-based tickets."""
    record: dict[str, Any] = {}
    out_dir.mkdir(parents=True, exist_ok=True)
    db = out_dir / "guard_orders.sqlite"
    db.unlink(missing_ok=True)  # this run's work orders only
    r = run(
        streams=4,
        seconds=seconds,
        llm=llm,
        fault_share=0.5,
        severity_db=(8.0, 14.0),
        unique_clips=4,
        seed=11,
        db=db,
        record=record,
    )
    fig = score_plot(record, out_dir / "guard_scores.png")
    e2e, pub, onset = (
        r["window_end_to_receipt_ms"],
        r["window_end_to_publish_ms"],
        r["onset_to_stop_ms"],
    )

    def ms(d: dict[str, Any], key: str) -> str:
        return "n/a" if d.get(key) is None else f"{d[key]:.1f}"

    orders = record["orders"]
    first = orders[0] if orders else None
    rows = [
        ("stations (real time, unseen motors)", f"{r['streams']} x {seconds:g} s"),
        ("faulty stations / stops received", f"{r['faulty_stations']} / {r['stops_received']}"),
        ("false stops / missed faults", f"{r['false_stops']} / {r['misses']}"),
        ("window end -> publish p50 / p99", f"{ms(pub, 'p50')} / {ms(pub, 'p99')} ms"),
        ("window end -> subscriber p50 / max", f"{ms(e2e, 'p50')} / {ms(e2e, 'max')} ms"),
        ("fault onset -> stop received p50 / max", f"{ms(onset, 'p50')} / {ms(onset, 'max')} ms"),
        ("detector per window (one stream) p50", f"{r['infer_single_stream_us']['p50']:.0f} µs"),
        ("work orders (explainer)", f"{r['work_orders']} ({r['explainer']})"),
        ("stop -> work order p50", f"{ms(r['stop_to_order_ms'], 'p50')} ms"),
    ]
    if first is not None:
        rows.append((f"work order for {first.station}", first.explanation))
    ok = r["misses"] == 0 and r["false_stops"] == 0 and r["work_orders"] == r["stops_received"]
    return DemoSection(
        "Acoustic guard: the detector stops the line, the language model writes the ticket",
        rows,
        [fig],
        notes="Motors and faults come from the physically grounded simulator (motors the "
        "detector never saw); the stop goes through the local Mosquitto with QoS 1 and the "
        "work order is written afterwards, in another process.",
        ok=ok,
    )
