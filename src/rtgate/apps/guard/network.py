"""The detector network in torch (training only: needs the ``train`` extra).

Per 20 ms step the network sees the last ``K`` windows' features:

- the log-mel part ``(K, 40)`` goes through a conv spanning all K windows and 5 mel bands
  (a causal temporal conv: one output step), then a conv along mel and a max-pool;
- the band-envelope part ``(K, 6)`` (crest and periodicity of 3 bands) is flattened beside it;
- a dense layer embeds both, a GRU carries state across steps (streaming: its hidden state
  is an input and an output of the exported step), and a linear head reads the GRU output
  beside the embedding (a skip, so fresh evidence is not slowed down by the recurrence) and
  gives the fault logit.

The kind of fault (outer race, inner race, ball) is not learnt here: it depends on the
impact rate relative to the shaft speed, which 20 ms windows cannot resolve; the envelope
analysis in ``diagnose.py`` finds it from the clip after a stop.

Normalisation (per-feature mean and std of the training set) is part of the network, so the
ONNX file takes raw features.

``relative=True`` adds, beside each raw feature, the same feature relative to the stream's own
slow running baseline (``features - baseline``): what changed on this machine, not what its
spectrum is. The baseline is causal: ``b += a (x - b)`` per window with ``a = max(alpha,
1 / count)`` (the plain mean until ``1 / alpha`` windows have passed, then an exponential
average). In the exported step it is carried in the state beside the GRU's (``h`` is then
``hidden + N_FEATURES + 1`` wide: GRU, baseline, count), so the runtime (``Detector``) needs
no change: a zero state is a fresh stream, as before. ``running_baseline`` computes the same
thing for a whole sequence in training.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from rtgate.apps.guard.features import N_FEATURES, N_MELS

__all__ = ["DetectorNet", "StepWrapper", "running_baseline"]


def running_baseline(x: npt.NDArray[np.float32], alpha: float) -> npt.NDArray[np.float32]:
    """``(T, F)`` features -> ``(T, F)`` baseline after each window (the window included), as
    the exported step carries it from a zero state."""
    b = np.zeros(x.shape[1], np.float32)
    out = np.empty_like(x)
    a32 = np.float32(alpha)
    for t in range(len(x)):
        a = max(a32, np.float32(1.0) / np.float32(t + 1))
        b = b + a * (x[t] - b)
        out[t] = b
    return out


class DetectorNet(nn.Module):
    """CNN over a short stack of windows + GRU across windows."""

    mean: torch.Tensor
    std: torch.Tensor
    rel_std: torch.Tensor

    def __init__(
        self,
        k: int = 3,
        hidden: int = 32,
        c1: int = 12,
        c2: int = 16,
        relative: bool = False,
        alpha: float = 1 / 250,
    ) -> None:
        super().__init__()
        self.k, self.hidden, self.relative, self.alpha = k, hidden, relative, alpha
        self.register_buffer("mean", torch.zeros(N_FEATURES))
        self.register_buffer("std", torch.ones(N_FEATURES))
        self.register_buffer("rel_std", torch.ones(N_FEATURES))
        ch = 2 if relative else 1
        self.conv1 = nn.Conv2d(ch, c1, (k, 5), padding=(0, 2))
        self.conv2 = nn.Conv1d(c1, c2, 5, padding=2)
        self.pool = nn.MaxPool1d(4)
        n_crest = N_FEATURES - N_MELS
        self.embed = nn.Linear(c2 * (N_MELS // 4) + ch * k * n_crest, hidden)
        self.gru = nn.GRU(hidden, hidden, batch_first=True)
        self.head = nn.Linear(2 * hidden, 1)

    @property
    def state_size(self) -> int:
        """Width of the exported step's state: the GRU's, plus baseline and count."""
        return self.hidden + (N_FEATURES + 1 if self.relative else 0)

    def encode(self, stacks: torch.Tensor, base: torch.Tensor | None = None) -> torch.Tensor:
        """``(B, K, F)`` raw features (and ``(B, F)`` the stream's baseline, with
        ``relative``) -> ``(B, hidden)`` embeddings."""
        x = (stacks - self.mean) / self.std
        mel, crest = x[:, :, :N_MELS], x[:, :, N_MELS:]
        if self.relative:
            assert base is not None
            r = (stacks - base.unsqueeze(1)) / self.rel_std
            img = torch.stack([mel, r[:, :, :N_MELS]], dim=1)  # (B, 2, K, 40)
            crest = torch.cat([crest, r[:, :, N_MELS:]], dim=2)
        else:
            img = mel.unsqueeze(1)
        h = torch.relu(self.conv1(img)).squeeze(2)  # (B, c1, 40)
        h = self.pool(torch.relu(self.conv2(h))).flatten(1)  # (B, c2 * 10)
        return torch.relu(self.embed(torch.cat([h, crest.flatten(1)], dim=1)))

    def forward(
        self,
        stacks: torch.Tensor,
        h0: torch.Tensor | None = None,
        base: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(B, T, K, F)`` sequences of stacks and the state ``(B, hidden)`` before them
        (default: zero) -> ``(B, T)`` fault logits and the state after them. With
        ``relative``, ``base`` is ``(B, T, F)``: the baseline after each step's window."""
        b, t = stacks.shape[:2]
        flat = None if base is None else base.reshape(b * t, -1)
        e = self.encode(stacks.reshape(b * t, self.k, -1), flat).reshape(b, t, -1)
        y, h = self.gru(e, None if h0 is None else h0.unsqueeze(0))
        out: torch.Tensor = self.head(torch.cat([y, e], dim=2))[..., 0]
        return out, h[0]


class StepWrapper(nn.Module):
    """One streaming step, the shape that is exported to ONNX.

    Inputs ``stack (B, K, F)`` and ``h (B, state_size)``; outputs ``score (B,)`` (sigmoid of
    the fault logit) and ``h_out (B, state_size)``.
    """

    def __init__(self, net: DetectorNet) -> None:
        super().__init__()
        self.net = net

    def forward(self, stack: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        net = self.net
        gru_h, base = h[:, : net.hidden], None
        if net.relative:
            b0, count = h[:, net.hidden : -1], h[:, -1:] + 1.0
            a = torch.clamp(1.0 / torch.clamp(count, min=1.0), min=net.alpha)
            base = b0 + a * (stack[:, -1] - b0)
        e = net.encode(stack, base)
        y, h2 = net.gru(e.unsqueeze(1), gru_h.unsqueeze(0))
        logit = net.head(torch.cat([y[:, 0], e], dim=1))[:, 0]
        state = h2[0] if base is None else torch.cat([h2[0], base, count], dim=1)
        return torch.sigmoid(logit), state
