"""Generic nuisances for training, and the detector's features relative to a station's own
running baseline (carried in the exported step's state)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rtgate.apps.guard import generic, outside
from rtgate.apps.guard.features import N_FEATURES, WindowFeatures
from rtgate.apps.guard.generic import KINDS, add_nuisances
from rtgate.apps.guard.simulate import RATE, make_set


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_nuisance_is_finite_audible_and_seeded(kind: str) -> None:
    make = KINDS[kind]
    a = make(np.random.default_rng(3), 6 * RATE)
    b = make(np.random.default_rng(3), 6 * RATE)
    c = make(np.random.default_rng(4), 6 * RATE)
    assert a.shape == (6 * RATE,) and np.isfinite(a).all()
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert np.sqrt(np.mean(np.square(a))) > 0


def test_nuisances_keep_the_clip_truth_and_stay_below_its_level() -> None:
    clip = make_set(1, "train", seed=5, seconds=2.0, fault_share=1.0)[0]
    noisy, kinds = add_nuisances(clip, np.random.default_rng(0))
    assert 1 <= len(kinds) <= 2 and set(kinds) <= set(KINDS)
    assert noisy.onset_s == clip.onset_s and noisy.fault == clip.fault
    assert np.array_equal(noisy.labels(), clip.labels())
    added = noisy.audio.astype(np.float64) - clip.audio
    rms = np.sqrt(np.mean(np.square(clip.audio.astype(np.float64))))
    assert 0 < np.sqrt(np.mean(np.square(added))) <= 2 * rms  # each at most 0 dB


def test_the_generic_generator_borrows_nothing_from_the_outside_set() -> None:
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(generic))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert outside.__name__ not in imported
    theirs = {id(v) for v in vars(outside).values() if callable(v)}
    assert not {id(v) for v in KINDS.values()} & theirs


def test_the_running_baseline_is_the_mean_then_an_exponential_average() -> None:
    pytest.importorskip("torch")
    from rtgate.apps.guard.network import running_baseline

    x = np.arange(12, dtype=np.float32)[:, None] * np.ones((1, 2), np.float32)
    b = running_baseline(x, alpha=0.25)
    np.testing.assert_allclose(b[:4, 0], [0.0, 0.5, 1.0, 1.5])  # the mean of what came
    assert b[5, 0] == pytest.approx(b[4, 0] + 0.25 * (5 - b[4, 0]))  # then 1 / alpha = 4


def test_the_exported_step_carries_the_baseline_as_training_computes_it(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from rtgate.apps.guard.detector import Detector
    from rtgate.apps.guard.network import DetectorNet, running_baseline
    from rtgate.apps.guard.train import calibration, export_onnx

    torch.manual_seed(0)
    net = DetectorNet(relative=True, alpha=1 / 20).eval()
    clip = make_set(1, "unseen", seed=2, seconds=2.0, fault_share=1.0)[0]
    x = WindowFeatures().frames(clip.audio)
    export_onnx(net, tmp_path / "r.onnx", {})
    det = Detector(tmp_path / "r.onnx")
    assert det.hidden == net.hidden + N_FEATURES + 1
    online = np.array([det.step(f[None])[0] for f in x])
    xt = torch.from_numpy(x)
    pad = torch.cat([xt[:1].expand(net.k - 1, -1), xt])[None]
    stacks = pad.unfold(1, net.k, 1).permute(0, 1, 3, 2)
    base = torch.from_numpy(running_baseline(x, net.alpha))[None]
    with torch.no_grad():
        logits, _ = net(stacks, None, base)
    a, b = calibration()
    offline = torch.sigmoid(a * logits[0] + b).numpy()
    np.testing.assert_allclose(online, offline, atol=2e-5)
    without = DetectorNet(relative=False)
    assert without.state_size == without.hidden  # the shipped shape is unchanged
