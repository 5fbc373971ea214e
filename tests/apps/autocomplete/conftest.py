from __future__ import annotations

import pytest
from ac_helpers import GatedCloud

from rtgate.apps.autocomplete.engine import build_reader
from rtgate.apps.autocomplete.tiers import BackgroundOnly, Reader


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
