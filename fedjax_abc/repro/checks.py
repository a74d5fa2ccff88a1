"""Statistical checks of the paper's qualitative claims.

Every verdict the report prints comes from a function here applied to the JSON results:
differences in units of their standard error, orderings with significance, weighted fits.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import numpy as np

from fedjax_abc._engine import Z95


def z_diff(m1: float, se1: float, m2: float, se2: float) -> float:
    """(m1 - m2) / sqrt(se1^2 + se2^2) for two independent means."""
    den = math.sqrt((se1 or 0.0) ** 2 + (se2 or 0.0) ** 2)
    if den == 0:
        return math.copysign(math.inf, m1 - m2) if m1 != m2 else 0.0
    return (m1 - m2) / den


class Ordering(NamedTuple):
    """Whether means are ordered as claimed, pair by consecutive pair.

    Attributes:
      verdict: "yes" (every step in the claimed direction and significant at 95%),
        "direction only" (every step in the claimed direction, some not significant),
        "no" (some step reversed, none significantly), "contradicted" (some step
        significantly reversed).
      z: z-scores of the consecutive steps, signed so that > 0 is the claimed direction.
      significant: how many steps exceed 1.96 in the claimed direction.
      reversed: how many steps go the other way; reversed_significant: of them beyond 1.96.
    """

    verdict: str
    z: list
    significant: int
    reversed: int
    reversed_significant: int


def ordering(means: Sequence[float], ses: Sequence[float], increasing: bool) -> Ordering:
    """Checks that ``means`` increase (or decrease) along the sequence."""
    z = []
    for (m1, s1), (m2, s2) in zip(zip(means, ses), zip(means[1:], ses[1:])):
        step = z_diff(m2, s2, m1, s1)
        z.append(step if increasing else -step)
    sig = sum(v > Z95 for v in z)
    rev = sum(v < 0 for v in z)
    rev_sig = sum(v < -Z95 for v in z)
    if rev_sig:
        verdict = "contradicted"
    elif rev:
        verdict = "no"
    elif sig == len(z):
        verdict = "yes"
    else:
        verdict = "direction only"
    return Ordering(verdict, z, sig, rev, rev_sig)


class LogSlope(NamedTuple):
    slope: float
    stderr: float
    points: int


def log_slope(x: Sequence[float], y: Sequence[float], se: Sequence[float]) -> LogSlope:
    """Weighted least-squares slope of log y on log x (weights from se / y, delta method)."""
    x, y, se = (np.asarray(v, dtype=float) for v in (x, y, se))
    ok = (x > 0) & (y > 0) & np.isfinite(y) & np.isfinite(se)
    if ok.sum() < 3:
        return LogSlope(math.nan, math.nan, int(ok.sum()))
    lx, ly = np.log(x[ok]), np.log(y[ok])
    sly = np.maximum(se[ok] / y[ok], 1e-12)
    w = 1.0 / sly ** 2
    X = np.stack([np.ones_like(lx), lx], 1)
    cov = np.linalg.inv(X.T @ (w[:, None] * X))
    beta = cov @ (X.T @ (w * ly))
    resid = ly - X @ beta
    dof = ok.sum() - 2
    scale = max(1.0, float(np.sum(w * resid ** 2)) / dof)  # inflate if the fit is poor
    return LogSlope(float(beta[1]), float(math.sqrt(cov[1, 1] * scale)), int(ok.sum()))


class TrendFit(NamedTuple):
    """Weighted fit of y = a x^b for a fixed b: amplitude, chi^2, dof and its p-value."""

    exponent: float
    amplitude: float
    chi2: float
    dof: int
    p_value: float


def trend_fit(x: Sequence[float], y: Sequence[float], se: Sequence[float], exponent: float) -> TrendFit:
    """Best amplitude a of y ~ a x^exponent by weighted least squares, and its chi^2 test."""
    from scipy import stats

    x, y, se = (np.asarray(v, dtype=float) for v in (x, y, se))
    ok = np.isfinite(y) & np.isfinite(se) & (se > 0)
    x, y, se = x[ok], y[ok], se[ok]
    if len(y) < 2:
        return TrendFit(exponent, math.nan, math.nan, 0, math.nan)
    f = x ** exponent
    w = 1.0 / se ** 2
    a = float(np.sum(w * f * y) / np.sum(w * f * f))
    chi2 = float(np.sum(w * (y - a * f) ** 2))
    dof = int(len(y) - 1)
    return TrendFit(exponent, a, chi2, dof, float(stats.chi2.sf(chi2, dof)) if dof > 0 else math.nan)


def within_printed(ours: float, printed: float, decimals: int = 3) -> bool:
    """Whether ``ours`` rounds (half up) to the paper's printed value."""
    return abs(ours - printed) <= 0.5 * 10 ** -decimals + 1e-9


class LinearFit(NamedTuple):
    """Weighted least squares y ~ sum_k c_k f_k(x): coefficients, their standard errors,
    chi^2, dof and its p-value."""

    coef: list
    stderr: list
    chi2: float
    dof: int
    p_value: float


def linear_fit(basis: Sequence[Sequence[float]], y: Sequence[float], se: Sequence[float]) -> LinearFit:
    """Weighted fit of y on the columns ``basis`` (each a sequence over the points).

    Example:
      >>> import numpy as np
      >>> q = np.array([1.0, 2.0, 4.0, 8.0])
      >>> f = linear_fit([np.ones(4), 1 / q], 3 + 2 / q, np.ones(4))
      >>> [round(c, 9) for c in f.coef], round(f.chi2, 9), f.dof
      ([3.0, 2.0], 0.0, 2)
    """
    from scipy import stats

    X = np.stack([np.asarray(b, dtype=float) for b in basis], 1)
    y, se = np.asarray(y, dtype=float), np.asarray(se, dtype=float)
    ok = np.isfinite(y) & np.isfinite(se) & (se > 0)
    X, y, se = X[ok], y[ok], se[ok]
    k = X.shape[1]
    if len(y) <= k:
        return LinearFit([math.nan] * k, [math.nan] * k, math.nan, 0, math.nan)
    w = 1.0 / se ** 2
    cov = np.linalg.inv(X.T @ (w[:, None] * X))
    coef = cov @ (X.T @ (w * y))
    chi2 = float(np.sum(w * (y - X @ coef) ** 2))
    dof = int(len(y) - k)
    return LinearFit([float(c) for c in coef], [float(math.sqrt(v)) for v in np.diag(cov)],
                     chi2, dof, float(stats.chi2.sf(chi2, dof)))
