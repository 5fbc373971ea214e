"""Per-language rows of docs/voice.md's tables from `rtgate bench voice --json` reports.

    python scripts/voice_bench_summary.py out/run.json [more.json ...]

Per language and for all: first audio p50 / p95 (ms, turns not cut into, from the true
end), cut-ins by the true labels, barge-in → silent p50 / p95 (ms, from the true onset),
first answers on topic (kb check, barge-ins left out), multi-part asks whose big-model
follow-up was spoken; then the turn-end rules of the cut-in turns.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np


def pct(xs: list[float]) -> str:
    if not xs:
        return "-"
    a = np.asarray(xs, dtype=np.float64)
    return f"{np.percentile(a, 50):.1f} / {np.percentile(a, 95):.1f}"


def main() -> None:
    for path in sys.argv[1:]:
        rep = json.loads(Path(path).read_text(encoding="utf-8"))
        print(f"## {path}: {rep['set']}, {rep['turns']} turns")
        rows_all = [(c["lang"], r) for c in rep["calls_detail"] for r in c["turns"]]
        for lang in ("zh", "en", "all"):
            rows = [r for lg, r in rows_all if lang in ("all", lg)]
            first = [r["first_audio_ms"] for r in rows if r["first_audio_ms"] is not None]
            barge = [r["bargein_stop_ms"] for r in rows if r["bargein_stop_ms"] is not None]
            topic = [r["on_topic"] for r in rows if r["on_topic"] is not None]
            multi = [r for r in rows if r["kind"] == "multi"]
            followed = sum(bool(r["followup"]) for r in multi)
            cut = sum(r["cut_in"] for r in rows)
            print(
                f"| {lang} | {pct(first)} | {cut} / {len(rows)} | {pct(barge)} | "
                f"{sum(topic)} / {len(topic)} ({100 * sum(topic) / max(1, len(topic)):.1f}%) | "
                f"{followed} / {len(multi)} |"
            )
        if rep.get("first_audio_ms"):
            print("bench all:", rep["first_audio_ms"], "barge-in", rep["bargein_stop_ms"])
        cuts = [r for _, r in rows_all if r["cut_in"]]
        # the decision that made the sound (the row's own rule is its tail's end)
        by = Counter(r.get("cut_rule") or "?" for r in cuts)
        print("cut-ins by the rule that cut:", dict(by))
        print("cut turns' ends by rule:", dict(Counter(r["rule"] for r in cuts)))
        for r in cuts:
            print("   ", r.get("cut_rule"), "/ end:", r["rule"], r["p_end"], "|", r["text"],
                  "| heard:", r["heard"])  # fmt: skip
        print("rules:", rep.get("turn_end_rules"))
        print("first audio by rule:", rep.get("first_audio_ms_by_rule"))


if __name__ == "__main__":
    main()
