"""The fitted end-of-turn decision against today's word rules, offline (#17, session 15).

Fits ``eot_rule`` on the rows of ``--fit`` files (``scripts/voice_eot_features.py``), then
prints, per set and language, for today's rules (``TurnRules.for_model("lm+text")``, the
local model's clause score not replayed: clauses wait 1.2 s) and for the fitted rule: the
pauses inside turns it would speak in (a cut-in), and the silence it waits at the turns'
ends (p50 / p95, how many wait the 1.2 s timeout). ``--write`` saves the fitted rule as the
shipped ``data/eot-rule.json``.

    PYTHONPATH=src python scripts/voice_eot_rule_study.py --fit out/feat-a.json out/feat-b.json \
        --report out/feat-natural7.json [--write]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rtgate.apps.voice.eot_rule import EotRule, rule_path
from rtgate.apps.voice.eot_rule_fit import fit, simulate


def _load(paths: list[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for p in paths:
        rows += json.loads(Path(p).read_text(encoding="utf-8"))
    return rows


def _table(title: str, rows: list[dict[str, Any]], rule: EotRule) -> None:
    print(f"\n{title}")
    print("set | lang | pauses | ends | today: cut, wait p50/p95, at 1.2 s | fitted: the same")
    sets = sorted({r["set"] for r in rows})
    for s in [*sets, "all"] if len(sets) > 1 else sets:
        for lang in ("zh", "en", "all"):
            part = [r for r in rows if s in ("all", r["set"]) and lang in ("all", r["lang"])]
            if not part:
                continue
            cells = []
            for x in (simulate(None, part), simulate(rule, part)):
                w = f"{x['wait_p50']:.0f}/{x['wait_p95']:.0f}"
                cells.append(f"{x['cut']}, {w}, {x['ends_at_timeout']}")
            a = simulate(None, part)
            print(f"{s} | {lang} | {a['pauses']} | {a['ends']} | {cells[0]} | {cells[1]}")


def main() -> None:
    args = sys.argv[1:]
    fit_files = args[args.index("--fit") + 1 : args.index("--report")]
    report_files = [a for a in args[args.index("--report") + 1 :] if not a.startswith("--")]
    rows = _load(fit_files)
    rule = fit(rows)
    sets = sorted({str(r["set"]) for r in rows})
    rule = EotRule(rule.coef, rule.intercept, rule.bar, meta=dict(rule.meta) | {"sets": sets})
    print("bar", rule.bar, "weights", dict(zip(("intercept", *__import__(
        "rtgate.apps.voice.eot_rule", fromlist=["FEATURES"]).FEATURES),
        (round(rule.intercept, 3), *(round(c, 3) for c in rule.coef)), strict=True)))  # fmt: skip
    _table("fitted on (tuned on)", rows, rule)
    if report_files:
        _table("reported on (validation, not fitted on)", _load(report_files), rule)
    if "--write" in args:
        rule.save(rule_path())
        print("wrote", rule_path())


if __name__ == "__main__":
    main()
