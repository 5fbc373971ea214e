"""Plots for benchmark and demo reports (matplotlib, headless)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["latency_cdf"]


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
