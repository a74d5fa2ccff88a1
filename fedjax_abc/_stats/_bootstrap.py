"""Bootstrap intervals over trials for skewed or heavy-tailed metrics: the mean, the median,
quantiles.

A final gap over trials is often skewed (a few trials far from x*), where the normal
interval of the mean is too short on one side and the mean itself may not be the quantity
of interest. The bootstrap resamples the n trials with replacement B times and reads the
statistic's law from the resamples theta*_1, ..., theta*_B:

- percentile: [theta*_(a/2), theta*_(1 - a/2)], the resamples' quantiles;
- basic: [2 theta - theta*_(1 - a/2), 2 theta - theta*_(a/2)];
- BCa (bias-corrected and accelerated): the resamples' quantiles at
  a_lo,hi = Phi(z0 + (z0 + z_q) / (1 - acc (z0 + z_q))), q = a/2 and 1 - a/2, with the bias
  correction z0 = Phi^-1(#{theta*_b < theta} / B) and the acceleration
  acc = sum_i (theta_. - theta_(i))^3 / (6 [sum_i (theta_. - theta_(i))^2]^(3/2)) from
  the jackknife values theta_(i) (trial i left out). Second-order accurate; the default.

References: B. Efron, "Better bootstrap confidence intervals", Journal of the American
Statistical Association 82 (1987) 171-185; B. Efron and R. Tibshirani, *An Introduction to
the Bootstrap* (1993), Chapters 13-14; A. C. Davison and D. V. Hinkley, *Bootstrap Methods
and their Application* (1997), Section 5.2.
"""

from __future__ import annotations

import math
import statistics
from typing import NamedTuple, Union

import numpy as np

from fedjax_abc._stats._intervals import Interval, check_level, finite_values, mean_interval
from fedjax_abc._stats._multiple import generator

__all__ = ["BOOTSTRAP_METHODS", "BootstrapInterval", "Description", "bca_levels",
           "bootstrap_interval", "describe", "jackknife_values"]

BOOTSTRAP_METHODS = ("bca", "percentile", "basic")


class BootstrapInterval(NamedTuple):
    """A statistic over trials with its bootstrap interval.

    Attributes:
      statistic: "mean", "median" or "q=0.9" (a quantile).
      estimate: the statistic of the trials themselves.
      ci_low, ci_high: the interval's ends.
      stderr: the standard deviation of the bootstrap resamples' statistic.
      level: its nominal coverage.
      method: "bca", "percentile" or "basic".
      draws: the number of resamples.
      trials: the number of trials.
    """

    statistic: str
    estimate: float
    ci_low: float
    ci_high: float
    stderr: float
    level: float
    method: str
    draws: int
    trials: int


def _statistic(statistic: Union[str, float]) -> tuple[str, float]:
    """(label, quantile q): the mean as q = NaN, the median as q = 0.5."""
    if statistic == "mean":
        return "mean", math.nan
    if statistic == "median":
        return "median", 0.5
    if isinstance(statistic, (float, np.floating)) and 0.0 < float(statistic) < 1.0:
        return f"q={float(statistic):g}", float(statistic)
    raise ValueError(f"statistic ({statistic!r}) must be 'mean', 'median' or a quantile "
                     "level in (0, 1)")


def _apply(values: np.ndarray, q: float) -> np.ndarray:
    """The statistic along the last axis: the mean (q NaN) or the q-quantile (NumPy's
    default, linear interpolation)."""
    return values.mean(axis=-1) if math.isnan(q) else np.quantile(values, q, axis=-1)


def jackknife_values(values: np.ndarray, q: float) -> np.ndarray:
    """theta_(i), the statistic with trial i left out, for every i: the mean in closed form,
    a quantile from the sorted trials (without forming the n samples of n - 1)."""
    n = values.size
    if math.isnan(q):
        return (values.sum() - values) / (n - 1)
    s = np.sort(values)
    h = q * (n - 2)  # the position of the q-quantile among n - 1 sorted values
    lo = int(math.floor(h))
    frac = h - lo
    ranks = np.argsort(np.argsort(values, kind="stable"), kind="stable")  # i's place in s

    def without(k):  # the k-th sorted value once trial i (at place ranks[i]) is removed
        return s[np.minimum(k + (k >= ranks), n - 1)]

    hi = min(lo + 1, n - 2)
    return without(lo) + frac * (without(hi) - without(lo))


def bca_levels(boot: np.ndarray, estimate: float, jack: np.ndarray,
               level: float) -> tuple[float, float]:
    """The BCa interval's two quantile levels of the resamples (Efron 1987, Section 2):
    Phi(z0 + (z0 + z_q) / (1 - acc (z0 + z_q))) for q = a/2 and 1 - a/2."""
    nd = statistics.NormalDist()
    b = boot.size
    share = (np.count_nonzero(boot < estimate) + 0.5 * np.count_nonzero(boot == estimate)) / b
    share = min(max(share, 1.0 / (b + 1)), b / (b + 1.0))  # a finite z0 for a one-sided law
    z0 = nd.inv_cdf(share)
    dev = jack.mean() - jack
    denom = 6.0 * float((dev ** 2).sum()) ** 1.5
    acc = float((dev ** 3).sum()) / denom if denom > 0 else 0.0
    out = []
    for q in ((1.0 - level) / 2.0, 1.0 - (1.0 - level) / 2.0):
        zq = nd.inv_cdf(q)
        out.append(nd.cdf(z0 + (z0 + zq) / (1.0 - acc * (z0 + zq))))
    return out[0], out[1]


def bootstrap_interval(values, statistic: Union[str, float] = "mean", *, rng,
                       level: float = 0.95, method: str = "bca",
                       draws: int = 4000) -> BootstrapInterval:
    """A bootstrap interval over trials of the mean, the median or a quantile.

    Args:
      values: one finite number per trial (at least 3).
      statistic: "mean", "median", or a quantile level in (0, 1) such as 0.9.
      rng: a ``numpy.random.Generator`` (or an integer seed), the resampling's only source
        of randomness.
      level: the interval's nominal coverage.
      method: "bca" (bias-corrected and accelerated, the default), "percentile" or "basic".
      draws: B, the number of resamples.

    Returns:
      :class:`BootstrapInterval`.

    Example:
      >>> import numpy as np, fedjax_abc as fa
      >>> x = np.random.default_rng(0).lognormal(size=400)   # skewed: mean e^0.5 = 1.65
      >>> b = fa.stats.bootstrap_interval(x, rng=1)
      >>> round(b.estimate, 2), b.ci_low < 1.65 < b.ci_high
      (1.58, True)

    Reference: Efron (1987); Efron and Tibshirani (1993), Chapters 13-14.
    """
    level = check_level(level)
    if method not in BOOTSTRAP_METHODS:
        raise ValueError(f"method ({method!r}) must be one of {BOOTSTRAP_METHODS}")
    if isinstance(draws, bool) or not isinstance(draws, (int, np.integer)) or draws < 100:
        raise ValueError(f"draws ({draws!r}) must be an integer >= 100")
    label, q = _statistic(statistic)
    rng = generator(rng)
    a = finite_values(values, at_least=3)
    n = a.size
    estimate = float(_apply(a, q))
    chunk = max(1, min(draws, 2 ** 22 // n))
    parts, done = [], 0
    while done < draws:
        b = min(chunk, draws - done)
        parts.append(_apply(a[rng.integers(0, n, size=(b, n))], q))
        done += b
    boot = np.concatenate(parts)
    lo_q, hi_q = (1.0 - level) / 2.0, 1.0 - (1.0 - level) / 2.0
    if method == "bca":
        lo_q, hi_q = bca_levels(boot, estimate, jackknife_values(a, q), level)
    low, high = (float(v) for v in np.quantile(boot, [lo_q, hi_q]))
    if method == "basic":
        low, high = 2.0 * estimate - high, 2.0 * estimate - low
    return BootstrapInterval(label, estimate, low, high, float(boot.std(ddof=1)), level, method,
                             int(draws), n)


class Description(NamedTuple):
    """What :func:`describe` returns: a metric's summaries over trials, normal and bootstrap.

    Attributes:
      trials: the number of trials.
      normal: the mean with its normal interval (:class:`~fedjax_abc.stats.Interval`).
      mean: the mean with its bootstrap interval.
      median: the median with its bootstrap interval.
      quantiles: more quantiles, each with its bootstrap interval.
      skewness: the sample skewness, m3 / m2^(3/2) (0 for a symmetric law).
    """

    trials: int
    normal: Interval
    mean: BootstrapInterval
    median: BootstrapInterval
    quantiles: tuple[BootstrapInterval, ...]
    skewness: float

    def table(self) -> str:
        """One line per summary: the estimate and its interval."""
        n = self.normal
        lines = [f"{'statistic':<10} {'estimate':>11} {'interval':>27}  method",
                 f"{'mean':<10} {n.mean:11.4e} [{n.ci_low:11.4e}, {n.ci_high:11.4e}]  normal"]
        for b in (self.mean, self.median, *self.quantiles):
            lines.append(f"{b.statistic:<10} {b.estimate:11.4e} [{b.ci_low:11.4e}, "
                         f"{b.ci_high:11.4e}]  {b.method}")
        lines.append(f"{self.trials} trials, skewness {self.skewness:.2f}, "
                     f"{self.normal.level:.0%} intervals, {self.mean.draws} resamples")
        return "\n".join(lines)


def describe(values, *, rng, level: float = 0.95, quantiles=(0.1, 0.9), method: str = "bca",
             draws: int = 4000) -> Description:
    """A metric over trials summarised for a skewed or heavy-tailed law: the mean with its
    normal and bootstrap intervals, the median and ``quantiles`` with bootstrap intervals,
    and the skewness.

    Args:
      values: one finite number per trial (e.g. ``fa.stats.trial_values(res)``, without the
        diverged trials).
      rng: a ``numpy.random.Generator`` (or an integer seed).
      level, method, draws: as :func:`bootstrap_interval`.
      quantiles: quantile levels besides the median.

    Returns:
      :class:`Description` (its ``table()`` prints it).

    Example:
      >>> import numpy as np, fedjax_abc as fa
      >>> x = np.random.default_rng(0).lognormal(size=400)
      >>> d = fa.stats.describe(x, rng=1)
      >>> d.skewness > 1, [b.statistic for b in d.quantiles]
      (True, ['q=0.1', 'q=0.9'])

    Reference: Efron and Tibshirani (1993), Chapters 13-14.
    """
    rng = generator(rng)
    a = finite_values(values, at_least=3)
    dev = a - a.mean()
    m2 = float((dev ** 2).mean())
    skew = float((dev ** 3).mean()) / m2 ** 1.5 if m2 > 0 else 0.0
    kw = dict(rng=rng, level=level, method=method, draws=draws)
    return Description(a.size, mean_interval(a, level=level),
                       bootstrap_interval(a, "mean", **kw), bootstrap_interval(a, "median", **kw),
                       tuple(bootstrap_interval(a, float(q), **kw) for q in quantiles), skew)
