"""Audio end of turn: does the caller's *voice* sound finished? (Smart Turn v3.2, ONNX)

The words cannot tell "我家里的信号最近特别差" finished from the same words before "，能帮我
看看吗": the voice can (a clause that goes on keeps its pitch up and its energy steady; a
finished one falls). Smart Turn v3.2 (Daily, BSD-2 licence) is a small Whisper-encoder
classifier trained for exactly that: it reads the last 8 s of the caller's audio and gives
the probability that the turn is complete. Its CPU build, ``smart-turn-v3.2-cpu.onnx``
(8.7 MB), ships in the ``pipecat-ai`` wheel; the package is installed without its
dependencies and only *located* here, never imported (its ``__init__`` pulls loguru and
more), as for Silero.

Input contract (read off the wheel's analyser, ``local_smart_turn_v3.py``): 16 kHz mono
float audio from about 0.5 s before the speech started up to now, the last 8 s of it,
zero-padded at the *front* to exactly 128,000 samples; normalised to zero mean and unit
variance; Whisper's log-mel features of that (80 Slaney mel bands, 25 ms Hann windows every
10 ms, centred with reflection, the last frame dropped: 80 x 800), floored 8 decades under
their peak and mapped by (x + 4) / 4. Output: one sigmoid probability. :func:`log_mel` is
written here in numpy (no ``transformers``).
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

import numpy as np
import numpy.typing as npt

from rtgate.apps.voice.frames import RATE, Pcm
from rtgate.core.errors import ConfigError, InvalidRequest

__all__ = ["WINDOW", "SmartTurn", "fit_window", "log_mel", "mel_filters", "smart_turn_model_path"]

WINDOW = 8 * RATE  # samples the model reads
_N_FFT = 400  # 25 ms
_HOP = 160  # 10 ms
_N_MELS = 80
_MODEL = "smart-turn-v3.2-cpu.onnx"


def smart_turn_model_path() -> Path:
    """Path of ``smart-turn-v3.2-cpu.onnx`` inside the installed ``pipecat-ai`` package."""
    spec = importlib.util.find_spec("pipecat")  # locate, never import
    for loc in (spec.submodule_search_locations or []) if spec else []:
        path = Path(loc) / "audio" / "turn" / "smart_turn" / "data" / _MODEL
        if path.is_file():
            return path
    raise ConfigError(f"{_MODEL} not found: pip install --no-deps pipecat-ai==1.14.0")


def _slaney_mel(hz: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Hz to mel on the Slaney scale: linear under 1 kHz (3 mel per 200 Hz), log above."""
    step = np.log(6.4) / 27.0
    return np.where(
        hz < 1000.0, hz * 3.0 / 200.0, 15.0 + np.log(np.maximum(hz, 1e-9) / 1000.0) / step
    )


def _slaney_hz(mel: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    step = np.log(6.4) / 27.0
    return np.where(mel < 15.0, mel * 200.0 / 3.0, 1000.0 * np.exp(step * (mel - 15.0)))


@lru_cache(maxsize=1)
def mel_filters() -> npt.NDArray[np.float64]:
    """Triangular mel filters (80 x 201), each scaled to unit area (Slaney), 0-8 kHz."""
    edges = _slaney_hz(np.linspace(0.0, float(_slaney_mel(np.array(RATE / 2.0))), _N_MELS + 2))
    bins = np.linspace(0.0, RATE / 2.0, _N_FFT // 2 + 1)
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rise = (bins[None, :] - lo) / (mid - lo)
    fall = (hi - bins[None, :]) / (hi - mid)
    tri = np.clip(np.minimum(rise, fall), 0.0, None)
    return tri * (2.0 / (hi - lo))


def log_mel(audio: Pcm) -> npt.NDArray[np.float32]:
    """Smart Turn's input features (80 x 800) of exactly :data:`WINDOW` samples."""
    if audio.shape != (WINDOW,):
        raise InvalidRequest(f"log_mel reads {WINDOW} samples, got shape {audio.shape}")
    x = audio.astype(np.float32)
    x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)
    padded = np.pad(x.astype(np.float64), _N_FFT // 2, mode="reflect")
    n = 1 + (len(padded) - _N_FFT) // _HOP
    idx = np.arange(_N_FFT)[None, :] + _HOP * np.arange(n)[:, None]
    hann = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(_N_FFT) / _N_FFT)  # periodic
    power = np.abs(np.fft.rfft(padded[idx] * hann, axis=1)) ** 2  # (frames, 201)
    mel = np.log10(np.maximum(power @ mel_filters().T, 1e-10)).T[:, :-1]
    mel = np.maximum(mel, mel.max() - 8.0)
    out: npt.NDArray[np.float32] = ((mel + 4.0) / 4.0).astype(np.float32)
    return out


def fit_window(audio: Pcm) -> Pcm:
    """The last :data:`WINDOW` samples of ``audio``, zero-padded at the front."""
    a = np.asarray(audio, dtype=np.float32).reshape(-1)
    if len(a) >= WINDOW:
        return a[-WINDOW:]
    return np.concatenate([np.zeros(WINDOW - len(a), dtype=np.float32), a])


class SmartTurn:
    """Probability that the caller's turn is complete, from its audio (one ONNX call).

    Synchronous and single-threaded (one intra-op thread): callers run it off the event
    loop. ``p_end`` takes the turn's audio so far (from ~0.5 s before speech started)."""

    def __init__(self, path: Path | None = None, threads: int = 1) -> None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.path = path or smart_turn_model_path()
        self.session = ort.InferenceSession(
            str(self.path), sess_options=opts, providers=["CPUExecutionProvider"]
        )
        self._input = self.session.get_inputs()[0].name

    def p_end(self, audio: Pcm) -> float:
        """P(turn complete) for 16 kHz mono ``audio`` (its last 8 s are read)."""
        if len(audio) == 0:
            raise InvalidRequest("p_end needs some audio")
        feats = log_mel(fit_window(audio))[None]
        out = self.session.run(None, {self._input: feats})[0]
        return float(np.asarray(out).reshape(-1)[0])
