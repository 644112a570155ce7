"""Verdicts: the guarantee policy, Great Expectations validation, the results history, regressions and the gate."""
