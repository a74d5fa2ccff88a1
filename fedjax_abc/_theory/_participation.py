"""Participation theory: inclusion probabilities, aggregation weights, the sampling error.

The server's aggregate of client vectors v_i (their accumulated local gradients, say) is
A = sum_i M_i v_i, with M_i the weight client i receives in the round: for a normalised
sampler its slots' weights over their sum (0 in a round without participants), for an
unbiased one the weights themselves. Everything Lemma 3 needs is in the first two moments
of M: with vbar = (1/n) sum_i v_i,

    E||A - vbar||^2 = sum_ij E[M_i M_j] <v_i, v_j> - 2 sum_i E[M_i] <v_i, vbar> + ||vbar||^2,

which for the paper's sampler (E[M_i] = 1/n, E[M_i^2] = 1/(nS), E[M_i M_j] = (S - 1) /
(S n (n - 1))) is I_S / S times (1/n) sum_i ||v_i - vbar||^2: eq. (14).

For every library sampler with a closed form: :func:`inclusion_probabilities` (pi_i =
P(i takes part), pi_ij = P(i and j both do)), :func:`weight_moments` (E[M], E[M M^T]) and
:func:`sampling_error`; :func:`stationary_availability` of the Markov model. The stateful
samplers' values are those of one round in the long run: averaged over the period (Cyclic,
TraceAvailability) or in the stationary law (MarkovAvailability, at every round); give
``round=t`` for one round of a cycle.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from fedjax_abc._problems._participation import (Cyclic, Dropout, ImportanceSampler,
                                                 MarkovAvailability, Poisson, SizeWeighted,
                                                 TraceAvailability)
from fedjax_abc._problems._samplers import (AbstractSampler, Bernoulli, FullParticipation,
                                            UniformWithoutReplacement, WithReplacement)
from fedjax_abc._theory._grid import check_int

__all__ = ["Inclusion", "SamplingError", "WeightMoments", "inclusion_probabilities",
           "sampling_error", "stationary_availability", "weight_moments"]

# The pairwise recursion over independent availabilities holds (n, n, n + 1) numbers.
_MAX_HETEROGENEOUS = 128


class Inclusion(NamedTuple):
    """First- and second-order inclusion probabilities of one round.

    Attributes:
      first: pi_i = P(client i takes part), shape (n,).
      second: pi_ij = P(i and j both take part), shape (n, n), diagonal pi_i.
    """

    first: np.ndarray
    second: np.ndarray


class WeightMoments(NamedTuple):
    """Moments of the weights M_i the round's aggregate gives the clients.

    Attributes:
      mean: E[M_i], shape (n,) (1/n for an unbiased sampler).
      second: E[M_i M_j], shape (n, n).
    """

    mean: np.ndarray
    second: np.ndarray


class SamplingError(NamedTuple):
    """The round's aggregate A = sum_i M_i v_i against the full mean vbar.

    Attributes:
      mse: E||A - vbar||^2 (eq. 14's left side).
      variance: E||A - E A||^2.
      bias_sq: ||E A - vbar||^2 (0 for an unbiased sampler; the reweighting for
        :class:`~fedjax_abc.SizeWeighted`).
    """

    mse: float
    variance: float
    bias_sq: float


class _Moments(NamedTuple):
    pi: np.ndarray
    pi2: np.ndarray
    m1: np.ndarray
    m2: np.ndarray


def stationary_availability(p_leave, p_return) -> np.ndarray:
    """P(available) = p_return / (p_leave + p_return), the two-state chain's stationary law.

    Args:
      p_leave: P(an available client becomes unavailable), in [0, 1) (a number or one per
        client).
      p_return: P(an unavailable client becomes available), in (0, 1].

    Example:
      >>> import fedjax_abc as fa
      >>> float(fa.theory.stationary_availability(0.25, 0.75))
      0.75

    Reference: :class:`~fedjax_abc.MarkovAvailability`.
    """
    a, b = np.asarray(p_leave, np.float64), np.asarray(p_return, np.float64)
    if np.any(~np.isfinite(a) | (a < 0) | (a >= 1)):
        raise ValueError(f"p_leave must be in [0, 1), got {p_leave!r}"[:200])
    if np.any(~np.isfinite(b) | (b <= 0) | (b > 1)):
        raise ValueError(f"p_return must be in (0, 1], got {p_return!r}"[:200])
    return b / (a + b)


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


def _available_set(a, S: int) -> _Moments:
    """min(S, K) of the K available clients uniformly, weight 1 / min(S, K) each.

    Client i is available with probability a_i, independently (0 or 1 for a fixed set).
    """
    a = np.asarray(a, np.float64)
    n = a.size
    if np.all((a == 0) | (a == 1)):  # a fixed set of K clients
        K = int(a.sum())
        pi, pi2, m1, m2 = (np.zeros(n), np.zeros((n, n)), np.zeros(n), np.zeros((n, n)))
        if K == 0:
            return _Moments(pi, pi2, m1, m2)
        m = min(S, K)
        on = a == 1
        both = on[:, None] & on[None, :]
        pi2[both] = m * (m - 1) / (K * (K - 1)) if K > 1 else 0.0
        m2[both] = (m - 1) / (m * K * (K - 1)) if K > 1 else 0.0
        pi[on], m1[on] = m / K, 1.0 / K
        np.fill_diagonal(pi2, pi)
        np.fill_diagonal(m2, np.where(on, 1.0 / (K * m), 0.0))
        return _Moments(pi, pi2, m1, m2)
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
    return _Moments(pi, pi2, m1, m2)


def _multinomial(p: np.ndarray, S: int, unbiased: bool) -> _Moments:
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
    return _Moments(pi, pi2, EC * scale, ECC * np.outer(scale, scale))


def _cycle_rows(sampler, n: int) -> np.ndarray:
    if isinstance(sampler, Cyclic):
        g = np.asarray(sampler.group_ids(n))
        return (g[None, :] == np.arange(sampler.num_groups)[:, None]).astype(np.float64)
    return np.asarray(sampler.available, np.float64)


def _moments(sampler: AbstractSampler, n: int, round: Optional[int]) -> _Moments:
    name = type(sampler).__name__
    if isinstance(sampler, UniformWithoutReplacement):
        return _available_set(np.ones(n), sampler.num_sampled)
    if isinstance(sampler, FullParticipation):
        return _available_set(np.ones(n), n)
    if isinstance(sampler, Bernoulli):
        return _available_set(np.full(n, float(sampler.p)), n)
    if isinstance(sampler, WithReplacement):
        return _multinomial(np.full(n, 1.0 / n), sampler.num_sampled, False)
    if isinstance(sampler, ImportanceSampler):
        return _multinomial(np.asarray(sampler.probs, np.float64), sampler.num_sampled,
                            sampler.unbiased)
    if isinstance(sampler, Poisson):
        p = np.broadcast_to(np.asarray(sampler.probs, np.float64), (n,))
        if not sampler.unbiased:
            return _available_set(p, n)
        m2 = np.full((n, n), 1.0 / n ** 2)
        np.fill_diagonal(m2, 1.0 / (n ** 2 * p))
        pi2 = np.outer(p, p)
        np.fill_diagonal(pi2, p)
        return _Moments(p.copy(), pi2, np.full(n, 1.0 / n), m2)
    if isinstance(sampler, MarkovAvailability):
        return _available_set(np.asarray(sampler.stationary(n), np.float64),
                              sampler.num_sampled)
    if isinstance(sampler, (Cyclic, TraceAvailability)):
        rows = _cycle_rows(sampler, n)
        if round is not None:
            rows = rows[check_int("round", round, 0) % rows.shape[0]][None]
        parts = [_available_set(r, sampler.num_sampled) for r in rows]
        return _Moments(*(np.mean([getattr(m, f) for m in parts], axis=0)
                          for f in _Moments._fields))
    if isinstance(sampler, Dropout):
        q = np.broadcast_to(np.asarray(sampler.deliver, np.float64), (n,))
        inner = sampler.sampler
        if inner.normalised():
            if isinstance(inner, Bernoulli):  # every available client takes part
                return _available_set(np.full(n, float(inner.p)) * q, n)
            if isinstance(inner, Poisson):
                p = np.broadcast_to(np.asarray(inner.probs, np.float64), (n,))
                return _available_set(p * q, n)
            if isinstance(inner, FullParticipation):
                return _available_set(q, n)
            raise ValueError(f"no closed form for Dropout over the normalised "
                             f"{type(inner).__name__} (survivors of a selection averaged)")
        m = _moments(inner, n, round)
        pi2 = m.pi2 * np.outer(q, q)
        np.fill_diagonal(pi2, m.pi * q)
        m2 = m.m2.copy()
        np.fill_diagonal(m2, np.diag(m.m2) / q)
        return _Moments(m.pi * q, pi2, m.m1, m2)
    if isinstance(sampler, SizeWeighted):
        r = np.asarray(sampler.relative_sizes(n), np.float64)
        inner = sampler.sampler
        m = _moments(inner, n, round)
        if not inner.normalised():
            return _Moments(m.pi, m.pi2, m.m1 * r, m.m2 * np.outer(r, r))
        if isinstance(inner, FullParticipation):
            return _Moments(m.pi, m.pi2, r / n, np.outer(r, r) / n ** 2)
        raise ValueError(f"no closed form for SizeWeighted over the normalised "
                         f"{type(inner).__name__} (a ratio of random sums)")
    raise ValueError(f"no closed form for the participation of {name}")


def _check(sampler, n) -> int:
    if not isinstance(sampler, AbstractSampler):
        raise ValueError(f"sampler must be a fedjax_abc.AbstractSampler, got "
                         f"{type(sampler).__name__}")
    n = check_int("number of clients (n)", n, 1)
    sampler.validate(n)
    return n


def inclusion_probabilities(sampler: AbstractSampler, n: int, *,
                            round: Optional[int] = None) -> Inclusion:
    """pi_i and pi_ij of one round of ``sampler`` over n clients, in closed form.

    Args:
      sampler: a library sampler (see the module docstring for which).
      n: the number of clients.
      round: for Cyclic and TraceAvailability, the round t (its phase t mod period); None
        averages over the period (the long-run frequencies).

    Example:
      >>> import fedjax_abc as fa
      >>> inc = fa.theory.inclusion_probabilities(fa.UniformWithoutReplacement(2), 4)
      >>> float(inc.first[0]), float(inc.second[0, 1])
      (0.5, 0.16666666666666666)

    Reference: eq. (9) for the paper's sampler (S/n and S(S-1)/(n(n-1))).
    """
    m = _moments(sampler, _check(sampler, n), round)
    return Inclusion(m.pi, m.pi2)


def weight_moments(sampler: AbstractSampler, n: int, *,
                   round: Optional[int] = None) -> WeightMoments:
    """E[M_i] and E[M_i M_j] of the weights a round's aggregate gives the clients.

    Arguments as :func:`inclusion_probabilities`.

    Example:
      >>> import fedjax_abc as fa
      >>> wm = fa.theory.weight_moments(fa.Poisson([0.5, 0.5]), 2)
      >>> wm.mean.tolist(), wm.second.tolist()
      ([0.5, 0.5], [[0.5, 0.25], [0.25, 0.5]])
    """
    m = _moments(sampler, _check(sampler, n), round)
    return WeightMoments(m.m1, m.m2)


def sampling_error(sampler: AbstractSampler, vectors, *,
                   round: Optional[int] = None) -> SamplingError:
    """E||A - vbar||^2 for A = sum_i M_i v_i: the sampling error of Lemma 3, any sampler.

    Args:
      sampler: a library sampler with a closed form.
      vectors: v_i, shape (n, d) (or (n,)).
      round: as in :func:`inclusion_probabilities`.

    Returns:
      A :class:`SamplingError`. For the paper's sampler, mse = I_S / S * (1/n) sum_i
      ||v_i - vbar||^2 (eq. 14).

    Example:
      >>> import numpy as np, fedjax_abc as fa
      >>> v = np.array([[1.0], [-1.0], [2.0], [-2.0]])
      >>> err = fa.theory.sampling_error(fa.UniformWithoutReplacement(2), v)
      >>> round(err.mse, 12), round(fa.theory.sampling_factor(4, 2) / 2 * 2.5, 12)
      (0.833333333333, 0.833333333333)

    Reference: Lemma 3, eq. (14), and its proof (Appendix B).
    """
    v = np.asarray(vectors, np.float64)
    if v.ndim == 1:
        v = v[:, None]
    if v.ndim != 2 or v.shape[0] < 1 or not np.all(np.isfinite(v)):
        raise ValueError(f"vectors must be a finite (n, d) array, got shape {v.shape}")
    m = _moments(sampler, _check(sampler, v.shape[0]), round)
    vbar = v.mean(axis=0)
    gram = v @ v.T
    mean_A = m.m1 @ v
    mse = float(np.sum(m.m2 * gram) - 2 * mean_A @ vbar + vbar @ vbar)
    bias_sq = float(np.sum((mean_A - vbar) ** 2))
    return SamplingError(max(mse, 0.0), max(mse - bias_sq, 0.0), bias_sq)
