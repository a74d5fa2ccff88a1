"""Theorem 2 (constant stepsize, eq. 20-24) and Remark 3 (nu, where sampling dominates).

Reference: "On Federated Averaging with Partial Participation under a General Variance
Condition", Section III and Appendix G. The extracted text lost square roots and exponents;
the forms below are the ones Appendix G's own computation requires (Lemma 9 with a, b, c
and (46)-(47)), and ``tests/test_theory_bounds.py`` re-derives them from a, b, c.

Notation: L smoothness, (C, D) ABC constants, sigma = sigma_f* (eq. 11), Delta = f(x_0) - f*,
n clients, S sampled per round, Q local steps, T rounds, I_S = (n - S)/(n - 1) (eq. 10).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from fedjax_abc._theory._grid import check_int, check_nonneg, check_positive
from fedjax_abc._theory._heterogeneity import sampling_factor

__all__ = [
    "SamplingRegime",
    "Theorem2LeadingTerms",
    "remark3_nu",
    "remark3_sampling_dominates",
    "theorem2_bound",
    "theorem2_leading_terms",
    "theorem2_stepsize",
    "theorem2_stepsize_limit",
]


class _P(NamedTuple):
    L: float
    C: float
    D: float
    sigma: float
    delta: float
    n: int
    S: int
    Q: int
    T: int
    I: float


def validated_params(L, C, D, sigma, delta, n, S, Q, T, delta_positive=True) -> _P:
    """Theorem 2's inputs checked (ValueError naming the bad one), with I_S."""
    n = check_int("number of clients (n)", n, 2)
    I_S = sampling_factor(n, S)
    return _P(check_positive("L", L), check_nonneg("C", C), check_nonneg("D", D),
              check_nonneg("sigma_f_star", sigma),
              (check_positive if delta_positive else check_nonneg)("delta_f", delta),
              n, int(S), check_int("local_steps (Q)", Q), check_int("rounds (T)", T), I_S)


def limit_terms(p: _P) -> tuple[float, float, float]:
    """The three terms of the minimum in (20): stability, sampling, cubic."""
    stab = 1.0 / (8.0 * p.Q * (p.L + p.C))
    denom = 4.0 * p.T * p.Q**2 * p.L * (2.0 * p.L * p.I + p.C / p.Q)
    samp = math.sqrt(p.S / denom) if denom > 0 else math.inf
    cubic = (1.0 / (24.0 * p.Q**3 * p.L**2 * (p.L + p.C) * p.T)) ** (1.0 / 3.0)
    return stab, samp, cubic


def theorem2_stepsize_limit(L, C, n, S, Q, T) -> float:
    """The largest constant stepsize Theorem 2 allows, the right-hand side of (20).

    alpha <= min{ 1/(8Q(L+C)), sqrt(S / (4 T Q^2 L (2 L I_S + C/Q))),
    (1/(24 Q^3 L^2 (L+C) T))^(1/3) }. (The last two make a T <= 1 in Appendix G, so
    (1 + a)^T <= e <= 3; the second is +inf when I_S = C = 0.)

    Args:
      L: smoothness (> 0). C: ABC constant (>= 0). n: clients (>= 2). S: sampled, in [1, n].
      Q: local steps (>= 1). T: rounds (>= 1).

    Returns:
      The limit as a float.

    Example:
      >>> import fedjax_abc as fa
      >>> round(fa.theory.theorem2_stepsize_limit(1.0, 1.0, 40, 4, 10, 50_000), 8)
      0.00032057

    Reference: eq. (20).
    """
    p = validated_params(L, C, 0.0, 0.0, 0.0, n, S, Q, T, delta_positive=False)
    return min(limit_terms(p))


def theorem2_stepsize(L, C, D, sigma_f_star, delta_f, n, S, Q, T) -> float:
    """The stepsize (22) of Theorem 2.

    alpha = 1 / ( sqrt(L Q T (D + 2 C sigma + 4 L Q I_S sigma) / (3 S Delta))
                 + (Q^3 L^2 T [6 (L + C) sigma + D/Q] / (3 Delta))^(1/3) + beta ),
    beta = 8 Q (L + C) + sqrt(4 T Q^2 L (2 L I_S + C/Q) / S) + (24 Q^3 L^2 (L + C) T)^(1/3) (23).
    Since 1/alpha >= beta, alpha satisfies (20).

    Args:
      L, C, D: smoothness and ABC constants. sigma_f_star: eq. (11). delta_f: f(x_0) - f* > 0.
      n, S, Q, T: clients, sampled clients, local steps, rounds.

    Returns:
      alpha as a float.

    Example:
      >>> import fedjax_abc as fa
      >>> a = fa.theory.theorem2_stepsize(1.0, 1.0, 0.0, 4.5, 5.0, 40, 4, 10, 50_000)
      >>> a <= fa.theory.theorem2_stepsize_limit(1.0, 1.0, 40, 4, 10, 50_000)
      True

    Reference: eq. (22)-(23).
    """
    p = validated_params(L, C, D, sigma_f_star, delta_f, n, S, Q, T)
    a = math.sqrt(p.L * p.Q * p.T * (p.D + 2 * p.C * p.sigma + 4 * p.L * p.Q * p.I * p.sigma)
                  / (3.0 * p.S * p.delta))
    Y = 6 * (p.L + p.C) * p.sigma + p.D / p.Q
    b = (p.Q**3 * p.L**2 * p.T * Y / (3.0 * p.delta)) ** (1 / 3)
    beta = (8.0 * p.Q * (p.L + p.C)
            + math.sqrt(4.0 * p.T * p.Q**2 * p.L * (2 * p.L * p.I + p.C / p.Q) / p.S)
            + (24.0 * p.Q**3 * p.L**2 * (p.L + p.C) * p.T) ** (1 / 3))
    return 1.0 / (a + b + beta)


def bound_terms(alpha, p: _P) -> dict:
    """The four terms of (21): initial gap, noise (alpha L (D + 2 C sigma)), sampling, drift."""
    return {
        "initial_gap": 12.0 * p.delta / (alpha * p.Q * p.T),
        "noise": 4.0 * alpha * p.L * (p.D + 2.0 * p.C * p.sigma) / p.S,
        "sampling": 16.0 * alpha * p.Q * p.L**2 * p.I * p.sigma / p.S,
        "drift": 8.0 * alpha**2 * p.Q**2 * p.L**2 * (6.0 * (p.L + p.C) * p.sigma + p.D / p.Q),
    }


def theorem2_bound(alpha, L, C, D, sigma_f_star, delta_f, n, S, Q, T, *,
                   check_stepsize: bool = True) -> float:
    """The right-hand side of (21), a bound on min_{t<T} E||grad f(x_t)||^2.

    12 Delta/(alpha Q T) + 4 alpha L (D + 2 C sigma)/S + 16 alpha Q L^2 I_S sigma / S
    + 8 alpha^2 Q^2 L^2 [6 (L + C) sigma + D/Q].

    Args:
      alpha: the constant stepsize (> 0).
      L, C, D, sigma_f_star, delta_f, n, S, Q, T: as in :func:`theorem2_stepsize`
        (delta_f >= 0 here).
      check_stepsize: raise ValueError if alpha violates (20), where the bound is not proved.

    Returns:
      The bound as a float.

    Example:
      >>> import fedjax_abc as fa
      >>> args = (1.0, 1.0, 0.0, 4.5, 5.0, 40, 4, 10, 50_000)
      >>> round(fa.theory.theorem2_bound(fa.theory.theorem2_stepsize(*args), *args), 4)
      0.7954

    Reference: eq. (21); Appendix G.
    """
    p = validated_params(L, C, D, sigma_f_star, delta_f, n, S, Q, T, delta_positive=False)
    alpha = check_positive("alpha", alpha)
    if check_stepsize:
        limit = min(limit_terms(p))
        if alpha > limit * (1 + 1e-12):
            raise ValueError(f"alpha ({alpha:g}) exceeds the limit (20) of Theorem 2 ({limit:g})")
    return float(sum(bound_terms(alpha, p).values()))


def explicit_rate(p: _P) -> float:
    """Appendix G's upper bound of (21) at the stepsize (22), with its constants ((46)-(47))."""
    X = p.D + 2 * p.C * p.sigma + 4 * p.L * p.Q * p.I * p.sigma
    Y = 6 * (p.L + p.C) * p.sigma + p.D / p.Q
    L, d, S, Q, T, C, I = p.L, p.delta, p.S, p.Q, p.T, p.C, p.I
    eq46 = (math.sqrt(L * d * X / (3 * S * Q * T)) + ((L * d) ** 2 * Y / (3 * T**2)) ** (1 / 3)
            + 8 * (L + C) * d / T + math.sqrt(4 * L * d * (2 * L * d * I + C * d / Q) / (S * T))
            + (24 * (L * d) ** 2 * d * (L + C) / T**2) ** (1 / 3))
    noise = 4.0 * math.sqrt(3 * L * d * X / (S * Q * T))
    drift = 8.0 * (3 * L * d / (T * Y)) ** (2 / 3) * Y if Y > 0 else 0.0
    return 12.0 * eq46 + noise + drift


class Theorem2LeadingTerms(NamedTuple):
    """The terms of (24) without their numerical constants.

    Attributes:
      noise: sqrt(L Delta (D + C sigma + C Delta) / (S Q T)) (stochastic gradient noise).
      sampling: L (Delta + sqrt(Delta sigma)) sqrt(I_S / (S T)) (client sampling; no Q).
      drift: ((L Delta)^2 [(L + C) sigma + D/Q] / T^2)^(1/3) (local drift).
      stability: (L + C) Delta / T (from alpha <= 1/(8Q(L+C))).
      stability_cubic: ((L Delta)^2 Delta (L + C) / T^2)^(1/3).
      total: their sum.
    """

    noise: float
    sampling: float
    drift: float
    stability: float
    stability_cubic: float
    total: float


def theorem2_leading_terms(L, C, D, sigma_f_star, delta_f, n, S, Q, T) -> Theorem2LeadingTerms:
    """The O-terms of (24), the rate of Theorem 2 at the stepsize (22), constants dropped.

    Appendix G's constants make (21) at (22) at most about 96 x ``total``.

    Args:
      L, C, D, sigma_f_star, delta_f, n, S, Q, T: as in :func:`theorem2_stepsize`.

    Returns:
      A :class:`Theorem2LeadingTerms`.

    Example:
      >>> import fedjax_abc as fa
      >>> t = fa.theory.theorem2_leading_terms(1.0, 1.0, 0.0, 4.5, 5.0, 40, 40, 10, 50_000)
      >>> t.sampling  # full participation: I_S = 0
      0.0

    Reference: eq. (24); Remarks 2-4.
    """
    p = validated_params(L, C, D, sigma_f_star, delta_f, n, S, Q, T, delta_positive=False)
    L, d, s, C, D = p.L, p.delta, p.sigma, p.C, p.D
    noise = math.sqrt(L * d * (D + C * s + C * d) / (p.S * p.Q * p.T))
    sampling = L * (d + math.sqrt(d * s)) * math.sqrt(p.I / (p.S * p.T))
    drift = ((L * d) ** 2 * ((L + C) * s + D / p.Q) / p.T**2) ** (1 / 3)
    stability = (L + C) * d / p.T
    cubic = ((L * d) ** 2 * d * (L + C) / p.T**2) ** (1 / 3)
    return Theorem2LeadingTerms(noise, sampling, drift, stability, cubic,
                                noise + sampling + drift + stability + cubic)


def remark3_nu(L, C, D, sigma_f_star, delta_f) -> float:
    """Remark 3's noise-to-dissimilarity ratio nu = (D + C (sigma + Delta)) / (L (sqrt Delta + sqrt sigma)^2).

    The sampling term of (24) dominates the noise term exactly when I_S >= nu / Q:
    L^2 (Delta + sqrt(Delta sigma))^2 I_S / (S T) >= L Delta (D + C sigma + C Delta)/(S Q T).

    Args:
      L (> 0), C, D, sigma_f_star (>= 0), delta_f (> 0).

    Returns:
      nu as a float.

    Example:
      >>> import fedjax_abc as fa
      >>> round(fa.theory.remark3_nu(1.0, 1.0, 0.0, 4.0, 1.0), 6)  # 5 / (1 + 2)^2
      0.555556

    Reference: Remark 3.
    """
    L, C, D = check_positive("L", L), check_nonneg("C", C), check_nonneg("D", D)
    s, d = check_nonneg("sigma_f_star", sigma_f_star), check_positive("delta_f", delta_f)
    return (D + C * (s + d)) / (L * (math.sqrt(d) + math.sqrt(s)) ** 2)


class SamplingRegime(NamedTuple):
    """Remark 3's range of S where the sampling-induced term dominates.

    Attributes:
      nu: the ratio of :func:`remark3_nu`.
      s_upper: n - nu (n - 1) / Q (a real number).
      s_values: the integers S with 1 <= S <= min(n, s_upper).
      empty: no such S (nu > Q).
    """

    nu: float
    s_upper: float
    s_values: tuple
    empty: bool


def remark3_sampling_dominates(nu, n, Q) -> SamplingRegime:
    """The range 1 <= S <= n - nu (n - 1)/Q where I_S >= nu/Q (sampling dominates noise).

    Args:
      nu: :func:`remark3_nu` (>= 0).
      n: clients (>= 2).
      Q: local steps (>= 1).

    Returns:
      A :class:`SamplingRegime`.

    Example:
      >>> import fedjax_abc as fa
      >>> r = fa.theory.remark3_sampling_dominates(2.0, n=40, Q=10)
      >>> r.s_upper, r.s_values[-1]
      (32.2, 32)

    Reference: Remark 3.
    """
    nu = check_nonneg("nu", nu)
    n = check_int("number of clients (n)", n, 2)
    Q = check_int("local_steps (Q)", Q)
    s_upper = n - nu * (n - 1) / Q
    top = min(n, math.floor(s_upper + 1e-12))
    values = tuple(range(1, top + 1))
    return SamplingRegime(nu, s_upper, values, not values)
