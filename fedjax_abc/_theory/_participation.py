"""Participation theory: inclusion probabilities, aggregation weights, the sampling error.

The server's aggregate of client vectors v_i (their accumulated local gradients, say) is
A = sum_i M_i v_i, with M_i the weight client i receives in the round: for a normalised
sampler its slots' weights over their sum (0 in a round without participants), for an
unbiased one the weights themselves. Everything Lemma 3 needs is in the first two moments
of M: with vbar = (1/n) sum_i v_i,

    E||A - vbar||^2 = sum_ij E[M_i M_j] <v_i, v_j> - 2 sum_i E[M_i] <v_i, vbar> + ||vbar||^2,

which for the paper's sampler (E[M_i] = 1/n, E[M_i^2] = 1/(nS), E[M_i M_j] = (S - 1) /
(S n (n - 1))) is I_S / S times (1/n) sum_i ||v_i - vbar||^2: eq. (14).

For every sampler with a closed form, which it gives through its own
``participation_moments`` (a user's sampler too): :func:`inclusion_probabilities` (pi_i =
P(i takes part), pi_ij = P(i and j both do)), :func:`weight_moments` (E[M], E[M M^T]) and
:func:`sampling_error`; :func:`stationary_availability` of the Markov model. The stateful
samplers' values are those of one round in the long run: averaged over the period (Cyclic,
TraceAvailability) or in the stationary law (MarkovAvailability, at every round); give
``round=t`` for one round of a cycle.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_abc._problems._args import check_key
from fedjax_abc._problems._moments import ParticipationMoments
from fedjax_abc._problems._samplers import AbstractSampler
from fedjax_abc._theory._grid import check_int

__all__ = ["Inclusion", "SamplingError", "WeightMoments", "inclusion_probabilities",
           "monte_carlo_moments",
           "sampling_error", "stationary_availability", "weight_moments"]

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


def _moments(sampler: AbstractSampler, n: int, round: Optional[int]) -> ParticipationMoments:
    """The sampler's own closed form (its ``participation_moments``); ValueError where it
    has none."""
    m = sampler.participation_moments(n, round)
    if m is None:
        raise ValueError(f"no closed form for the participation of {type(sampler).__name__}: a "
                         "sampler gives one through its participation_moments method")
    return m


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
      sampler: a sampler with a closed form (its ``participation_moments``).
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
    n = _check(sampler, n)
    inclusion = sampler.inclusion(n, round)
    if inclusion is None:
        _moments(sampler, n, round)  # says there is no closed form
    return Inclusion(*inclusion)


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
      sampler: a sampler with a closed form (its ``participation_moments``).
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


def monte_carlo_moments(sampler: AbstractSampler, n: int, *, key, draws: int = 10000,
                        chains: int = 1) -> ParticipationMoments:
    """pi_i, pi_ij, E[M_i] and E[M_i M_j] of a sampler estimated from ``draws`` rounds.

    For samplers without a closed form (over-selection on a clock, say). A stateful
    sampler runs ``chains`` independent chains of ``draws / chains`` consecutive rounds,
    each from its initial state (one chain: the long run's frequencies); a stateless one
    ``draws`` independent rounds. A trial that draws something once and keeps it (a
    clock's speed law, drawn in its first round) is one chain: ``chains=draws`` (every
    round a fresh trial's first) averages over trials, as a run's trials do; one chain
    gives the frequencies given one trial's draw. M_i is client i's share of the round's
    weights (w_i / sum w for a sampler whose slots are averaged, w_i otherwise; 0 in a
    round without participants). Each estimate is a mean over rounds: its standard error is
    about sqrt(p (1 - p) / draws) for a probability p (with independent rounds).

    Example:
      >>> import jax, fedjax_abc as fa
      >>> m = fa.theory.monte_carlo_moments(fa.UniformWithoutReplacement(2), 4,
      ...                                   key=jax.random.key(0), draws=4000)
      >>> bool(abs(m.pi[0] - 0.5) < 0.05)
      True
    """
    n = _check(sampler, n)
    draws = check_int("draws", draws, 1)
    chains = check_int("chains", chains, 1, draws)
    key = check_key("key", key)
    if draws % chains:
        raise ValueError(f"draws ({draws}) must be a multiple of chains ({chains})")
    words = jax.random.bits(key, (chains, draws // chains, sampler.num_words(n)), jnp.uint32)
    normalised = sampler.normalised()

    dtype = jnp.float64 if jax.config.jax_enable_x64 else jnp.float32

    def one(carry, w):
        state, sums = carry
        idx, weight, state = sampler.sample(w, n, state)
        weight = weight.astype(dtype)
        M = jnp.zeros((n,), dtype).at[idx].add(weight)
        if normalised:
            total = jnp.sum(M)
            M = jnp.where(total > 0, M / jnp.where(total > 0, total, 1), 0)
        part = jnp.zeros((n,), dtype).at[idx].max((weight > 0).astype(dtype))
        terms = (part, jnp.outer(part, part), M, jnp.outer(M, M))
        return (state, tuple(a + b for a, b in zip(sums, terms))), None

    zeros = (jnp.zeros((n,), dtype), jnp.zeros((n, n), dtype)) * 2
    (_, sums), _ = jax.jit(jax.vmap(
        lambda ws: jax.lax.scan(one, (sampler.init_state(n), zeros), ws)))(words)
    pi, pi2, m1, m2 = (np.asarray(a, np.float64).sum(axis=0) / draws for a in sums)
    return ParticipationMoments(pi, pi2, m1, m2)
