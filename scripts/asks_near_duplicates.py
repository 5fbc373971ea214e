"""Drop the asks of a newly written set that are near what the models learned or were
chosen on (docs/status.md, "The rule for sets"): a line goes when its character-trigram
Jaccard similarity (on the normalised text) with any reference line, or with an earlier
kept line of its own set, is at least ``--bar`` (0.5), or when it equals one once
normalised. References: every JSON Lines file of the domain (``--domain``, default the
cards domain: corpus, scope data, every ask set) and each ``--also`` file or folder (the
blind sets kept outside the package; a ``.json`` file gives every ``"text"`` string in it,
and every ``"parts"`` list joined, at any depth: a voice set's ``manifest.json``, the
voice app's turn files).

    python scripts/asks_near_duplicates.py NEW.jsonl OUT.jsonl --also eval/asks-eval11 \\
        --also eval/asks-eval12
    python scripts/asks_near_duplicates.py NEW.jsonl OUT.jsonl \\
        --domain src/rtgate/domains/telecom --also eval/calls-eval4 \\
        --also eval/voice-natural8/manifest.json

Prints what was kept and dropped per kind. numpy-free, about a minute for 400 asks.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from rtgate.domains.loader import DATA_DIR, json_lines
from rtgate.tiers.textnorm import lang_of, normalize


def grams(text: str) -> frozenset[str]:
    t = normalize(text)
    return frozenset(t[i : i + 3] for i in range(max(1, len(t) - 2)))


def _strings(node: Any) -> list[str]:
    """Every ``"text"`` string under ``node`` (a parsed JSON document), and every
    ``"parts"`` list of strings joined (a voice turn spoken in parts)."""
    if isinstance(node, dict):
        own = [node["text"]] if isinstance(node.get("text"), str) else []
        parts = node.get("parts")
        if isinstance(parts, list) and parts and all(isinstance(x, str) for x in parts):
            own.append("".join(parts) if lang_of("".join(parts)) == "zh" else " ".join(parts))
        return own + [t for v in node.values() for t in _strings(v)]
    if isinstance(node, list):
        return [t for v in node for t in _strings(v)]
    return []


def texts(path: Path) -> list[str]:
    if path.suffix == ".json":
        return _strings(json.loads(path.read_text(encoding="utf-8")))
    files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
    return [row["text"] for f in files for _, row in json_lines(f, "asks")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("new", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--also", type=Path, action="append", default=[])
    ap.add_argument("--domain", type=Path, default=DATA_DIR)
    ap.add_argument("--bar", type=float, default=0.5)
    args = ap.parse_args()

    refs = [t for p in [args.domain, *args.also] for t in texts(p)]
    seen_norm = {normalize(t) for t in refs}
    ref_grams = [grams(t) for t in refs]
    index: dict[str, set[int]] = {}
    for i, g in enumerate(ref_grams):
        for x in g:
            index.setdefault(x, set()).add(i)

    kept: list[str] = []
    tally: Counter[tuple[str, str]] = Counter()
    for line in args.new.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        ask = json.loads(line)
        g = grams(ask["text"])
        near = normalize(ask["text"]) in seen_norm
        if not near:
            hits: Counter[int] = Counter(i for x in g for i in index.get(x, ()))
            near = any(n / len(g | ref_grams[i]) >= args.bar for i, n in hits.items())
        tally[(ask["kind"], "dropped" if near else "kept")] += 1
        if near:
            continue
        kept.append(line)
        i = len(ref_grams)  # an earlier kept line of the set is a reference too
        ref_grams.append(g)
        seen_norm.add(normalize(ask["text"]))
        for x in g:
            index.setdefault(x, set()).add(i)
    args.out.write_text("\n".join(kept) + "\n", encoding="utf-8")
    for kind in ("simple", "multi", "ood"):
        print(f"{kind}: kept {tally[(kind, 'kept')]}, dropped {tally[(kind, 'dropped')]}")


if __name__ == "__main__":
    main()
