"""`rtgate bench npc`: does a 60 fps loop keep its frames while NPCs talk to real models?

Two runs of the same scripted session on the real models:

1. **gated**: lines go through the :class:`~rtgate.gate.sync_facade.SyncGate`; the frame only
   submits and drains. Templates answer common lines; the local model answers the rest, its first
   piece within ``budget_ms`` (``scope="first_token"``), and the NPC acts on the head
   ``action target |`` as soon as it has streamed in; the cloud tier (the same model
   behind an emulated 70B latency, on its own backend) keeps the CPU busy with deeper
   follow-ups in the background.
2. **inline ablation**: every line calls the local model inside the frame and waits, as
   the article warns against.

``frame_ms`` is each frame's own work (submit, drain, apply, step); a frame is *missed*
when it ends after its deadline (its due time + 1/60 s, sleep overshoot included).
``latency_frames`` of an intent counts frames from the line's frame to the frame that acts
on it (template and local routes; ``silent`` answers are counted apart in ``routes``);
``line_frames`` to the frame that speaks the complete line.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import numpy as np

from rtgate.apps.npc.game import (
    Arrival,
    Exchange,
    Game,
    GatedDialogue,
    InlineDialogue,
    LoopStats,
    RealClock,
    npc_request,
    run_loop,
    script_lines,
)
from rtgate.apps.npc.intent import Intent, parse_intent
from rtgate.apps.npc.tiers import ModelTiers, build_model_tiers, template_tier
from rtgate.apps.npc.world import default_world
from rtgate.core.budget import Budget
from rtgate.core.request import Piece
from rtgate.gate import Gate, GateConfig
from rtgate.gate.sync_facade import SyncGate
from rtgate.tiers.base import Tier

__all__ = ["GOALS", "gated_session", "run", "summarize"]

GOALS = {"frame_p99_ms": 1000.0 / 60.0, "missed_frames": 0, "intent_latency_frames_p99": 10}
FAST_ROUTES = ("template", "local")
_FPS = 60.0


def _pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (a value that occurred; 0 when empty)."""
    if not values:
        return 0.0
    return float(np.percentile(np.asarray(values, dtype=float), q, method="inverted_cdf"))


@contextmanager
def gated_session(
    model: str = "smollm2",
    *,
    local_threads: int = 1,
    cloud_threads: int = 1,
    local_tokens: int = 20,
    seed: int = 0,
) -> Iterator[tuple[SyncGate, ModelTiers]]:
    """A warm :class:`SyncGate` (queue mode) over templates, local and emulated cloud."""
    tiers = build_model_tiers(
        model,
        local_threads=local_threads,
        cloud_threads=cloud_threads,
        local_tokens=local_tokens,
        seed=seed,
    )
    gate = Gate(
        [template_tier(), tiers.cloud, tiers.local],
        config=GateConfig(followup_budget_ms=10_000.0),
    )
    sg = SyncGate(gate, mode="queue", max_pending=32, followup_size=16, scope="first_token")
    probe = npc_request("Mara", "What's the news from the capital?")
    sg.start(warmup=True, probe=probe)
    try:
        yield sg, tiers
    finally:
        sg.close()


def inline_answer(sg: SyncGate, tier: Tier) -> Callable[[str, str], tuple[Intent, str]]:
    """Ask ``tier`` directly and wait for the whole line: the ablation's model call."""

    def answer(npc: str, text: str) -> tuple[Intent, str]:
        async def collect() -> str:
            parts: list[str] = []
            async for p in tier.stream(npc_request(npc, text), Budget(30_000.0)):
                parts.append(p.text if isinstance(p, Piece) else p)
            return "".join(parts)

        return parse_intent(sg.call(collect, timeout=60.0)), f"{tier.name}-inline"

    return answer


FrameSched = Literal["fifo", "none"]


@contextmanager
def frame_priority(sched: FrameSched) -> Iterator[str]:
    """Run the block with this thread scheduled as ``sched``, then restore it.

    ``"fifo"``: real-time SCHED_FIFO (priority 10), so a frame starts on time however busy
    the CPUs are (measured here: at load 5-10 on 2 cores, frames start up to 20-66 ms late
    under the default policy, and under 0.4 ms p99 with it; nice -10 did not help). The
    thread sleeps between frames, so it cannot starve the others. It needs CAP_SYS_NICE;
    when refused the block runs unchanged. Yields the policy in effect. Threads started
    inside the block inherit it, so enter it after the model threads exist.
    """
    restore: tuple[int, os.sched_param] | None = None
    if sched == "fifo":
        try:
            restore = (os.sched_getscheduler(0), os.sched_getparam(0))
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
        except (AttributeError, OSError):
            restore = None
    try:
        yield "fifo" if restore is not None else "none"
    finally:
        if restore is not None:
            os.sched_setscheduler(0, *restore)


def summarize(stats: LoopStats, exchanges: Sequence[Exchange]) -> dict[str, Any]:
    """Frame times, misses and intent latencies of one run."""
    fast = [e for e in exchanges if e.route in FAST_ROUTES and e.acted is not None]
    acted = [float(e.acted - e.sent) for e in fast if e.acted is not None]
    spoken = [float(e.spoken - e.sent) for e in fast if e.spoken is not None]
    deeper = [float(e.deeper - e.sent) for e in exchanges if e.deeper is not None]
    return {
        "frames": stats.frames,
        "frame_ms": {
            "p50": round(_pct(stats.frame_ms, 50), 3),
            "p99": round(_pct(stats.frame_ms, 99), 3),
            "max": round(max(stats.frame_ms, default=0.0), 3),
        },
        "missed_frames": stats.missed,
        "start_late_ms": {
            "p99": round(_pct(stats.late_ms, 99), 3),
            "max": round(max(stats.late_ms, default=0.0), 3),
        },
        "intents": {
            "count": len(fast),
            "latency_frames_p50": _pct(acted, 50),
            "latency_frames_p99": _pct(acted, 99),
            "line_frames_p50": _pct(spoken, 50),
            "line_frames_p99": _pct(spoken, 99),
            "routes": dict(Counter(e.route or "cancelled" for e in exchanges)),
        },
        "followups": {"count": len(deeper), "latency_frames_p50": _pct(deeper, 50)},
    }


@contextmanager
def _gil_switch_interval(seconds: float) -> Iterator[None]:
    """The interpreter's GIL switch interval set to ``seconds`` for the block."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def _inline_ablation(
    sg: SyncGate, tiers: ModelTiers, seconds: float, frame_sched: FrameSched
) -> dict[str, Any]:
    """The same script with the local model called inline in the frame: what it costs."""
    inline = InlineDialogue(inline_answer(sg, tiers.local))
    game = Game(default_world(_FPS), inline, script_lines(seconds))
    with frame_priority(frame_sched):
        stats = run_loop(game, round(seconds * _FPS), RealClock())
    ab = summarize(stats, inline.exchanges)
    return {
        "frames": ab["frames"],
        "frame_ms": {"p99": ab["frame_ms"]["p99"], "max": ab["frame_ms"]["max"]},
        "missed_frames": ab["missed_frames"],
        "model_calls": len(inline.exchanges),
    }


def _gate_report(sg: SyncGate, dialogue: GatedDialogue) -> dict[str, Any]:
    """What the gate did in the gated run: cancels, refusals, dropped follow-ups, tier p99s."""
    snap = sg.gate.snapshot()
    return {
        "cancelled": dialogue.cancelled,
        "refused": dialogue.refused,
        "dropped_followups": sg.stats()["dropped_followups"],
        "tiers_p99_ms": {
            name: {"ttft": round(t["ttft_p99_ms"], 1), "total": round(t["total_p99_ms"], 1)}
            for name, t in snap["tiers"].items()
        },
    }


def run(
    seconds: float = 30.0,
    *,
    model: str = "smollm2",
    budget_ms: float = 100.0,
    ablation_seconds: float | None = None,
    local_threads: int = 1,
    cloud_threads: int = 1,
    switch_interval_s: float = 0.001,
    frame_sched: FrameSched = "fifo",
    on_frame: Callable[[int, list[Arrival]], None] | None = None,
) -> dict[str, Any]:
    """Run the gated loop for ``seconds``, then the inline ablation (0 s: skip it).

    ``switch_interval_s``: the interpreter's GIL switch interval during the run (a frame
    waits at most about this long for the GIL held by another Python thread).
    ``frame_sched``: how the frame thread is scheduled during the loops (see
    :func:`frame_priority`).
    """
    load_before = round(os.getloadavg()[0], 2)
    with _gil_switch_interval(switch_interval_s):
        t0 = time.perf_counter()
        session = gated_session(model, local_threads=local_threads, cloud_threads=cloud_threads)
        with session as (sg, tiers):
            warm_s = time.perf_counter() - t0
            warm = sg.warm
            dialogue = GatedDialogue(sg, budget_ms)
            game = Game(default_world(_FPS), dialogue, script_lines(seconds))
            with frame_priority(frame_sched) as applied_sched:
                stats = run_loop(game, round(seconds * _FPS), RealClock(), on_frame=on_frame)
            report = summarize(stats, dialogue.exchanges)
            gate = _gate_report(sg, dialogue)
            ab_s = seconds if ablation_seconds is None else ablation_seconds
            ablation = _inline_ablation(sg, tiers, ab_s, frame_sched) if ab_s > 0 else {}
            tokens = {name: be.engine_stats.generated_tokens for name, be in tiers.backends.items()}
    report.update(
        {
            "inline_ablation": ablation,
            "seconds": seconds,
            "model": model,
            "budget_ms": budget_ms,
            "warm": warm,
            "frame_thread_sched": applied_sched,
            "warmup_s": round(warm_s, 2),
            "gate": gate,
            "generated_tokens": tokens,
            "load_avg_1m": {"before": load_before, "after": round(os.getloadavg()[0], 2)},
            "goals": GOALS,
        }
    )
    return report
