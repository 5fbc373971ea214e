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
"""

from __future__ import annotations

import torch
from torch import nn

from rtgate.apps.guard.features import N_FEATURES, N_MELS

__all__ = ["DetectorNet", "StepWrapper"]


class DetectorNet(nn.Module):
    """CNN over a short stack of windows + GRU across windows."""

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, k: int = 3, hidden: int = 32, c1: int = 12, c2: int = 16) -> None:
        super().__init__()
        self.k, self.hidden = k, hidden
        self.register_buffer("mean", torch.zeros(N_FEATURES))
        self.register_buffer("std", torch.ones(N_FEATURES))
        self.conv1 = nn.Conv2d(1, c1, (k, 5), padding=(0, 2))
        self.conv2 = nn.Conv1d(c1, c2, 5, padding=2)
        self.pool = nn.MaxPool1d(4)
        n_crest = N_FEATURES - N_MELS
        self.embed = nn.Linear(c2 * (N_MELS // 4) + k * n_crest, hidden)
        self.gru = nn.GRU(hidden, hidden, batch_first=True)
        self.head = nn.Linear(2 * hidden, 1)

    def encode(self, stacks: torch.Tensor) -> torch.Tensor:
        """``(B, K, F)`` raw features -> ``(B, hidden)`` embeddings."""
        x = (stacks - self.mean) / self.std
        mel, crest = x[:, :, :N_MELS], x[:, :, N_MELS:]
        h = torch.relu(self.conv1(mel.unsqueeze(1))).squeeze(2)  # (B, c1, 40)
        h = self.pool(torch.relu(self.conv2(h))).flatten(1)  # (B, c2 * 10)
        return torch.relu(self.embed(torch.cat([h, crest.flatten(1)], dim=1)))

    def forward(
        self, stacks: torch.Tensor, h0: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(B, T, K, F)`` sequences of stacks and the state ``(B, hidden)`` before them
        (default: zero) -> ``(B, T)`` fault logits and the state after them."""
        b, t = stacks.shape[:2]
        e = self.encode(stacks.reshape(b * t, self.k, -1)).reshape(b, t, -1)
        y, h = self.gru(e, None if h0 is None else h0.unsqueeze(0))
        out: torch.Tensor = self.head(torch.cat([y, e], dim=2))[..., 0]
        return out, h[0]


class StepWrapper(nn.Module):
    """One streaming step, the shape that is exported to ONNX.

    Inputs ``stack (B, K, F)`` and ``h (B, hidden)``; outputs ``score (B,)`` (sigmoid of the
    fault logit) and ``h_out (B, hidden)``.
    """

    def __init__(self, net: DetectorNet) -> None:
        super().__init__()
        self.net = net

    def forward(self, stack: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        e = self.net.encode(stack)
        y, h2 = self.net.gru(e.unsqueeze(1), h.unsqueeze(0))
        logit = self.net.head(torch.cat([y[:, 0], e], dim=1))[:, 0]
        return torch.sigmoid(logit), h2[0]
