"""The voice section of `rtgate demo`: two simulated calls through the real pipeline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rtgate.apps.voice.bench import run
from rtgate.demo.runner import DemoSection

__all__ = ["demo"]


def _ms(d: dict[str, Any], key: str) -> str:
    v = d.get(key)
    return "–" if v is None else f"{v:.0f}"


def demo(out_dir: Path) -> DemoSection:
    r = run(calls=2)
    fa, bi = r["first_audio_ms"], r["bargein_stop_ms"]
    serial = r["serial_baseline"]["first_audio_ms"]
    rows = [
        ("calls / turns", f"{r['calls']} / {r.get('turns', '?')}"),
        ("end of speech → first audio p50 / p95", f"{_ms(fa, 'p50')} / {_ms(fa, 'p95')} ms"),
        ("serial ASR → LLM → TTS p50 / p95", f"{_ms(serial, 'p50')} / {_ms(serial, 'p95')} ms"),
        ("barge-in → agent silent p50 / p95", f"{_ms(bi, 'p50')} / {_ms(bi, 'p95')} ms"),
        ("agent cut in", f"{r['interruption_rate']:.0%} of turns"),
    ]
    return DemoSection(
        "Voice: first sound before the answer is ready",
        rows,
        notes="Real Silero VAD, faster-whisper, the local model and espeak-ng; "
        "the cloud follow-up is the local model behind the emulated 70B profile.",
    )
