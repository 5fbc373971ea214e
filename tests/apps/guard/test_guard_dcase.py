"""The DCASE 2020 autoencoder baseline: its input and that it scores a fault above normal."""

from __future__ import annotations

import numpy as np
import pytest

from rtgate.apps.guard.simulate import RATE, draw_motor, make_clip

pytest.importorskip("torch")


def test_vectors_are_five_stacked_frames_of_128_mels() -> None:
    from rtgate.apps.guard.dcase import logmel_vectors

    rng = np.random.default_rng(0)
    audio = (0.1 * rng.standard_normal(2 * RATE)).astype(np.float32)
    v = logmel_vectors(audio)
    frames = 1 + 2 * RATE // 512
    assert v.shape == (frames - 4, 640)
    np.testing.assert_array_equal(v[1, :512], v[0, 128:])  # the stack slides one frame
    assert logmel_vectors(audio[:1000]).shape == (0, 640)


def test_a_loud_fault_reconstructs_worse_than_the_healthy_motor() -> None:
    from rtgate.apps.guard.dcase import Dcase2020, DcaseConfig

    motor = draw_motor(np.random.default_rng(11), "train")
    healthy = [make_clip(motor, 3.0, seed=s, impact_rate_hz=0.0).audio for s in range(8)]
    model = Dcase2020(DcaseConfig(epochs=30, batch=64))
    model.fit(healthy)
    assert model.history[-1]["loss"] < model.history[0]["loss"]
    assert model.healthy_p99 is not None
    normal = make_clip(motor, 3.0, seed=100, impact_rate_hz=0.0).audio
    faulty = make_clip(motor, 3.0, fault="outer", severity_db=20.0, seed=100).audio
    s_normal, s_faulty = model.score([normal, faulty])
    assert s_faulty > s_normal
