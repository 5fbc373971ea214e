from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rtgate.apps.guard.audio import write_wav
from rtgate.apps.guard.detector import Detector, default_model_path
from rtgate.apps.guard.evaluate import evaluate, roc_auc
from rtgate.apps.guard.features import N_FEATURES
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
        n_clips=6,
        seconds=1.0,
        chunk_s=0.4,  # three chunks per sequence, the state carried between them
        epochs=2,
        batch=4,
        eval_clips=4,
        data_dir=str(tmp_path / "plant"),
    )
    a = train(cfg, tmp_path / "a.onnx", log=lambda s: None)
    b = train(cfg, tmp_path / "b.onnx", log=lambda s: None)
    assert (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()
    assert a["window_auc"] == b["window_auc"] and a["clips"] == 4
    det = Detector(tmp_path / "a.onnx")
    assert det.info["digest"] == cfg.digest()
    assert det.info["config"]["data_dir"] == str(tmp_path / "plant")  # type: ignore[index]


def test_a_sequence_in_chunks_with_the_state_carried_is_the_whole_sequence() -> None:
    import torch

    from rtgate.apps.guard.network import DetectorNet

    torch.manual_seed(0)
    net = DetectorNet().eval()
    stacks = torch.randn(2, 10, net.k, N_FEATURES)
    with torch.no_grad():
        whole, h_whole = net(stacks)
        first, h = net(stacks[:, :4])
        second, h = net(stacks[:, 4:], h)
    torch.testing.assert_close(torch.cat([first, second], dim=1), whole)
    torch.testing.assert_close(h, h_whole)


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
    levels = report["onset_to_stop_ms_by_level"]
    assert sum(b["n"] for b in levels.values()) == report["faulty_clips"]
    assert all(b["misses"] == 0 and b["p95"] >= b["p50"] > 0 for b in levels.values())
    strong = report["onset_to_stop_ms_-12dB_rms_up"]
    assert 0 < strong["n"] <= report["faulty_clips"] and strong["misses"] == 0


def test_roc_auc_counts_ties_half() -> None:
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)
    assert roc_auc([0.5, 0.5], [0, 1]) == pytest.approx(0.5)


def test_calibration_puts_the_operating_points_on_the_rule_defaults() -> None:
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from rtgate.apps.guard.rules import Rule
    from rtgate.apps.guard.train import OPERATING_POINTS, calibrate, calibration

    a, b = calibration()
    (r1, t1), (r2, t2) = OPERATING_POINTS
    assert (t1, t2) == (Rule().threshold, Rule().instant)
    logit = np.log(np.array([r1, r2, 0.5]) / (1 - np.array([r1, r2, 0.5])))
    graph = helper.make_graph(
        [helper.make_node("Sigmoid", ["logit"], ["score"])],
        "g",
        [helper.make_tensor_value_info("logit", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, [3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    calibrate(model, a, b)
    onnx.checker.check_model(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (score,) = sess.run(None, {"logit": logit.astype(np.float32)})
    assert score[:2] == pytest.approx([t1, t2], abs=1e-5)
    assert score[2] < 0.5  # monotonic, and below the operating point it only gets lower
    with pytest.raises(ValueError, match="Sigmoid"):
        calibrate(helper.make_model(helper.make_graph([], "empty", [], [])), a, b)
