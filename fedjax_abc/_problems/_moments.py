"""Closed forms of one round's participation: the moments a sampler's theory is made of.

A sampler that knows its closed form returns a :class:`ParticipationMoments` from its
``participation_moments(n, round)`` (``fa.theory.inclusion_probabilities``,
``weight_moments`` and ``sampling_error`` read them); the library's samplers build theirs
from two families here: :func:`available_set` (S clients uniformly among those available,
each available independently with its own probability; a fixed set; full participation
and Bernoulli's every-available client) and :func:`multinomial` (S independent draws).
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

import numpy as np

from fedjax_abc._problems._args import check_count

__all__ = ["ParticipationMoments", "available_set", "mean_of", "multinomial", "rows_moments"]

# The pairwise recursion over independent availabilities holds (n, n, n + 1) numbers.
_MAX_HETEROGENEOUS = 128


class ParticipationMoments(NamedTuple):
    """One round's participation of n clients, in closed form.

    Attributes:
      pi: pi_i = P(client i takes part), shape (n,).
      pi2: pi_ij = P(i and j both take part), shape (n, n), diagonal pi_i.
      m1: E[M_i], the mean weight the round's aggregate gives client i, shape (n,).
      m2: E[M_i M_j], shape (n, n).
    """

    pi: np.ndarray
    pi2: np.ndarray
    m1: np.ndarray
    m2: np.ndarray


def mean_of(parts: Sequence[ParticipationMoments]) -> ParticipationMoments:
    """The moments of a round drawn uniformly from ``parts`` (a cycle's phases)."""
    return ParticipationMoments(*(np.mean([getattr(m, f) for m in parts], axis=0)
                                  for f in ParticipationMoments._fields))


def rows_moments(rows: np.ndarray, S: int, round: Optional[int]) -> ParticipationMoments:
    """S uniformly among the clients of row t mod P of a 0/1 (P, n) array of availability:
    row ``round`` mod P, or the mean over the rows (None: the long run)."""
    if round is not None:
        rows = rows[check_count("round", round, 0) % rows.shape[0]][None]
    return mean_of([available_set(r, S) for r in rows])


def _others(a: np.ndarray) -> np.ndarray:
    """D[i, j, b] = P(b of the clients other than i and j are available), independently.

    D[i, i] is the law of the count among the clients other than i.
    """
    n = a.size
    D = np.zeros((n, n, n + 1))
    D[:, :, 0] = 1.0
    eye = np.arange(n)
    for k in range(n):
        skip = (eye[:, None] == k) | (eye[None, :] == k)
        moved = D * (1 - a[k])
        moved[:, :, 1:] += D[:, :, :-1] * a[k]
        D = np.where(skip[:, :, None], D, moved)
    return D


def available_set(a, S: int) -> ParticipationMoments:
    """min(S, K) of the K available clients uniformly, weight 1 / min(S, K) each.

    Client i is available with probability a_i, independently (0 or 1 for a fixed set).
    """
    a = np.asarray(a, np.float64)
    n = a.size
    if np.all((a == 0) | (a == 1)):  # a fixed set of K clients
        K = int(a.sum())
        pi, pi2, m1, m2 = (np.zeros(n), np.zeros((n, n)), np.zeros(n), np.zeros((n, n)))
        if K == 0:
            return ParticipationMoments(pi, pi2, m1, m2)
        m = min(S, K)
        on = a == 1
        both = on[:, None] & on[None, :]
        pi2[both] = m * (m - 1) / (K * (K - 1)) if K > 1 else 0.0
        m2[both] = (m - 1) / (m * K * (K - 1)) if K > 1 else 0.0
        pi[on], m1[on] = m / K, 1.0 / K
        np.fill_diagonal(pi2, pi)
        np.fill_diagonal(m2, np.where(on, 1.0 / (K * m), 0.0))
        return ParticipationMoments(pi, pi2, m1, m2)
    if n > _MAX_HETEROGENEOUS and not np.all(a == a[0]):
        raise ValueError(f"inclusion probabilities of independent availabilities are computed "
                         f"for n <= {_MAX_HETEROGENEOUS} clients, got n={n}")
    if np.all(a == a[0]):  # binomial counts
        from scipy.stats import binom
        b = np.arange(n + 1)
        one = binom.pmf(b, n - 1, a[0])
        two = binom.pmf(b, max(n - 2, 0), a[0]) if n >= 2 else np.zeros(n + 1)
        D = np.broadcast_to(two, (n, n, n + 1)).copy()
        D[np.arange(n), np.arange(n)] = one
    else:
        D = _others(a)
    b = np.arange(n + 1)
    K1 = 1 + b
    M1 = np.minimum(S, K1)
    diag = D[np.arange(n), np.arange(n)]  # (n, n + 1)
    pi = a * (diag @ (M1 / K1))
    m1 = a * (diag @ (1.0 / K1))
    m2_diag = a * (diag @ (1.0 / (K1 * M1)))
    K2 = 2 + b
    M2 = np.minimum(S, K2)
    pi2 = np.outer(a, a) * (D @ (M2 * (M2 - 1) / (K2 * (K2 - 1))))
    m2 = np.outer(a, a) * (D @ ((M2 - 1) / (M2 * K2 * (K2 - 1))))
    np.fill_diagonal(pi2, pi)
    np.fill_diagonal(m2, m2_diag)
    return ParticipationMoments(pi, pi2, m1, m2)


def multinomial(p: np.ndarray, S: int, unbiased: bool) -> ParticipationMoments:
    """S independent draws from p: counts C ~ Multinomial(S, p)."""
    n = p.size
    q = 1 - p
    pi = 1 - q ** S
    pi2 = 1 - q[:, None] ** S - q[None, :] ** S + np.clip(1 - p[:, None] - p[None, :], 0,
                                                         None) ** S
    np.fill_diagonal(pi2, pi)
    EC = S * p
    ECC = S * (S - 1) * np.outer(p, p)
    np.fill_diagonal(ECC, S * p * (1 - p) + (S * p) ** 2)
    scale = 1.0 / (S * n * p) if unbiased else np.full(n, 1.0 / S)
    return ParticipationMoments(pi, pi2, EC * scale, ECC * np.outer(scale, scale))
