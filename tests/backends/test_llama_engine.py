"""The engine's scoring against a plain reference: each token's log-probability read after
evaluating its whole context from scratch."""

from __future__ import annotations

from typing import Any

import llama_cpp
import numpy as np
import pytest

from rtgate.backends._llama_engine import LlamaEngine
from rtgate.models.locate import locate_model

pytestmark = pytest.mark.slow


def reference(engine: LlamaEngine, prefix: str, cand: str) -> float:
    base, full = engine.tokenize(prefix), engine.tokenize(prefix + cand)
    k = next((i for i, (a, b) in enumerate(zip(base, full, strict=False)) if a != b), len(base))
    llm, total = engine.llm, 0.0
    for j in range(max(1, k), len(full)):
        llm.reset()  # type: ignore[no-untyped-call]
        llm._ctx.kv_cache_clear()  # type: ignore[no-untyped-call]
        llm.eval(full[:j])
        ptr: Any = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
        row = np.ctypeslib.as_array(ptr, shape=(engine.n_vocab,)).astype(np.float64)
        row -= row.max()
        total += float(row[full[j]] - np.log(np.exp(row).sum()))
    return total


def test_scores_match_evaluation_from_scratch() -> None:
    engine = LlamaEngine(locate_model("smollm2"), n_ctx=512, n_threads=2)
    try:
        prefix = "The capital of France is"
        # one-token candidates share one evaluation; longer ones take their own
        cands = [" Paris", " London", ".", " a city of light", " Paris, of course"]
        got = engine.score(prefix, cands, lambda: False)
        want = [reference(engine, prefix, c) for c in cands]
        assert got == pytest.approx(want, abs=2e-2)
        assert got[0] > got[1]
        # the cache left behind by a reference run or another prefix does not change scores
        assert engine.score(prefix, cands[::-1], lambda: False) == pytest.approx(
            got[::-1], abs=2e-2
        )
    finally:
        engine.close()
