"""The detector's fast paths give the scores of the plain ones: 1-D operators run as 2-D,
all streams stepped in place, a warm-up that leaves no state."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rtgate.apps.guard.detector import Detector, default_model_path, lift_1d
from rtgate.apps.guard.features import N_FEATURES

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def _session(model: Any) -> Any:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _conv1d_model() -> Any:
    """x (N, 3, 20) -> Conv1d(3->4, k=5, pad 2) -> Relu -> MaxPool1d(2) -> (N, 4, 10)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 5)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[5], pads=[2, 2]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2], strides=[2]),
    ]
    graph = helper.make_graph(
        nodes,
        "conv1d",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 20])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 10])],
        [w, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_lifting_1d_operators_keeps_the_results() -> None:
    model = _conv1d_model()
    lifted = _conv1d_model()
    assert lift_1d(lifted) == 2
    ops = [n.op_type for n in lifted.graph.node]
    # one Unsqueeze in, one Squeeze out: the pair between Conv and MaxPool is gone
    assert ops == ["Unsqueeze", "Conv", "Relu", "MaxPool", "Squeeze"]
    x = np.random.default_rng(1).standard_normal((7, 3, 20)).astype(np.float32)
    want = _session(model).run(None, {"x": x})[0]
    got = _session(lifted).run(None, {"x": x})[0]
    assert got.shape == want.shape == (7, 4, 10)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_the_lifted_shipped_model_scores_like_the_file() -> None:
    det = Detector(n_streams=5)
    assert det.lifted >= 1
    plain = _session(onnx.load(str(default_model_path())))
    rng = np.random.default_rng(2)
    stack = rng.standard_normal((5, det.k, N_FEATURES)).astype(np.float32)
    h = rng.standard_normal((5, det.hidden)).astype(np.float32) * 0.3
    want = plain.run(None, {"stack": stack, "h": h})
    got = det._sess.run(None, {"stack": stack, "h": h})
    assert det.exact_logit and len(got) == len(want) + 1  # score, h and the score's logit
    for a, b in zip(got[:2], want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(1 / (1 + np.exp(-got[2])), got[0], rtol=1e-4, atol=1e-6)


def test_the_logit_keeps_rising_where_the_score_saturates() -> None:
    det = Detector(n_streams=3)
    rng = np.random.default_rng(4)
    f = (rng.standard_normal((3, N_FEATURES)) * np.array([[0.0], [3.0], [30.0]])).astype(np.float32)
    for _ in range(5):
        score = det.step(f)
    np.testing.assert_allclose(1 / (1 + np.exp(-det.last_logit)), score, rtol=1e-4, atol=1e-6)
    saturated = np.flatnonzero((score == 0.0) | (score == 1.0))
    assert len(saturated) and np.all(np.abs(det.last_logit[saturated]) > 16.7)
    before = det.last_logit.copy()
    det.step(f[1:], rows=[1, 2])  # a subset updates only its own rows
    assert det.last_logit[0] == before[0] and np.all(det.last_logit[1:] != before[1:])


def test_all_streams_in_place_equals_stepping_them_by_rows() -> None:
    n = 6
    fast, by_rows = Detector(n_streams=n), Detector(n_streams=n)
    by_rows.warm_up()  # and a warm-up changes no state
    rng = np.random.default_rng(3)
    every = np.arange(n)
    for t in range(12):
        f = rng.standard_normal((n, N_FEATURES)).astype(np.float32)
        if t == 5:
            fast.reset(2)
            by_rows.reset(2)
        if t % 4 == 3:  # a subset of stations in between
            rows = np.array([0, 4])
            np.testing.assert_array_equal(fast.step(f[rows], rows), by_rows.step(f[rows], rows))
        else:
            np.testing.assert_array_equal(fast.step(f), by_rows.step(f, every))


def test_all_streams_need_one_row_each() -> None:
    from rtgate.core.errors import InvalidRequest

    with pytest.raises(InvalidRequest):
        Detector(n_streams=3).step(np.zeros((2, N_FEATURES), np.float32))
