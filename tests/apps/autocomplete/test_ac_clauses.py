"""Measuring the clause reader: the AUC it is reported with, and where the domain keeps it."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtgate.apps.autocomplete.clauses import auc
from rtgate.domains.loader import load_clause_reader


def test_auc_counts_pairs_and_ties_half() -> None:
    assert auc([0.9, 0.8, 0.1], [1, 1, 0]) == 1.0
    assert auc([0.1, 0.9], [1, 0]) == 0.0
    assert auc([0.5, 0.5, 0.9, 0.1], [1, 0, 1, 0]) == pytest.approx(0.875)
    assert auc([0.3, 0.4], [1, 1]) is None


def test_a_domain_without_a_clause_reader_has_none(tmp_path: Path) -> None:
    assert load_clause_reader(tmp_path) is None
