"""Scenario 1: as-you-type autocomplete for a bank's credit-card service (issue 5)."""
