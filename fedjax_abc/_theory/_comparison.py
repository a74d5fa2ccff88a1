"""Remark 4 and Table I: the paper's rate against the BGD-based analysis of [10].

[10] (Yang, Fang, Liu, ICLR 2021) analyse FedAvg with partial participation under bounded
variance sigma^2 and (zeta^2, 0)-BGD (eq. 3 with psi = 0); with their stepsizes
(eta eta_L = sqrt(S) / (sqrt(T Q) L) in our notation) the sampling error enters their rate as
I_S zeta^2 sqrt(Q / (S T)): it grows with the local updates Q. The paper's sampling term
(24), L (Delta + sqrt(Delta sigma_f*)) sqrt(I_S / (S T)), carries no Q.

Reference: "On Federated Averaging with Partial Participation under a General Variance
Condition", Remark 4 and Table I; [10] H. Yang, M. Fang, J. Liu, "Achieving linear speedup
with partial worker participation in non-iid federated learning", ICLR 2021, Theorem 2.
Numerical and problem constants are dropped, as in Table I: compare shapes in Q, S, T,
and levels only up to such constants.
"""

from __future__ import annotations

import math

from fedjax_abc._theory._grid import check_int, check_nonneg
from fedjax_abc._theory._heterogeneity import sampling_factor

__all__ = ["table1_rate_abc", "table1_rate_bgd", "yang2021_sampling_term"]


def _shape(n, S, Q, T):
    n = check_int("number of clients (n)", n, 2)
    return n, int(S), check_int("local_steps (Q)", Q), check_int("rounds (T)", T), sampling_factor(n, S)


def yang2021_sampling_term(zeta_sq, n, S, Q, T) -> float:
    """The sampling-induced term of [10] (Remark 4, Table I): I_S zeta^2 sqrt(Q / (S T)).

    Args:
      zeta_sq: the (zeta^2, 0)-BGD constant: sup_x (1/n) sum_i ||grad f_i(x) - grad f(x)||^2
        (``bgd_sum(...).max_dissimilarity``); >= 0.
      n, S, Q, T: clients, sampled clients, local steps, rounds.

    Returns:
      The term as a float (0 under full participation).

    Example:
      >>> import fedjax_abc as fa
      >>> round(fa.theory.yang2021_sampling_term(2.0, n=41, S=5, Q=4, T=5), 12)  # 0.9 * 2 * 0.4
      0.72

    Reference: Remark 4; Table I; [10], Theorem 2.
    """
    n, S, Q, T, I_S = _shape(n, S, Q, T)
    return I_S * check_nonneg("zeta_sq", zeta_sq) * math.sqrt(Q / (S * T))


def table1_rate_bgd(sigma_sq, zeta_sq, n, S, Q, T) -> float:
    """Table I's rate of [10]: (1 + sigma^2) / sqrt(S Q T) + I_S zeta^2 sqrt(Q / (S T)).

    Bounded variance sigma^2 and (zeta^2, 0)-BGD; for S = n it is [10]'s full-participation
    rate (1 + sigma^2) / sqrt(n Q T).

    Example:
      >>> import fedjax_abc as fa
      >>> round(fa.theory.table1_rate_bgd(3.0, 2.0, n=41, S=5, Q=4, T=5), 12)  # 0.4 + 0.72
      1.12

    Reference: Table I ([10], partial participation); Remark 4.
    """
    n, S, Q, T, I_S = _shape(n, S, Q, T)
    noise = (1.0 + check_nonneg("sigma_sq", sigma_sq)) / math.sqrt(S * Q * T)
    return noise + yang2021_sampling_term(zeta_sq, n, S, Q, T)


def table1_rate_abc(C, D, sigma_f_star, n, S, Q, T) -> float:
    """Table I's rate of this work: sqrt((D + C sigma_f* + C) / (S Q T)) + sqrt((1 + sigma_f*) I_S / (S T)).

    The leading terms of (24) with L, Delta_f and numerical constants dropped (Table I's
    convention); no BGD constant, and no Q in the sampling term.

    Example:
      >>> import fedjax_abc as fa
      >>> round(fa.theory.table1_rate_abc(1.0, 0.5, 1.5, n=41, S=5, Q=4, T=5), 6)
      0.473205

    Reference: Table I (this work); eq. (24).
    """
    n, S, Q, T, I_S = _shape(n, S, Q, T)
    C, D, s = check_nonneg("C", C), check_nonneg("D", D), check_nonneg("sigma_f_star", sigma_f_star)
    return math.sqrt((D + C * s + C) / (S * Q * T)) + math.sqrt((1.0 + s) * I_S / (S * T))
