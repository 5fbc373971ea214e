from __future__ import annotations

from pathlib import Path

import pytest

from rtgate.apps.guard.demo import demo

pytestmark = pytest.mark.slow


def test_demo_stops_a_fault_and_plots_the_scores(tmp_path: Path) -> None:
    section = demo(tmp_path, seconds=5.0, llm=False)
    rows = dict(section.rows)
    assert rows["false stops / missed faults"] == "0 / 0"
    faulty, received = rows["faulty stations / stops received"].split(" / ")
    assert int(faulty) >= 1 and received == faulty
    assert rows["work orders (explainer)"] == f"{received} (rules)"
    assert section.ok
    (fig,) = section.figures
    assert fig.parent == tmp_path and fig.stat().st_size > 10_000
