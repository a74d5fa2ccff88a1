"""(f, kappa)-robustness coefficients of aggregation rules, as published.

A rule F is (f, kappa)-robust (Allouah, Farhadkhani, Guerraoui, Gupta, Pinot and Stephan,
"Fixing by mixing: a recipe for optimal Byzantine ML under heterogeneity", AISTATS 2023,
Definition 2) when for any n vectors and any set S of n - f of them,

    ||F(x_1..x_n) - xbar_S||^2 <= kappa / |S| sum_{i in S} ||x_i - xbar_S||^2,

and no rule does better than kappa = f / (n - 2f) (their Proposition 6). The upper bounds
below are their Table 1 (Propositions 1-4): a rule's certified coefficient, not its
value on a given attack (:func:`fedjax_abc.theory.robustness` measures that).
"""

from __future__ import annotations

from typing import Optional

__all__ = ["kappa_geometric_median", "kappa_krum", "kappa_lower_bound", "kappa_mda",
           "kappa_median", "kappa_trimmed_mean", "kappa_with_nnm"]


def _ratio(n: int, f: int) -> Optional[float]:
    """f / (n - 2f), or None where n <= 2f (no rule is robust there)."""
    if n <= 2 * f:
        return None
    return f / (n - 2 * f)


def kappa_lower_bound(n: int, f: int) -> Optional[float]:
    """f / (n - 2f): no (f, kappa)-robust rule has a smaller kappa (Allouah et al. 2023,
    Proposition 6)."""
    return _ratio(n, f)


def kappa_trimmed_mean(n: int, f: int) -> Optional[float]:
    """Coordinate-wise trimmed mean: kappa = (6f / (n - 2f)) (1 + f / (n - 2f))
    (Allouah et al. 2023, Table 1)."""
    r = _ratio(n, f)
    return None if r is None else 6 * r * (1 + r)


def kappa_median(n: int, f: int) -> Optional[float]:
    """Coordinate-wise median: kappa = 4 (1 + f / (n - 2f))^2 (Allouah et al. 2023,
    Table 1)."""
    r = _ratio(n, f)
    return None if r is None else 4 * (1 + r) ** 2


def kappa_geometric_median(n: int, f: int) -> Optional[float]:
    """Geometric median: kappa = 4 (1 + f / (n - 2f))^2 (Allouah et al. 2023, Table 1)."""
    return kappa_median(n, f)


def kappa_krum(n: int, f: int) -> Optional[float]:
    """Krum: kappa = 6 (1 + f / (n - 2f)) (Allouah et al. 2023, Table 1)."""
    r = _ratio(n, f)
    return None if r is None else 6 * (1 + r)


def kappa_mda(n: int, f: int) -> Optional[float]:
    """Minimum diameter averaging: no coefficient of this form is published; None."""
    return None


def kappa_with_nnm(kappa: Optional[float], n: int, f: int) -> Optional[float]:
    """A rule of coefficient kappa after nearest-neighbour mixing:
    8 f / (n - f) (kappa + 1) (Allouah et al. 2023, Theorem 1)."""
    if kappa is None or n <= 2 * f:
        return None
    return 8 * f / (n - f) * (kappa + 1)
