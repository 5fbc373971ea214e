"""Smart Turn v3.2: our numpy features equal the wheel's, and the model reads the voice."""

from __future__ import annotations

import importlib.util
from types import ModuleType

import numpy as np
import pytest

from rtgate.apps.voice.bench import Clip
from rtgate.apps.voice.frames import RATE
from rtgate.apps.voice.smart_turn import (
    WINDOW,
    SmartTurn,
    fit_window,
    log_mel,
    mel_filters,
    smart_turn_model_path,
)
from rtgate.core.errors import ConfigError, InvalidRequest


def _reference() -> ModuleType:
    """The wheel's own feature code, loaded from its file (the package is never imported:
    its ``__init__`` needs dependencies installed without)."""
    path = smart_turn_model_path().parents[1] / "_whisper_features.py"
    spec = importlib.util.spec_from_file_location("smart_turn_reference", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def model() -> SmartTurn:
    return SmartTurn()


def test_features_match_the_wheels_extractor(clips: dict[str, Clip]) -> None:
    ref = _reference()
    rng = np.random.default_rng(3)
    for audio in (
        fit_window(clips["zh_plan"].pcm),
        fit_window(clips["en_refund"].pcm),
        (rng.standard_normal(WINDOW) * 0.05).astype(np.float32),
    ):
        ours = log_mel(audio)
        theirs = ref.compute_whisper_log_mel_features(audio, do_normalize=True)
        assert ours.shape == theirs.shape == (80, 800)
        assert np.max(np.abs(ours - theirs)) < 1e-4


def test_mel_filters_are_80_unit_area_triangles() -> None:
    f = mel_filters()
    assert f.shape == (80, 201)
    assert (f >= 0).all() and (f.max(axis=1) > 0).all()


def test_the_window_keeps_the_last_8_s_padded_at_the_front() -> None:
    short = np.ones(RATE, dtype=np.float32)
    w = fit_window(short)
    assert w.shape == (WINDOW,) and w[:-RATE].max() == 0.0 and w[-RATE:].min() == 1.0
    long = np.arange(WINDOW + 10, dtype=np.float32)
    assert fit_window(long)[0] == 10.0
    with pytest.raises(InvalidRequest):
        log_mel(short)


def test_a_finished_question_sounds_more_finished_than_a_trailing_head(
    model: SmartTurn, clips: dict[str, Clip]
) -> None:
    def p(name: str) -> float:
        c = clips[name]
        speech = c.pcm[: int((c.end + 0.2) * RATE)]
        return model.p_end(np.concatenate([np.zeros(RATE // 2, np.float32), speech]))

    for lang in ("zh", "en"):
        assert p(f"{lang}_tail") > 0.5 > p(f"{lang}_head")
    with pytest.raises(InvalidRequest):
        model.p_end(np.zeros(0, np.float32))


def test_a_missing_model_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match="pipecat-ai"):
        smart_turn_model_path()
