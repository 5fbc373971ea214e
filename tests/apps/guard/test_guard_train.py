from __future__ import annotations

from pathlib import Path

import pytest

from rtgate.apps.guard.audio import write_wav
from rtgate.apps.guard.detector import Detector, default_model_path
from rtgate.apps.guard.evaluate import evaluate, roc_auc
from rtgate.apps.guard.simulate import make_set

pytest.importorskip("torch")
pytest.importorskip("onnx")

pytestmark = pytest.mark.slow


def test_training_is_reproducible_and_reads_a_mimii_folder(tmp_path: Path) -> None:
    from rtgate.apps.guard.train import TrainConfig, train

    for i, c in enumerate(make_set(2, "train", seed=9, seconds=1.0, fault_share=0.5)):
        label = "abnormal" if c.fault else "normal"
        write_wav(tmp_path / "plant" / "pump" / "id_00" / label / f"{i}.wav", c.audio)
    cfg = TrainConfig(
        n_clips=6, seconds=1.0, epochs=2, batch=4, eval_clips=4, data_dir=str(tmp_path / "plant")
    )
    a = train(cfg, tmp_path / "a.onnx", log=lambda s: None)
    b = train(cfg, tmp_path / "b.onnx", log=lambda s: None)
    assert (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()
    assert a["window_auc"] == b["window_auc"] and a["clips"] == 4
    det = Detector(tmp_path / "a.onnx")
    assert det.info["digest"] == cfg.digest()
    assert det.info["config"]["data_dir"] == str(tmp_path / "plant")  # type: ignore[index]


def test_shipped_model_is_small_and_was_evaluated_on_unseen_motors() -> None:
    path = default_model_path()
    assert path.stat().st_size < 300_000
    det = Detector()
    report = det.info["eval_unseen"]
    assert isinstance(report, dict)
    assert report["window_auc"] >= 0.99 and report["clip_auc"] >= 0.99


def test_shipped_model_on_fresh_unseen_motors() -> None:
    report = evaluate(n_clips=24, seed=4242, seconds=3.0)
    assert report["clip_auc"] >= 0.99
    assert report["window_auc"] >= 0.98
    assert report["false_stops"] == 0 and report["misses"] == 0


def test_roc_auc_counts_ties_half() -> None:
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)
    assert roc_auc([0.5, 0.5], [0, 1]) == pytest.approx(0.5)
