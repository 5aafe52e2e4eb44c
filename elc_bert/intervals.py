"""Means over trials, their 95% t-intervals, and how result tables and cards show them."""

import math
import statistics

from scipy import stats


def confidence_interval(values: list[float]) -> tuple[float, float | None]:
    """Mean and half-width of the two-sided 95% Student-t interval over `values` (`scipy.stats.t` with n - 1
    degrees of freedom); the half-width is None for a single value, which has no interval."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None
    return mean, float(stats.t.ppf(0.975, len(values) - 1)) * statistics.stdev(values) / math.sqrt(len(values))


def mean_and_interval(mean: float, half_width: float | None) -> str:
    """A fraction's mean and 95% interval in percent, as tables print them: "56.0 +- 1.3", or "56.0 (one trial, no
    interval)" when there is no interval."""
    if half_width is None:
        return f"{100 * mean:.1f} (one trial, no interval)"
    return f"{100 * mean:.1f} +- {100 * half_width:.1f}"
