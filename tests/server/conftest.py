from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _no_router_discovery(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Server tests exercise the server alone: installed apps' routers (autocomplete…) are
    tested in their own suites, and loading them here would only slow every app start."""
    monkeypatch.setenv("RTGATE_SERVER_DISCOVER_ROUTERS", "false")
    yield
