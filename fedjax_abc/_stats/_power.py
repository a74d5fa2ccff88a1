"""How many trials a comparison needs: sample sizes from power, and the power of a count.

A paired comparison tests "mean difference 0" two-sided at level alpha from n per-trial
differences of standard deviation sd. To detect a true difference delta with probability
1 - beta (the power):

- normal approximation: n = ((z_{1 - alpha/2} + z_{1 - beta}) sd / delta)^2;
- Student's t: the same with t quantiles of n - 1 degrees of freedom, solved by iterating
  n <- ((t_{1 - alpha/2, n - 1} + t_{1 - beta, n - 1}) sd / delta)^2 from the normal n, then
  made the smallest n whose exact power (noncentral t) reaches 1 - beta.

The power of n trials: Phi(sqrt(n) |delta| / sd - z_{1 - alpha/2}) + Phi(-sqrt(n) |delta| /
sd - z_{1 - alpha/2}) (normal), or P(|T| > t_{1 - alpha/2, n - 1}) for T noncentral t with
n - 1 degrees of freedom and noncentrality sqrt(n) delta / sd (exact for normal differences).
sd comes from a pilot run: its own error moves n by about sd's relative error times two.

Reference: S.-C. Chow, J. Shao and H. Wang, *Sample Size Calculations in Clinical Research*
(2nd ed., 2008), Chapter 3 (one-sample and paired means); J. Cohen, *Statistical Power
Analysis for the Behavioral Sciences* (2nd ed., 1988), Chapter 2.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from fedjax_abc._stats._intervals import check_method, finite_values, normal_quantile, t_quantile

__all__ = ["TrialPlan", "achieved_power", "normal_trials", "t_trials", "trials_needed"]


def _check(sd, delta, alpha, power) -> tuple[float, float, float, float]:
    for name, value in (("sd", sd), ("delta", delta)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) \
                or not math.isfinite(value):
            raise ValueError(f"{name} ({value!r}) must be a finite number")
    if sd < 0:
        raise ValueError(f"sd ({sd!r}) must be >= 0")
    if delta == 0:
        raise ValueError("delta (0) must be a non-zero difference to detect")
    for name, value in (("alpha", alpha), ("power", power)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) or \
                not 0.0 < value < 1.0:
            raise ValueError(f"{name} ({value!r}) must be a number in (0, 1)")
    return float(sd), abs(float(delta)), float(alpha), float(power)


def normal_trials(sd: float, delta: float, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """n = ((z_{1 - alpha/2} + z_{power}) sd / delta)^2: the trials a two-sided normal test at
    level alpha needs to detect a mean difference delta with probability ``power`` (not
    rounded up).

    Example:
      >>> import fedjax_abc as fa
      >>> round(fa.stats.normal_trials(1.0, 0.5), 2)   # (1.96 + 0.84)^2 / 0.25
      31.4

    Reference: Chow, Shao and Wang (2008), Section 3.1.
    """
    sd, delta, alpha, power = _check(sd, delta, alpha, power)
    return ((normal_quantile(1.0 - alpha / 2.0) + normal_quantile(power)) * sd / delta) ** 2


def achieved_power(trials: int, sd: float, delta: float, *, alpha: float = 0.05,
                   method: str = "t") -> float:
    """The probability that a two-sided test at level alpha over ``trials`` paired trials
    rejects "no difference" when the true mean difference is delta.

    normal: Phi(sqrt(n) |delta| / sd - z) + Phi(-sqrt(n) |delta| / sd - z), z = z_{1 - alpha/2};
    t: P(|T| > t_{1 - alpha/2, n - 1}), T noncentral t (n - 1 degrees of freedom,
    noncentrality sqrt(n) delta / sd).

    Example:
      >>> import fedjax_abc as fa
      >>> round(fa.stats.achieved_power(34, 1.0, 0.5), 3)
      0.808

    Reference: Cohen (1988), Chapter 2.
    """
    sd, delta, alpha, _ = _check(sd, delta, alpha, 0.5)
    check_method(method)
    if isinstance(trials, bool) or not isinstance(trials, (int, np.integer)) or trials < 2:
        raise ValueError(f"trials ({trials!r}) must be an integer >= 2")
    if sd == 0:
        return 1.0
    shift = math.sqrt(trials) * delta / sd
    if method == "normal":
        z = normal_quantile(1.0 - alpha / 2.0)
        phi = lambda x: 0.5 * math.erfc(-x / math.sqrt(2.0))  # noqa: E731
        return phi(shift - z) + phi(-shift - z)
    from scipy.special import nctdtr

    tc = float(t_quantile(1.0 - alpha / 2.0, trials - 1))
    df = float(trials - 1)
    return float(1.0 - nctdtr(df, shift, tc) + nctdtr(df, shift, -tc))


def t_trials(sd: float, delta: float, *, alpha: float = 0.05, power: float = 0.8) -> int:
    """The smallest n whose two-sided paired t test at level alpha has power ``power`` at a
    mean difference delta (:func:`achieved_power` with ``method="t"``).

    Starts from the normal n and iterates n <- ceil(((t_{1 - alpha/2, n - 1} +
    t_{power, n - 1}) sd / delta)^2) until it repeats, then steps n to the smallest count
    whose exact (noncentral t) power reaches ``power``.

    Example:
      >>> import fedjax_abc as fa
      >>> fa.stats.t_trials(1.0, 0.5), fa.stats.t_trials(1.0, 1.0)
      (34, 10)

    Reference: Chow, Shao and Wang (2008), Section 3.1.
    """
    sd, delta, alpha, power = _check(sd, delta, alpha, power)
    if sd == 0:
        return 2
    n = max(2, math.ceil(normal_trials(sd, delta, alpha=alpha, power=power)))
    seen = set()
    while n not in seen:
        seen.add(n)
        t = t_quantile(1.0 - alpha / 2.0, n - 1) + t_quantile(power, n - 1)
        n = max(2, math.ceil((float(t) * sd / delta) ** 2))
    while achieved_power(n, sd, delta, alpha=alpha) < power:
        n += 1
    while n > 2 and achieved_power(n - 1, sd, delta, alpha=alpha) >= power:
        n -= 1
    return n


class TrialPlan(NamedTuple):
    """What :func:`trials_needed` returns.

    Attributes:
      trials: the trials a comparison needs.
      delta: the difference to detect.
      sd: the per-trial standard deviation of the pilot's differences.
      alpha, power: the test's level and the power asked for.
      method: "t" or "normal".
      pilot_trials: the pilot's number of trials.
      achieved_power: the power of ``trials`` at the pilot's sd (exact for normal
        differences with ``method="t"``).
    """

    trials: int
    delta: float
    sd: float
    alpha: float
    power: float
    method: str
    pilot_trials: int
    achieved_power: float

    def __str__(self) -> str:
        return (f"{self.trials} trials to detect a difference of {self.delta:.3g} at "
                f"{1 - self.alpha:.0%} with {self.power:.0%} power (per-trial sd "
                f"{self.sd:.3g} from a pilot of {self.pilot_trials}; {self.method})")


def trials_needed(pilot, delta: float, *, alpha: float = 0.05, power: float = 0.8,
                  method: str = "t") -> TrialPlan:
    """The trials needed to detect a mean difference ``delta`` at level ``alpha`` with power
    ``power``, from a pilot's per-trial paired differences.

    Args:
      pilot: the pilot's paired differences, one per trial (e.g.
        ``fa.stats.paired_values(a, b)`` without its NaNs), or a metric's values for a
        test against a fixed value.
      delta: the difference to detect (its sign does not matter), in the metric's units:
        a 1% difference of a baseline is ``0.01 * baseline_mean``.
      alpha: the two-sided test's level (0.05: the 95% interval excludes 0).
      power: 1 - beta.
      method: "t" (the t test's exact count, :func:`t_trials`) or "normal"
        (:func:`normal_trials` rounded up).

    Returns:
      :class:`TrialPlan`.

    Example:
      >>> import numpy as np, fedjax_abc as fa
      >>> pilot = np.random.default_rng(0).normal(0.1, 1.0, size=2000)
      >>> plan = fa.stats.trials_needed(pilot, 0.25)
      >>> 110 < plan.trials < 140, round(plan.achieved_power, 2)
      (True, 0.8)

    Reference: Chow, Shao and Wang (2008), Chapter 3.
    """
    check_method(method)
    a = finite_values(pilot, "pilot")
    sd = float(a.std(ddof=1))
    sd, delta_, alpha, power = _check(sd, delta, alpha, power)
    if method == "t":
        n = t_trials(sd, delta_, alpha=alpha, power=power)
    else:
        n = max(2, math.ceil(normal_trials(sd, delta_, alpha=alpha, power=power)))
    return TrialPlan(n, delta_, sd, alpha, power, method, a.size,
                     achieved_power(n, sd, delta_, alpha=alpha, method=method))
