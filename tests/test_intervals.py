"""Means over trials and their 95% t-intervals (`elc_bert.intervals`), against Student-t quantiles from a table; the
Wilson score interval of an accuracy against the formula written out here."""

import math
import statistics

import pytest

from elc_bert.intervals import confidence_interval, mean_and_interval, percent_interval, wilson_interval

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


def naive_wilson(correct, total, z=1.959963984540054):  # z: the normal's 97.5% quantile, from a table
    """Wilson (1927): (p + z^2 / 2n +- z sqrt(p (1 - p) / n + z^2 / 4n^2)) / (1 + z^2 / n), p = correct / total."""
    p = correct / total
    centre = p + z * z / (2 * total)
    spread = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total))
    return (centre - spread) / (1 + z * z / total), (centre + spread) / (1 + z * z / total)


@pytest.mark.parametrize("correct, total", [(0, 1), (1, 1), (0, 10), (7, 10), (10, 10), (5, 6), (843, 1000)])
def test_wilson_interval_is_the_wilson_formula(correct, total):
    """At 0 and all right too, where the normal approximation's interval would be empty."""
    low, high = wilson_interval(correct, total)
    assert (low, high) == pytest.approx(naive_wilson(correct, total), abs=1e-12)
    assert 0.0 <= low <= correct / total <= high <= 1.0 and high - low > 0


def test_wilson_interval_known_values_and_refusals():
    """The score method's worked examples in Newcombe (1998), Statistics in Medicine 17: 857-872, to 4 decimals."""
    assert wilson_interval(81, 263) == pytest.approx((0.2553, 0.3662), abs=1e-4)
    assert wilson_interval(0, 20) == pytest.approx((0.0, 0.1611), abs=1e-4)
    assert wilson_interval(1, 29) == pytest.approx((0.0061, 0.1718), abs=1e-4)
    assert percent_interval(*wilson_interval(7, 10)) == "[39.7, 89.2]"
    for correct, total in ((3, 2), (-1, 5), (0, 0)):
        with pytest.raises(ValueError, match="correct <= total"):
            wilson_interval(correct, total)


def test_without_scipy_an_interval_names_the_extra_to_install(monkeypatch):
    """scipy is the `eval` extra's: imported when an interval is computed, and its absence named as that extra."""
    import sys

    from elc_bert import InputError

    monkeypatch.setitem(sys.modules, "scipy", None)  # `import scipy` now fails as if it were not installed
    for compute in (lambda: wilson_interval(1, 2), lambda: confidence_interval([0.1, 0.2])):
        with pytest.raises(InputError, match=r'needs scipy, not installed: pip install "elc_bert\[eval\]"'):
            compute()
    assert confidence_interval([0.3]) == (0.3, None)  # one trial needs no quantile
