"""Means over trials and their 95% t-intervals (`elc_bert.intervals`), against Student-t quantiles from a table."""

import math
import statistics

import pytest

from elc_bert.intervals import confidence_interval, mean_and_interval

# two-sided 95% quantiles of Student's t, from a printed table, by degrees of freedom
T_TABLE = {1: 12.706, 2: 4.303, 4: 2.776, 10: 2.228, 11: 2.201, 20: 2.086, 30: 2.042}


@pytest.mark.parametrize("degrees", sorted(T_TABLE))
def test_the_interval_is_the_t_interval_at_any_number_of_trials(degrees):
    """Also beyond 10 degrees of freedom, where a normal 1.96 would be too narrow."""
    values = [0.5 + 0.01 * ((7 * i) % 11) for i in range(degrees + 1)]
    mean, half = confidence_interval(values)
    assert mean == pytest.approx(statistics.fmean(values))
    naive = T_TABLE[degrees] * statistics.stdev(values) / math.sqrt(len(values))
    assert half == pytest.approx(naive, rel=2e-4)  # the table's 3 decimals


def test_one_trial_has_no_interval_and_says_so():
    assert confidence_interval([0.028]) == (0.028, None)
    assert mean_and_interval(0.028, None) == "2.8 (one trial, no interval)"
    assert mean_and_interval(0.56, 0.013) == "56.0 +- 1.3"
