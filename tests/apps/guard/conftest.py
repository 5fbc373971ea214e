"""Shared fixtures for the acoustic guard: clips, a subscriber, a private broker."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rtgate.apps.guard.simulate import Clip, draw_motor, make_clip
from tests.apps.guard.guard_helpers import (
    SHARED_BROKER,
    PrivateBroker,
    Subscriber,
    free_port,
    subscribe,
)


@pytest.fixture(autouse=True)
def no_user_enrolments(tmp_path_factory: pytest.TempPathFactory, monkeypatch: Any) -> Path:
    """Scans and runs look for enrolments in an empty directory of their own, never in the
    user's (``$RTGATE_GUARD_ENROLMENTS``)."""
    root = tmp_path_factory.mktemp("enrolments")
    monkeypatch.setenv("RTGATE_GUARD_ENROLMENTS", str(root))
    return root


@pytest.fixture(scope="session")
def unseen_motor() -> Any:
    """A motor from the population the detector was not trained on, fixed seed."""
    return draw_motor(np.random.default_rng(42), "unseen")


@pytest.fixture(scope="session")
def normal_clip(unseen_motor: Any) -> Clip:
    return make_clip(unseen_motor, 3.0, impact_rate_hz=1.0, seed=1)


@pytest.fixture(scope="session")
def fault_clip(unseen_motor: Any) -> Clip:
    return make_clip(unseen_motor, 3.0, fault="outer", onset_s=1.5, severity_db=12.0, seed=2)


@pytest.fixture
def topic_root() -> str:
    """A topic prefix no other test uses."""
    return f"rtgate-test/{uuid.uuid4().hex[:10]}"


@pytest.fixture
def shared_sub(topic_root: str) -> Iterator[Subscriber]:
    sub = subscribe(*SHARED_BROKER, f"{topic_root}/#")
    yield sub
    sub.client.disconnect()
    sub.client.loop_stop()


@pytest.fixture
def private_broker() -> Iterator[PrivateBroker]:
    if shutil.which("mosquitto") is None:
        pytest.skip("mosquitto is not installed")
    b = PrivateBroker(free_port())
    yield b
    b.stop()


@pytest.fixture
def tmp_db(tmp_path: Path) -> Path:
    return tmp_path / "orders.sqlite"
