"""The stop path's warm-up runs whole ticks and then leaves no trace: nothing published or
handed on, no cool-down, no recurrent state, no audio in the clips."""

from __future__ import annotations

import numpy as np

from rtgate.apps.guard.detector import Detector
from rtgate.apps.guard.events import StopEvent
from rtgate.apps.guard.features import HOP, WindowFeatures
from rtgate.apps.guard.pipeline import Guard
from rtgate.apps.guard.rules import Rule, Rules
from rtgate.apps.guard.simulate import Clip
from tests.apps.guard.guard_helpers import PinnedScore, RecordingSink


def test_warm_up_decides_nothing_that_leaves_the_guard() -> None:
    det, sink = PinnedScore(2, 1.0), RecordingSink()
    handed: list[object] = []
    rules = Rules(Rule(cooldown_s=3600.0))  # a stop during warm-up would mute the station
    guard = Guard(["A", "B"], rules, sink, detector=det, on_stop=handed.append)
    assert det.calls >= 8  # the warm-up ran whole ticks, each of which decided two stops
    assert sink.got == [] and handed == []

    window = np.full((2, HOP), 0.25, np.float32)
    stops: list[StopEvent] = guard.process(window, 100.0)
    assert [s.message.station for s in stops] == ["A", "B"]  # no cool-down was left behind
    assert [m.station for m in sink.got] == ["A", "B"]
    assert len(handed) == 2
    clip = stops[0].clip
    assert np.count_nonzero(clip) == HOP  # the ring holds this window only, not the noise
    assert np.all(clip[-HOP:] == np.float32(0.25))


def test_after_warm_up_scores_are_those_of_a_fresh_detector(fault_clip: Clip) -> None:
    guard = Guard(["C"], Rules(Rule(cooldown_s=3600.0)))
    fresh, wf = Detector(n_streams=1), WindowFeatures()
    n = len(fault_clip.audio) // HOP
    windows = fault_clip.audio[: n * HOP].reshape(n, 1, HOP)
    got, want = [], []
    for i, w in enumerate(windows):
        guard.process(w, (i + 1) * HOP / 16000)
        got.append(float(guard.last_scores[0]))
        want.append(float(fresh.step(wf(w))[0]))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    assert max(want) > 0.92  # the clip is a fault the default rule stops on
