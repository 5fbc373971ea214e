"""``rtgate bench guard``: many stations in real time through a real Mosquitto.

Each station replays a simulated motor the detector never saw (about half develop a bearing
fault at a random moment). Every 20 ms tick, the windows of all stations go through the stop
path in one batch; stops are published (QoS 1) to the broker and a subscriber on its own
connection stamps their arrival. The explainer writes work orders in the background (in its
own process), or, with ``llm_inline``, on the stop path before the stop is published (the
ablation: the stop path waits for the work order).

Reported: per-tick features and inference (the batch; inference also per window and for a
single stream), window end -> subscriber receipt, fault onset -> stop receipt, false stops,
misses, real-time factor (compute time / audio time), late ticks, stop -> work order.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from rtgate.apps.guard.baseline import Enrolment
from rtgate.apps.guard.detector import Detector
from rtgate.apps.guard.features import HOP, RATE, WindowFeatures
from rtgate.apps.guard.mqtt import Broker, StopPublisher
from rtgate.apps.guard.pipeline import Guard
from rtgate.apps.guard.rhythm import Rhythm
from rtgate.apps.guard.rt import quiet_gc, realtime
from rtgate.apps.guard.rtbroker import realtime_broker
from rtgate.apps.guard.rules import Rule, Rules
from rtgate.apps.guard.simulate import Clip, make_clip, make_set
from rtgate.apps.guard.tickshare import LIVE_BUDGET_S
from rtgate.core.errors import InvalidRequest

if TYPE_CHECKING:
    from rtgate.apps.guard.explain_child import ExplainProcess
    from rtgate.apps.guard.store import WorkOrder

__all__ = ["bench_app", "run"]

bench_app = typer.Typer(help="Benchmarks of the acoustic guard.")


def _pct(xs: list[float], *qs: float) -> dict[str, float | None]:
    if not xs:
        return {f"p{q:g}": None for q in qs}
    return {f"p{q:g}": round(float(np.percentile(xs, q)), 3) for q in qs}


def _subscribe(host: str, port: int, topic: str, rt_priority: int, out: Any, stop: Any) -> None:
    """The subscriber process: stamps each stop's arrival (``time.time()``), reports at stop."""
    import paho.mqtt.client as paho
    from paho.mqtt.enums import CallbackAPIVersion

    got: list[tuple[float, bytes | bytearray]] = []
    c = paho.Client(CallbackAPIVersion.VERSION2, client_id=f"bench-sub-{uuid.uuid4().hex[:8]}")
    c.on_connect = lambda cl, u, f, rc, p: cl.subscribe(topic, qos=1)
    c.on_subscribe = lambda *a: out.put("ready")
    c.on_message = lambda cl, u, m: got.append((time.time(), m.payload))
    with realtime(rt_priority):
        c.connect(host, port, keepalive=10)
        c.loop_start()
        stop.wait()
    c.disconnect()
    c.loop_stop()
    out.put([(t, json.loads(p)) for t, p in got])


class _Subscriber:
    """The plant's receiver, in its own process (as a PLC would be): not the stop path's
    threads, not its GIL. With ``rt_priority`` it gets the same scheduling class."""

    def __init__(self, broker: Broker, topic: str, rt_priority: int = 0) -> None:
        ctx = mp.get_context("spawn")
        self._out: Any = ctx.Queue()
        self._stop = ctx.Event()
        args = (broker.host, broker.port, topic, rt_priority, self._out, self._stop)
        self._proc = ctx.Process(target=_subscribe, args=args, daemon=True)
        self._proc.start()
        if self._out.get(timeout=30.0) != "ready":
            raise TimeoutError("bench subscriber could not subscribe")
        self.got: list[tuple[float, dict[str, Any]]] = []

    def close(self) -> None:
        self._stop.set()
        self.got = self._out.get(timeout=30.0)
        self._proc.join(10.0)


def _single_stream_us(model: Path | None, n: int = 1000) -> list[float]:
    det = Detector(model, n_streams=1)
    feats = WindowFeatures()(np.random.default_rng(0).standard_normal((1, HOP)) * 0.05)
    out = []
    for _ in range(n):
        t = time.perf_counter()
        det.step(feats)
        out.append((time.perf_counter() - t) * 1e6)
    return out[50:]


@dataclass(slots=True)
class _Fleet:
    """The simulated stations: station ``i`` replays clip ``clip_of[i]``."""

    names: list[str]
    clips: list[Clip]  # one per station (shared objects when stations share a motor)
    clip_of: np.ndarray
    audio: np.ndarray  # (window, distinct clip, sample)
    onsets: np.ndarray  # fault onset in seconds per station, inf when healthy
    n_win: int

    @classmethod
    def simulate(
        cls,
        streams: int,
        seconds: float,
        *,
        unique_clips: int,
        seed: int,
        fault_share: float,
        severity_db: tuple[float, float],
    ) -> _Fleet:
        distinct = make_set(
            min(streams, unique_clips),
            "unseen",
            seed=seed,
            seconds=seconds,
            fault_share=fault_share,
            severity_db=severity_db,
        )
        n_win = int(seconds * RATE) // HOP
        audio = np.stack([c.audio[: n_win * HOP].reshape(n_win, HOP) for c in distinct], axis=1)
        clip_of = np.arange(streams) % len(distinct)
        clips = [distinct[i] for i in clip_of]
        onsets = np.array([c.onset_s if c.onset_s is not None else np.inf for c in clips])
        names = [f"s{i:03d}" for i in range(streams)]
        return cls(names, clips, clip_of, audio, onsets, n_win)


@dataclass(slots=True)
class _Ticks:
    """What the stop path did, tick by tick (``t0``: UNIX time of the audio's start)."""

    keep_scores: bool
    t0: float = 0.0
    tick_ms: list[float] = field(default_factory=list)
    infer_ms: list[float] = field(default_factory=list)
    features_ms: list[float] = field(default_factory=list)
    rhythm_ms: list[float] = field(default_factory=list)
    lines_ms: list[float] = field(default_factory=list)
    late_ms: list[float] = field(default_factory=list)
    share: dict[str, int] = field(default_factory=dict)  # what the lines put off (tickshare)
    scores: list[np.ndarray] = field(default_factory=list)


def _play(guard: Guard, fleet: _Fleet, ticks: _Ticks, idle: Callable[[], None] | None) -> None:
    """Feed every station's windows to ``guard`` in real time, one tick per 20 ms."""
    streams = len(fleet.names)
    frame = np.ones((streams, HOP), dtype=np.float32)  # its pages touched before tick 1
    # a running guard has just done a tick when the next window ends; after the setup
    # (a full collection, the subscriber's start) its caches are cold, so it warms up
    # again, and the first window ends one window later
    guard.warm_up(4)
    ticks.t0 = t0 = time.time()
    for j in range(fleet.n_win):
        due = t0 + (j + 1) * HOP / RATE
        wait = due - time.time()
        if wait > 0:
            time.sleep(wait)
        ticks.late_ms.append(max(0.0, (time.time() - due) * 1000))
        np.take(fleet.audio[j], fleet.clip_of, axis=0, out=frame)
        c0 = time.perf_counter()
        guard.process(frame, due)
        ticks.tick_ms.append((time.perf_counter() - c0) * 1000)
        ticks.infer_ms.append(guard.infer_s * 1000)
        ticks.features_ms.append(guard.features_s * 1000)
        ticks.rhythm_ms.append(guard.rhythm_s * 1000)
        ticks.lines_ms.append(guard.lines_s * 1000)
        if ticks.keep_scores:
            ticks.scores.append(guard.last_scores.copy())
        if idle is not None:
            idle()


@dataclass(slots=True)
class _Stops:
    """The stops the subscriber received, judged against each station's fault onset."""

    e2e: list[float] = field(default_factory=list)  # window end -> receipt
    to_pub: list[float] = field(default_factory=list)  # window end -> publish
    to_sub: list[float] = field(default_factory=list)  # publish -> receipt
    onset_ms: list[float] = field(default_factory=list)  # fault onset -> first stop
    false_stops: int = 0
    detected: set[int] = field(default_factory=set)
    by_sev: dict[str, list[float]] = field(default_factory=dict)
    by_fault: dict[str, list[float]] = field(default_factory=dict)  # outer, inner, ball

    @classmethod
    def judge(cls, got: list[tuple[float, dict[str, Any]]], fleet: _Fleet, t0: float) -> _Stops:
        st = cls()
        idx = {n: i for i, n in enumerate(fleet.names)}
        for recv, msg in got:
            i = idx[msg["station"]]
            st.e2e.append((recv - msg["window_end_ts"]) * 1000)
            st.to_pub.append((msg["ts"] - msg["window_end_ts"]) * 1000)
            st.to_sub.append((recv - msg["ts"]) * 1000)
            onset_wall = t0 + fleet.onsets[i]
            if msg["window_end_ts"] < onset_wall:
                st.false_stops += 1
            elif i not in st.detected:
                st.detected.add(i)
                st.onset_ms.append((recv - onset_wall) * 1000)
                clip = fleet.clips[i]
                lo = 3 * int(clip.severity_db // 3)
                st.by_sev.setdefault(f"{lo}-{lo + 3} dB", []).append(st.onset_ms[-1])
                st.by_fault.setdefault(str(clip.fault), []).append(st.onset_ms[-1])
        return st


def _setup_report(
    fleet: _Fleet, seconds: float, llm_inline: bool, rt_priority: int, worker: ExplainProcess
) -> dict[str, Any]:
    return {
        "streams": len(fleet.names),
        "unique_clips": len(set(fleet.clip_of.tolist())),
        "seconds": seconds,
        "llm_inline": llm_inline,
        "rt_priority": rt_priority,
        "explainer": worker.explainer,
        "cores": os.cpu_count(),
    }


def _compute_report(ticks: _Ticks, streams: int, model: Path | None) -> dict[str, Any]:
    per_window_us = [1000 * t / streams for t in ticks.infer_ms]
    return {
        "features_batch_ms": _pct(ticks.features_ms, 50, 99),
        "infer_batch_ms": _pct(ticks.infer_ms, 50, 99),
        "infer_per_window_us": _pct(per_window_us, 50, 99),
        "infer_single_stream_us": _pct(_single_stream_us(model), 50, 99),
        # the envelope's rhythm (enrolled stations with the rules' rhythm clause; 0 without)
        "rhythm_batch_ms": _pct(ticks.rhythm_ms, 50, 99),
        "rhythm_per_window_us": _pct([1000 * t / streams for t in ticks.rhythm_ms], 50, 99),
        "lines_batch_ms": _pct(ticks.lines_ms, 50, 99),
        "tick_compute_ms": _pct(ticks.tick_ms, 50, 99),
    }


def _stops_report(st: _Stops, fleet: _Fleet, n_received: int) -> dict[str, Any]:
    faulty = int(np.isfinite(fleet.onsets).sum())
    return {
        "window_end_to_receipt_ms": {
            **_pct(st.e2e, 50, 99),
            "max": round(max(st.e2e), 3) if st.e2e else None,
        },
        "window_end_to_publish_ms": _pct(st.to_pub, 50, 99),
        "publish_to_receipt_ms": _pct(st.to_sub, 50, 99),
        "onset_to_stop_ms": {
            **_pct(st.onset_ms, 50, 95),
            "max": round(max(st.onset_ms), 1) if st.onset_ms else None,
        },
        "onset_to_stop_ms_by_severity": {
            k: {"n": len(v), **_pct(v, 50, 95)}
            for k, v in sorted(st.by_sev.items(), key=lambda kv: int(kv[0].split("-")[0]))
        },
        "onset_to_stop_ms_by_fault": {
            k: {"n": len(v), **_pct(v, 50, 95)} for k, v in sorted(st.by_fault.items())
        },
        "stops_received": n_received,
        "faulty_stations": faulty,
        "false_stops": st.false_stops,
        "misses": faulty - len(st.detected),
    }


def _share_report(guard: Guard) -> dict[str, int]:
    lines = guard.lines
    if lines is None:
        return {"deferred": 0, "skipped": 0, "longest_wait_ticks": 0}
    share = lines.share
    return {
        "deferred": share.deferred,
        "skipped": share.skipped,
        "longest_wait_ticks": share.longest,
    }


def _timing_report(ticks: _Ticks, n_win: int) -> dict[str, Any]:
    audio_s = n_win * HOP / RATE
    return {
        "real_time_factor": round(sum(ticks.tick_ms) / 1000 / audio_s, 4),
        "lines_share": ticks.share,
        "late_ticks": int(sum(1 for x in ticks.late_ms if x > HOP / RATE * 1000)),
        "late_ms": _pct(ticks.late_ms, 50, 99),
    }


def _orders_report(orders: list[WorkOrder], worker: ExplainProcess) -> dict[str, Any]:
    order_ms = [(o.created_ts - o.stop_ts) * 1000 for o in orders]
    return {
        "work_orders": len(orders),
        "stop_to_order_ms": _pct(order_ms, 50, 95),
        "orders_by": {k: sum(1 for o in orders if o.explainer == k) for k in ("llm", "rules")},
        "explain_dropped": worker.dropped + worker.stats.get("dropped", 0),
    }


def _fill_record(
    record: dict[str, Any],
    fleet: _Fleet,
    ticks: _Ticks,
    receipts: list[tuple[float, dict[str, Any]]],
    orders: list[WorkOrder],
) -> None:
    record.update(
        t0=ticks.t0,
        names=fleet.names,
        onsets_s=fleet.onsets.tolist(),
        severity_db=[c.severity_db if c.fault is not None else None for c in fleet.clips],
        scores=np.array(ticks.scores),
        receipts=receipts,
        orders=orders,
        tick_ms=ticks.tick_ms,
        features_ms=ticks.features_ms,
        infer_ms=ticks.infer_ms,
        late_ms=ticks.late_ms,
    )


def _through_broker(
    broker: str,
    fleet: _Fleet,
    worker: ExplainProcess,
    ticks: _Ticks,
    *,
    model: Path | None,
    llm_inline: bool,
    rt_priority: int,
    cooldown_s: float,
    enrolments: list[Enrolment | None] | None = None,
    tick_budget_s: float | None = LIVE_BUDGET_S,
) -> tuple[bool, list[tuple[float, dict[str, Any]]]]:
    """Play the stations through the stop path and the broker to the subscriber, then stop
    the explainer. Returns whether the stop path ran at real-time priority, and the receipts.
    """
    b = Broker.parse(broker)
    run_id = uuid.uuid4().hex[:8]
    rules = Rules(Rule(topic=f"rtgate/bench/{run_id}/{{station}}/stop", cooldown_s=cooldown_s))
    sub = _Subscriber(b, f"rtgate/bench/{run_id}/+/stop", rt_priority)
    with realtime(rt_priority) as rt_on, ExitStack() as quiet:  # before the MQTT threads
        pub = StopPublisher(b, f"bench-pub-{run_id}")
        if not pub.start(wait_s=5.0):
            raise ConnectionError(f"broker {broker} unreachable")
        guard = Guard(
            fleet.names,
            rules,
            pub,
            detector=Detector(model, n_streams=len(fleet.names)),
            on_stop=None if llm_inline else worker.offer,
            before_publish=worker.inline if llm_inline else None,
            enrolments=enrolments,
            tick_budget_s=tick_budget_s,
        )
        # with the stop path at a real-time priority, garbage is collected between ticks
        _play(guard, fleet, ticks, quiet.enter_context(quiet_gc()) if rt_on else None)
        pub.wait_delivered(5.0)
        time.sleep(0.2)  # let the last receipts arrive
        ticks.share = _share_report(guard)
    worker.stop(timeout_s=60.0)
    sub.close()
    pub.close()
    return rt_on, sub.got


def _enrol_fleet(
    fleet: _Fleet, seconds: float, model: Path | None, known_orders: bool = False
) -> list[Enrolment | None]:
    """Each distinct motor enrolled on ``seconds`` of another, healthy recording of it
    (``enrol.fit``, stops accepted: the bench measures the stop path's cost);
    ``known_orders``: with its bearing's defect orders and 0.9-1.4 x its shaft speed
    (format /10, ``orders.py``)."""
    from rtgate.apps.guard.enrol import Recording, Source, fit
    from rtgate.apps.guard.orders import BearingOrders

    wf, det, made = WindowFeatures(), Detector(model, n_streams=1), {}
    for j in sorted(set(fleet.clip_of.tolist())):
        clip = make_clip(fleet.clips[j].motor, seconds, seed=fleet.clips[j].motor.seed + 1)
        f, env = wf.envelopes(clip.audio)
        det.reset()
        s, lg = np.zeros(len(f), np.float32), np.zeros(len(f), np.float32)
        for t, row in enumerate(f):
            s[t] = det.step(row[None])[0]
            lg[t] = det.last_logit[0]
        rhythm = Rhythm(1)
        r = np.array([rhythm.step(e[None])[0] for e in env], np.float32)
        src = Source(f"motor {j}", "simulated", RATE, seconds=len(f) * HOP / RATE)
        rms = float(np.std(clip.audio))
        rec = Recording(f, s, [(0, len(f))], [src], rms, r, lg, clip.audio, env)
        m = clip.motor
        bearing = BearingOrders.around(m.bearing.orders(), m.shaft_hz) if known_orders else None
        made[j] = fit(f"motor{j}", rec, accept_stops=True, bearing=bearing).enrolment
    return [made[int(j)] for j in fleet.clip_of]


def run(
    streams: int = 64,
    seconds: float = 10.0,
    *,
    llm_inline: bool = False,
    llm: bool = True,
    broker: str = "mqtt://127.0.0.1:1883",
    fault_share: float = 0.5,
    severity_db: tuple[float, float] = (6.0, 16.0),
    unique_clips: int = 64,
    seed: int = 7,
    model: Path | None = None,
    db: Path | None = None,
    rt_priority: int = 0,
    record: dict[str, Any] | None = None,
    enrol_s: float = 0.0,
    known_orders: bool = False,
    tick_budget_s: float | None = LIVE_BUDGET_S,
) -> dict[str, Any]:
    """Run the benchmark; return the metrics (see the module doc).

    ``rt_priority > 0`` runs the stop path and the MQTT threads at that ``SCHED_FIFO``
    priority (the explainer's process stays at normal priority). ``record``, when given, is
    filled with the raw run for plots: ``t0`` (UNIX time of audio start), ``names``,
    ``onsets_s``, ``severity_db``, ``scores`` (ticks x stations), ``receipts`` and ``orders``.
    ``enrol_s > 0`` enrols every station first (on that much of another healthy recording
    of its motor), so that the stop path runs each station's baseline too; with
    ``known_orders``, each with its bearing's orders (the lines then read every station's
    shaft speed at its turn: ``lines_batch_ms``). ``tick_budget_s`` is each tick's compute
    budget, as in ``guard run`` (``tickshare.py``; None: every due station in
    its tick, whatever it costs); ``lines_share`` counts what the lines put off.
    """
    from rtgate.apps.guard.explain_child import ExplainConfig, ExplainProcess
    from rtgate.apps.guard.store import WorkOrderStore

    Broker.parse(broker)  # a bad address fails before anything starts
    fleet = _Fleet.simulate(
        streams,
        seconds,
        unique_clips=unique_clips,
        seed=seed,
        fault_share=fault_share,
        severity_db=severity_db,
    )
    if known_orders and enrol_s <= 0:
        raise InvalidRequest("--known-orders needs --enrol-s > 0")
    enrolments = _enrol_fleet(fleet, enrol_s, model, known_orders) if enrol_s > 0 else None
    db_path = db or Path(tempfile.mkdtemp(prefix="rtgate-guard-bench-")) / "orders.sqlite"
    worker = ExplainProcess(ExplainConfig(str(db_path), llm=llm)).start()
    ticks = _Ticks(keep_scores=record is not None)
    rt_on, got = _through_broker(
        broker,
        fleet,
        worker,
        ticks,
        model=model,
        llm_inline=llm_inline,
        rt_priority=rt_priority,
        cooldown_s=seconds,
        enrolments=enrolments,
        tick_budget_s=tick_budget_s,
    )
    stops = _Stops.judge(got, fleet, ticks.t0)
    orders = WorkOrderStore(db_path).list(limit=1_000_000)
    if record is not None:
        _fill_record(record, fleet, ticks, got, orders)
    setup = _setup_report(fleet, seconds, llm_inline, rt_priority if rt_on else 0, worker)
    setup["enrolled_stations"] = 0 if enrolments is None else len(enrolments)
    setup["known_orders"] = known_orders
    setup["tick_budget_ms"] = None if tick_budget_s is None else tick_budget_s * 1000
    return {**setup, **_results(ticks, fleet, stops, len(got), orders, worker, model)}


def _results(
    ticks: _Ticks,
    fleet: _Fleet,
    stops: _Stops,
    received: int,
    orders: list[WorkOrder],
    worker: ExplainProcess,
    model: Path | None,
) -> dict[str, Any]:
    return {
        **_compute_report(ticks, len(fleet.names), model),
        **_stops_report(stops, fleet, received),
        **_timing_report(ticks, fleet.n_win),
        **_orders_report(orders, worker),
    }


@bench_app.command("guard")
def guard_cmd(
    streams: Annotated[int, typer.Option(help="stations at once")] = 64,
    json_out: Annotated[Path | None, typer.Option("--json", help="write results here")] = None,
    seconds: Annotated[float, typer.Option(help="audio per station")] = 10.0,
    llm_inline: Annotated[
        bool, typer.Option("--llm-inline", help="explain before the stop")
    ] = False,
    llm: Annotated[bool, typer.Option(help="use the local language model")] = True,
    broker: Annotated[str, typer.Option(help="mqtt://HOST:PORT")] = "mqtt://127.0.0.1:1883",
    seed: int = 7,
    rt_priority: Annotated[int, typer.Option(help="SCHED_FIFO priority of the stop path")] = 0,
    rt_broker: Annotated[
        bool,
        typer.Option(
            "--rt-broker", help="use a private mosquitto at --rt-priority instead of --broker"
        ),
    ] = False,
    unique_clips: Annotated[
        int,
        typer.Option(
            help="distinct motors simulated; station i replays motor i % N (stations sharing "
            "a motor stop in the same tick)"
        ),
    ] = 64,
    enrol_s: Annotated[
        float, typer.Option(help="enrol every station first on this much audio (0: none)")
    ] = 0.0,
    known_orders: Annotated[
        bool,
        typer.Option(
            "--known-orders",
            help="enrol each station with its bearing's defect orders (needs --enrol-s)",
        ),
    ] = False,
    tick_budget_ms: Annotated[
        float,
        typer.Option(
            help="each 20 ms tick's compute, from its start (as guard run): the envelope "
            "lines take what the stop path left and put off the stations they cannot "
            "afford (0: no budget)",
            min=0.0,
            max=HOP / RATE * 1000,
        ),
    ] = LIVE_BUDGET_S * 1000,
) -> None:
    """Many stations at once through the local Mosquitto."""
    if known_orders and enrol_s <= 0:
        raise typer.BadParameter("--known-orders needs --enrol-s > 0")
    with ExitStack() as stack:
        if rt_broker:
            if rt_priority <= 0:
                raise typer.BadParameter("--rt-broker needs --rt-priority > 0")
            broker = stack.enter_context(realtime_broker(rt_priority))
        res = run(
            streams,
            seconds,
            llm_inline=llm_inline,
            llm=llm,
            broker=broker,
            seed=seed,
            rt_priority=rt_priority,
            unique_clips=unique_clips,
            enrol_s=enrol_s,
            known_orders=known_orders,
            tick_budget_s=tick_budget_ms / 1000 or None,
        )
    res["broker"] = "private, SCHED_FIFO" if rt_broker else broker
    table = Table("metric", "value")
    for k, v in res.items():
        table.add_row(k, json.dumps(v, ensure_ascii=False))
    Console(stderr=True).print(table)
    text = json.dumps(res, ensure_ascii=False, indent=1)
    if json_out is not None:
        json_out.write_text(text + "\n", encoding="utf-8")
    print(text)
