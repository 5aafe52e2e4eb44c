"""95% intervals of our results and how tables and cards show them: Student-t over trials, Wilson score over the items
of one accuracy."""

import math
import statistics

from .extras import needs


def _stats():
    """`scipy.stats`, imported when an interval is computed: scipy is the `eval` extra's, and modules that merely
    import this one (the BLiMP report, the scorecard) load without it."""
    with needs("eval", "a 95% interval (scipy.stats)"):
        from scipy import stats
    return stats


def confidence_interval(values: list[float]) -> tuple[float, float | None]:
    """Mean and half-width of the two-sided 95% Student-t interval over `values` (`scipy.stats.t` with n - 1
    degrees of freedom); the half-width is None for a single value, which has no interval."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None
    return mean, float(_stats().t.ppf(0.975, len(values) - 1)) * statistics.stdev(values) / math.sqrt(len(values))


def mean_and_interval(mean: float, half_width: float | None) -> str:
    """A fraction's mean and 95% interval in percent, as tables print them: "56.0 +- 1.3", or "56.0 (one trial, no
    interval)" when there is no interval."""
    if half_width is None:
        return f"{100 * mean:.1f} (one trial, no interval)"
    return f"{100 * mean:.1f} +- {100 * half_width:.1f}"


def wilson_interval(correct: int, total: int) -> tuple[float, float]:
    """The two-sided 95% Wilson score interval (low, high) of an accuracy of `correct` right out of `total` items
    (`scipy.stats.binomtest(...).proportion_ci(method="wilson")`), as fractions. Unlike the normal approximation it
    stays inside [0, 1] and is not empty at 0 or `total` right."""
    if not 0 <= correct <= total or total < 1:
        raise ValueError(f"need 0 <= correct <= total and total >= 1, got {correct} of {total}")
    interval = _stats().binomtest(correct, total).proportion_ci(confidence_level=0.95, method="wilson")
    return float(interval.low), float(interval.high)


def percent_interval(low: float, high: float) -> str:
    """A fraction's 95% interval in percent, as tables print an asymmetric one: "[52.9, 97.8]"."""
    return f"[{100 * low:.1f}, {100 * high:.1f}]"
