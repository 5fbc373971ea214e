from __future__ import annotations

import pytest

from rtgate.apps.autocomplete.engine import build_reader
from rtgate.apps.autocomplete.tiers import BackgroundOnly, Reader
from tests.apps.autocomplete.ac_helpers import GatedCloud


@pytest.fixture(scope="session")
def reader() -> Reader:
    """The classifier and pool of the shipped domain, trained once for the session."""
    return build_reader()


@pytest.fixture
def cloud() -> GatedCloud:
    return GatedCloud()


@pytest.fixture
def gated(cloud: GatedCloud) -> BackgroundOnly:
    return BackgroundOnly(cloud)
