"""The DCASE 2020 Task 2 autoencoder baseline, written here in torch, for side-by-side AUC.

What the challenge's baseline does, as its description states it (the code is ours):

- features: log-mel power spectrogram, 128 mel bands, 1024-point frames every 512 samples
  (Hann, centred), ``10 log10(mel + eps)``; five consecutive frames stacked: 640 numbers;
- model: a dense autoencoder 640 -> 128 -> 128 -> 128 -> 128 -> 8 -> 128 -> 128 -> 128 ->
  128 -> 640, batch normalisation and ReLU after every hidden layer, trained per machine
  type on healthy audio only (MSE, Adam at 1e-3, batch 512, 100 epochs, 10 % held out for
  validation);
- anomaly score of a clip: the reconstruction error (mean squared) averaged over its vectors.

Differences: the mel filters are this project's (HTK scale, unit area) rather than
librosa's Slaney filters, and there is one machine type, the training simulator's motors.
It has no stop decision, so it is compared by clip AUC only (and, for a threshold, the
99th percentile of its healthy validation clips' scores, reported beside it).

Needs the ``train`` extra (torch); the stop path never imports it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from rtgate.apps.guard.features import RATE, mel_filterbank

__all__ = ["Dcase2020", "DcaseConfig", "logmel_vectors"]

F32 = npt.NDArray[np.float32]
N_FFT, HOP, N_MELS, FRAMES = 1024, 512, 128, 5


@dataclass(frozen=True)
class DcaseConfig:
    """The baseline's training settings (the challenge's, but for the seed and threads)."""

    epochs: int = 100
    batch: int = 512
    lr: float = 1e-3
    validation: float = 0.1
    seed: int = 0
    threads: int = 1


_FB: F32 | None = None


def logmel_vectors(audio: npt.ArrayLike) -> F32:
    """``(n_frames - 4, 640)``: five stacked log-mel frames per vector (module doc)."""
    global _FB
    if _FB is None:
        _FB = mel_filterbank(N_MELS, N_FFT, RATE, fmin=0.0)
    x = np.asarray(audio, dtype=np.float64)
    x = np.pad(x, N_FFT // 2, mode="reflect")
    n = 1 + (len(x) - N_FFT) // HOP
    if n < FRAMES:
        return np.zeros((0, N_MELS * FRAMES), np.float32)
    idx = np.arange(N_FFT)[None, :] + HOP * np.arange(n)[:, None]
    power = np.abs(np.fft.rfft(x[idx] * np.hanning(N_FFT + 1)[:-1], axis=1)) ** 2
    mel = 10.0 * np.log10(power @ _FB.astype(np.float64) + 1e-10)
    vec = np.concatenate([mel[k : n - FRAMES + 1 + k] for k in range(FRAMES)], axis=1)
    return vec.astype(np.float32)


def _network() -> Any:
    from torch import nn

    def block(i: int, o: int) -> list[nn.Module]:
        return [nn.Linear(i, o), nn.BatchNorm1d(o), nn.ReLU()]

    dims = [N_MELS * FRAMES, 128, 128, 128, 128, 8, 128, 128, 128, 128]
    layers = [m for a, b in itertools.pairwise(dims) for m in block(a, b)]
    return nn.Sequential(*layers, nn.Linear(128, N_MELS * FRAMES))


class Dcase2020:
    """The autoencoder for one machine type: :meth:`fit` on healthy clips, then
    :meth:`score` clips (higher: more anomalous)."""

    def __init__(self, cfg: DcaseConfig = DcaseConfig()) -> None:
        self.cfg = cfg
        self.net: Any = None
        self.history: list[dict[str, float]] = []
        self.healthy_p99: float | None = None

    def fit(self, clips: Sequence[npt.ArrayLike], log: Any = None) -> None:
        """Train on healthy ``clips`` (16 kHz); the last ``validation`` share of the clips
        is held out (validation loss per epoch, and the healthy threshold)."""
        import torch

        torch.manual_seed(self.cfg.seed)
        torch.set_num_threads(self.cfg.threads)
        n_val = max(1, round(len(clips) * self.cfg.validation))
        train = np.concatenate([logmel_vectors(c) for c in clips[:-n_val]])
        val_clips = clips[-n_val:]
        val = np.concatenate([logmel_vectors(c) for c in val_clips])
        net = _network()
        opt = torch.optim.Adam(net.parameters(), lr=self.cfg.lr)
        rng = np.random.default_rng(self.cfg.seed)
        xt, xv = torch.from_numpy(train), torch.from_numpy(val)
        for epoch in range(self.cfg.epochs):
            net.train()
            order = torch.from_numpy(rng.permutation(len(xt)))
            total = 0.0
            for b in range(0, len(order), self.cfg.batch):
                x = xt[order[b : b + self.cfg.batch]]
                if len(x) < 2:  # batch normalisation needs two rows
                    continue
                loss = torch.mean((net(x) - x) ** 2)
                opt.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call]
                opt.step()
                total += float(loss.detach()) * len(x)
            net.eval()
            with torch.no_grad():
                v = float(torch.mean((net(xv) - xv) ** 2))
            self.history.append({"epoch": epoch + 1, "loss": total / len(xt), "val_loss": v})
            if log is not None and (epoch + 1) % 10 == 0:
                log(f"dcase2020 epoch {epoch + 1}: loss {total / len(xt):.2f} val {v:.2f}")
        self.net = net.eval()
        self.healthy_p99 = float(np.quantile(self.score(val_clips), 0.99))

    def score(self, clips: Sequence[npt.ArrayLike]) -> F32:
        """Each clip's mean reconstruction error."""
        import torch

        if self.net is None:
            raise RuntimeError("fit the baseline first")
        out = np.zeros(len(clips), np.float32)
        with torch.no_grad():
            for i, c in enumerate(clips):
                x = torch.from_numpy(logmel_vectors(c))
                out[i] = float(torch.mean((self.net(x) - x) ** 2)) if len(x) else np.nan
        return out
