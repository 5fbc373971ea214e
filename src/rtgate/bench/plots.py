"""Plots for benchmark and demo reports (matplotlib, headless)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["latency_cdf", "reliability_diagram"]


def latency_cdf(
    series: Mapping[str, Sequence[float]],
    path: Path,
    *,
    title: str,
    budget_ms: float | None = None,
    log_x: bool = True,
) -> Path:
    """Empirical CDFs of latency samples (ms), one line per series; returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 4))
    for label, xs in series.items():
        if not len(xs):
            continue
        v = np.sort(np.asarray(xs, dtype=float))
        y = np.arange(1, len(v) + 1) / len(v)
        ax.step(np.maximum(v, 1e-3), y, where="post", label=label)
    if budget_ms is not None:
        ax.axvline(budget_ms, color="red", linestyle="--", linewidth=1, label="budget")
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel("share of requests")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def reliability_diagram(
    series: Mapping[str, Sequence[Mapping[str, object]]], path: Path, *, title: str
) -> Path:
    """Predicted probability against the observed share, one line per series of
    :func:`rtgate.tiers.answerability.reliability` bins (marker size: how many fell in the
    bin); the diagonal is perfect calibration. Returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1, label="calibrated")
    for label, bins in series.items():
        xs = [float(b["mean_p"]) for b in bins]  # type: ignore[arg-type]
        ys = [float(b["right"]) for b in bins]  # type: ignore[arg-type]
        sizes = [8 + 2 * float(b["n"]) ** 0.5 for b in bins]  # type: ignore[arg-type]
        ax.plot(xs, ys, marker="o", label=label)
        ax.scatter(xs, ys, s=sizes, alpha=0.3)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("judge's probability that the fast path can answer")
    ax.set_ylabel("share that could")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
