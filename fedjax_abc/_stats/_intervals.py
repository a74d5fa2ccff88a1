"""The interval of a mean over trials: the normal and Student's t forms, and their p-values.

For n independent trials x_1, ..., x_n with sample mean m and sample standard deviation s
(divisor n - 1), the standard error is s / sqrt(n) and the two-sided interval at level
1 - a is m -/+ c s / sqrt(n), with c = z_{1 - a/2} (normal) or t_{1 - a/2, n - 1} (Student).
The normal form is what :class:`~fedjax_abc.Summary` reports; the t form is exact for
normal trials and matters below about 30 of them.

Reference: e.g. Casella and Berger, *Statistical Inference* (2nd ed., 2002), Section 9.2.
"""

from __future__ import annotations

import math
import statistics
from typing import NamedTuple

import numpy as np

from fedjax_abc._engine import Z95

__all__ = ["Interval", "METHODS", "check_level", "check_method", "finite_values", "mean_interval",
           "normal_quantile", "p_value", "t_quantile"]

METHODS = ("normal", "t")


class Interval(NamedTuple):
    """A mean over trials with its standard error and a two-sided interval.

    Attributes:
      mean: the sample mean.
      stderr: the sample standard deviation over sqrt(trials) (NaN for one trial).
      ci_low, ci_high: the interval's ends, ``mean -/+ half_width``.
      trials: how many trials it summarises.
      level: its nominal coverage (0.95 by default).
      method: "normal" (z quantile), "t" (Student's t with trials - 1 degrees of freedom),
        or, from :func:`~fedjax_abc.stats.run_until`, the stopping rule's name.
    """

    mean: float
    stderr: float
    ci_low: float
    ci_high: float
    trials: int
    level: float = 0.95
    method: str = "normal"

    @property
    def half_width(self) -> float:
        """Half the interval's width: ``mean +- half_width`` is the interval."""
        return (self.ci_high - self.ci_low) / 2


def check_level(level) -> float:
    """``level`` as a float in (0, 1), or a one-line ValueError."""
    if isinstance(level, bool) or not isinstance(level, (int, float, np.floating)) or \
            not 0.0 < float(level) < 1.0:
        raise ValueError(f"level ({level!r}) must be a number in (0, 1), e.g. 0.95")
    return float(level)


def check_method(method: str) -> str:
    """``method``, one of :data:`METHODS`, or a one-line ValueError."""
    if method not in METHODS:
        raise ValueError(f"method ({method!r}) must be one of {METHODS}")
    return method


def finite_values(values, name: str = "values", at_least: int = 2) -> np.ndarray:
    """``values`` as a 1-D float array of at least ``at_least`` finite numbers, or a one-line
    ValueError naming the argument."""
    try:
        a = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an array of numbers, one per trial") from None
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one number per trial), got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} has {int(np.count_nonzero(~np.isfinite(a)))} non-finite "
                         "entries: leave out diverged trials first")
    if a.size < at_least:
        raise ValueError(f"{name} needs at least {at_least} trials, got {a.size}")
    return a


def normal_quantile(p: float) -> float:
    """z_p, the standard normal p-quantile (``normal_quantile(0.975)`` = 1.95996...)."""
    if p == 0.975:
        return Z95  # the package's one copy, bit for bit
    return statistics.NormalDist().inv_cdf(p)


def t_quantile(p: float, df) -> np.ndarray:
    """t_{p, df}, Student's t p-quantile with ``df`` degrees of freedom (arrays broadcast)."""
    from scipy.special import stdtrit

    return stdtrit(np.asarray(df, dtype=np.float64), p)


def critical_value(level: float, trials, method: str):
    """c of the two-sided interval m -/+ c s / sqrt(n): z_{1 - a/2}, or t_{1 - a/2, n - 1}."""
    q = 1.0 - (1.0 - level) / 2.0
    return normal_quantile(q) if method == "normal" else t_quantile(q, np.asarray(trials) - 1)


def p_value(mean: float, stderr: float, trials: int, method: str = "normal") -> float:
    """The two-sided p-value of mean zero: 2 P(Z > |m / se|), Z standard normal or Student's t
    with trials - 1 degrees of freedom; 1 for a zero mean of zero spread, 0 for a non-zero
    mean of zero spread."""
    if not stderr > 0:
        return 1.0 if mean == 0 else 0.0
    z = abs(mean) / stderr
    if method == "normal":
        return math.erfc(z / math.sqrt(2.0))
    from scipy.special import stdtr

    return float(2.0 * stdtr(trials - 1, -z))


def mean_interval(values, *, level: float = 0.95, method: str = "normal") -> Interval:
    """The mean over trials of ``values`` with its standard error and two-sided interval.

    mean -/+ c s / sqrt(n), c = z_{1 - a/2} (``method="normal"``) or t_{1 - a/2, n - 1}
    (``method="t"``), a = 1 - level.

    Args:
      values: one finite number per trial (a 1-D array of at least 2).
      level: the interval's nominal coverage.
      method: "normal" or "t".

    Returns:
      :class:`Interval`.

    Example:
      >>> import fedjax_abc as fa
      >>> iv = fa.stats.mean_interval([1.0, 2.0, 2.0], method="t")
      >>> round(iv.mean, 4), round(iv.stderr, 4), round(iv.half_width, 4)
      (1.6667, 0.3333, 1.4342)

    Reference: Casella and Berger, *Statistical Inference* (2002), Section 9.2.
    """
    level, method = check_level(level), check_method(method)
    a = finite_values(values)
    n = a.size
    mean = float(a.mean())
    se = float(a.std(ddof=1) / math.sqrt(n))
    half = float(critical_value(level, n, method) * se)
    return Interval(mean, se, mean - half, mean + half, n, level, method)
