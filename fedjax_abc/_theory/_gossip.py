"""Theory of gossip averaging and decentralised SGD: spectra, consensus, D-SGD's bound.

A round of gossip replaces the nodes' values X (n x d, a row a node) by W X with W doubly
stochastic (W 1 = 1, 1^T W = 1^T), so the mean Xbar = 11^T X / n is kept and the deviation
X - Xbar is multiplied by W - 11^T / n:

    W^t X - Xbar = (W - 11^T/n)^t (X - Xbar),  ||W^t X - Xbar||_F <= lambda_2^t ||X - Xbar||_F,

with lambda_2 = ||W - 11^T/n||_2 (:func:`second_eigenvalue`; for symmetric W the largest
|eigenvalue| but the eigenvalue 1 of the vector 1).

- :func:`mixing_matrix`: a topology's dense W (from ``fedjax_abc.decentral``).
- :func:`second_eigenvalue`, :func:`spectral_gap` (1 - lambda_2), :func:`mixing_parameter`
  (p = 1 - lambda_2^2, Koloskova et al.'s Assumption 4).
- :func:`consensus_error` (exact ||W^t (X0 - Xbar)||_F^2 / n) and :func:`consensus_bound`
  (lambda_2^(2t) ||X0 - Xbar||_F^2 / n).
- :func:`expected_matching_contraction`: E||W X - Xbar||^2 / ||X - Xbar||^2 for one
  uniformly random matching (closed form, derived in its docstring).
- :func:`dsgd_bound_terms`, :func:`dsgd_iterations`: the terms of Theorem 2 (strongly
  convex) of Koloskova, Loizou, Boreiri, Jaggi and Stich, "A Unified Theory of
  Decentralized SGD with Changing Topology and Local Updates", ICML 2020.

Koloskova et al. write X as d x n (a column a node) and mix by X W; for the symmetric W of
their Assumption 2 that is the transpose of W X here.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple, Optional

import jax
import numpy as np

from fedjax_abc._decentral._topology import AbstractTopology
from fedjax_abc._decentral._weights import (STOCHASTIC_TOL, AbstractWeights,
                                            MetropolisHastings, check_doubly_stochastic)
from fedjax_abc._decentral._mixing import dense
from fedjax_abc._problems._args import check_count, check_real

__all__ = ["DSGDIterations", "DSGDTerms", "consensus_bound", "consensus_error",
           "dsgd_bound_terms", "dsgd_iterations", "expected_matching_contraction",
           "mixing_matrix", "mixing_parameter", "second_eigenvalue", "spectral_gap"]

# lambda_2 this close to 1 is 1: the matrix does not mix (a disconnected graph)
MIXING_TOL = 1e-12


@functools.partial(jax.jit, static_argnums=(2,))
def _round_matrix(topology, weights, n, t, words, trial_words):
    """Round t's dense W, one compiled program per (topology's class and shape, n)."""
    state = topology.init_state(n, trial_words)
    return dense(topology.neighbours(n, weights, t, words, state))


def mixing_matrix(topology: AbstractTopology, weights: Optional[AbstractWeights], n: int,
                  t: int = 0, words=None, trial_words=None) -> np.ndarray:
    """Round t's dense mixing matrix W (n, n) of a topology under a weights rule, float64.

    Args:
      topology: a ``fedjax_abc.decentral`` topology (``Ring()``, ``ErdosRenyi(0.3)``, ...).
      weights: a weights rule (None: ``MetropolisHastings()``).
      n: the number of nodes.
      t: the round (``Exponential`` depends on it).
      words: the round's ``topology.num_words(n)`` uint32 words (``RandomMatching``).
      trial_words: the trial's ``topology.num_trial_words(n)`` words (``ErdosRenyi``).

    Returns:
      W as a NumPy array, checked doubly stochastic (rows and columns summing to 1 within
      1e-12).

    Example:
      >>> import fedjax_abc as fa
      >>> fa.theory.mixing_matrix(fa.decentral.Complete(), None, 4)[0].tolist()
      [0.25, 0.25, 0.25, 0.25]
    """
    n = check_count("n (nodes)", n)
    weights = MetropolisHastings() if weights is None else weights
    topology.validate(n)
    weights.validate(topology, n)
    if topology.num_trial_words(n) == 0:
        trial_words = None  # not read: one program whatever is passed
    if topology.num_words(n) == 0:
        words = None
    W = np.asarray(_round_matrix(topology, weights, n, t, words, trial_words), np.float64)
    return check_doubly_stochastic(f"{type(topology).__name__}'s W", W, symmetric=False)


def _stochastic(W) -> np.ndarray:
    return check_doubly_stochastic("W", W, symmetric=False)


def _is_symmetric(W: np.ndarray) -> bool:
    return bool(np.all(np.abs(W - W.T) <= STOCHASTIC_TOL))


def second_eigenvalue(W) -> float:
    """lambda_2 = ||W - 11^T/n||_2 of a doubly stochastic W.

    For symmetric W (every topology here but ``Exponential``) this is the second largest
    |eigenvalue|, max(|lambda_2(W)|, |lambda_n(W)|), computed from the eigenvalues of
    W - 11^T/n (those of W with the eigenvalue 1 of the vector 1 replaced by 0); for W not
    symmetric it is the largest singular value of W - 11^T/n, the factor by which one round
    shrinks ||X - Xbar||_F at worst. lambda_2 = 1 for a disconnected graph; 0 for
    W = 11^T / n.

    Example:
      >>> import fedjax_abc as fa
      >>> W = fa.theory.mixing_matrix(fa.decentral.Ring(), None, 6)  # 1/3 + 2/3 cos(pi/3)
      >>> round(fa.theory.second_eigenvalue(W), 12)
      0.666666666667
    """
    W = _stochastic(W)
    deviation = W - 1.0 / W.shape[0]
    if _is_symmetric(W):
        return float(np.max(np.abs(np.linalg.eigvalsh((deviation + deviation.T) / 2))))
    return float(np.linalg.norm(deviation, 2))


def spectral_gap(W) -> float:
    """1 - lambda_2 (:func:`second_eigenvalue`): the spectral gap of a doubly stochastic W.

    It is 0 for a W that does not mix (a disconnected graph). Koloskova et al. (ICML 2020)
    measure mixing by p of their Assumption 4 instead: for one fixed symmetric W,
    p = 1 - lambda_2^2 = gap (2 - gap) (:func:`mixing_parameter`), and rho = 1 - p =
    lambda_2^2 is the factor by which a round shrinks ||X - Xbar||_F^2 at worst.
    """
    return 1.0 - second_eigenvalue(W)


def _period_product(W) -> np.ndarray:
    """W (n, n) itself, or for a stack (tau, n, n) of rounds W_0 .. W_{tau-1} their
    product W_{tau-1} ... W_0 (what tau rounds do to X), each checked doubly stochastic."""
    a = np.asarray(W, dtype=np.float64)
    if a.ndim == 3:
        product = np.eye(a.shape[1])
        for s in range(a.shape[0]):
            product = _stochastic(a[s]) @ product
        return product
    return _stochastic(a)


def mixing_parameter(W) -> float:
    """p of Koloskova et al. (ICML 2020), Assumption 4: the largest p with

        ||W_{tau-1} ... W_0 X - Xbar||_F^2 <= (1 - p) ||X - Xbar||_F^2   for every X,

    i.e. p = 1 - ||W_{tau-1} ... W_0 - 11^T/n||_2^2 (for one symmetric W: 1 - lambda_2^2,
    with tau = 1). Koloskova et al. state it in expectation over random W; for a random
    topology whose W is a symmetric projection (a random matching: W^T W = W),
    1 - p = ||E[W] - 11^T/n||_2 (:func:`expected_matching_contraction`).

    Args:
      W: one round's matrix (n, n), or the tau rounds of a period (tau, n, n) in order (the
        one-peer ``Exponential`` graph: p = 1 with tau = log2 n for n a power of 2).

    Raises ValueError where W does not mix (p = 0: a disconnected graph), which the
    theorem's rates need.
    """
    product = _period_product(W)
    lam = second_eigenvalue(product)
    if lam >= 1.0 - MIXING_TOL:
        raise ValueError(f"W does not mix (lambda_2 = {lam:.6g}): a disconnected graph has "
                         "no consensus rate (p = 0)")
    return 1.0 - lam * lam


def _deviation(X0, n: int) -> np.ndarray:
    X = np.asarray(X0, dtype=np.float64)
    if X.ndim not in (1, 2) or X.shape[0] != n:
        raise ValueError(f"X0 must have one row a node (n={n}), got shape {X.shape}")
    return X - X.mean(axis=0)


def consensus_error(W, X0, t: int) -> float:
    """||W^t (X0 - Xbar)||_F^2 / n exactly: the mean squared distance to the average after t
    rounds of pure gossip X_{s+1} = W X_s (the average is kept, so it is that of X0).

    Args:
      W: (n, n), or (T, n, n): round s mixes with W[s mod T] (a time-varying graph's
        period, e.g. ``Exponential``'s tau rounds).
      X0: (n,) or (n, d), a row a node.
      t: the number of rounds (>= 0).
    """
    a = np.asarray(W, dtype=np.float64)
    stack = [_stochastic(m) for m in (a if a.ndim == 3 else a[None])]
    n = stack[0].shape[0]
    Y = _deviation(X0, n)
    for s in range(check_count("t (rounds)", t, low=0)):
        Y = stack[s % len(stack)] @ Y
    return float(np.sum(Y * Y) / n)


def consensus_bound(W, X0, t: int) -> float:
    """lambda_2^(2t) ||X0 - Xbar||_F^2 / n: the bound on :func:`consensus_error` from
    ||(W - 11^T/n)^t||_2 <= lambda_2^t (attained for symmetric W by X0 - Xbar along an
    eigenvector of the eigenvalue of largest |.| after 1). W: one matrix (n, n)."""
    a = np.asarray(W, dtype=np.float64)
    if a.ndim != 2:
        raise ValueError(f"consensus_bound needs one matrix W (n, n), got shape {a.shape}")
    lam = second_eigenvalue(a)
    Y = _deviation(X0, a.shape[0])
    t = check_count("t (rounds)", t, low=0)
    return float(lam ** (2 * t) * np.sum(Y * Y) / a.shape[0])


def expected_matching_contraction(n: int) -> float:
    """E||W X - Xbar||_F^2 / ||X - Xbar||_F^2 for one uniformly random matching
    (``fedjax_abc.decentral.RandomMatching``): (n - 2) / (2 (n - 1)) for even n, 1/2 for odd.

    Derivation. W averages each matched pair: W = sum_pairs (e_i + e_j)(e_i + e_j)^T / 2 +
    sum_unmatched e_k e_k^T, a symmetric projection (W^T W = W^2 = W). W is doubly
    stochastic, so W X - Xbar = W Y with Y = X - Xbar, 1^T Y = 0, and

        E||W Y||^2 = tr(Y^T E[W^T W] Y) = tr(Y^T E[W] Y).

    Even n (a uniform perfect matching): node i is matched with each other node with
    probability 1/(n - 1), so E[W] = I/2 + (J - I) / (2 (n - 1)) (J = 11^T). Since J Y = 0,
    E[W] Y = (1/2 - 1/(2 (n - 1))) Y, and the ratio is (n - 2) / (2 (n - 1)) for every Y:
    0 for n = 2 (one step averages), 1/3 for n = 4, tending to 1/2.

    Odd n (one node, uniform, left unmatched): E[W_ii] = 1/n + (n - 1)/(2n) = (n + 1)/(2n)
    and E[W_ij] = (1/n) (1/2) (i is matched, with probability (n - 1)/n, to j with
    probability 1/(n - 1)), so E[W] = I/2 + J/(2n) and the ratio is 1/2 for every Y.

    Rounds with independent matchings multiply: E||W_t ... W_1 Y||^2 = c^t ||Y||^2 (E[W]
    acts on mean-zero vectors as c I), so 1 - c is the p of Koloskova et al.'s
    Assumption 4 for this topology.

    Example:
      >>> import fedjax_abc as fa
      >>> fa.theory.expected_matching_contraction(4), fa.theory.expected_matching_contraction(5)
      (0.3333333333333333, 0.5)
    """
    n = check_count("n (nodes)", n)
    if n < 2:
        raise ValueError(f"a matching needs n >= 2 nodes, got n={n}")
    if n % 2:
        return 0.5
    return (n - 2) / (2 * (n - 1))


# ------------------------------------------------- D-SGD: Koloskova et al. 2020, Theorem 2

class DSGDTerms(NamedTuple):
    """The terms of D-SGD's bound after T rounds at a constant stepsize (strongly convex;
    absolute constants set to 1).

    Attributes:
      linear: r0 exp(-mu eta T / 2) / eta, the forgetting of the start.
      noise: eta sigma^2 / n, the stochastic gradients' noise averaged over n nodes.
      consensus: L eta^2 (tau / p) (sigma^2 + (tau / p) zeta^2), the nodes' disagreement.
      total: their sum.
      stepsize_limit: p / (L tau), the largest stepsize of the theorem's order (it takes
        p / (c L tau) for an absolute constant c).
    """

    linear: float
    noise: float
    consensus: float
    total: float
    stepsize_limit: float


class DSGDIterations(NamedTuple):
    """The rounds D-SGD needs to reach accuracy epsilon (strongly convex), term by term
    (Theorem 2 up to its absolute constants and logarithmic factors).

    Attributes:
      noise: sigma^2 / (mu n epsilon).
      consensus: sqrt(L) (zeta tau + sigma sqrt(p tau)) / (mu p sqrt(epsilon)).
      linear: (L tau / (mu p)) log(1 / epsilon).
      total: their sum.
    """

    noise: float
    consensus: float
    linear: float
    total: float


def _dsgd_constants(mu, L, sigma_sq, zeta_sq, p, tau):
    mu = check_real("mu", mu, low=0.0, strict=True)
    L = check_real("L", L, low=0.0, strict=True)
    if L < mu:
        raise ValueError(f"L ({L:g}) must be at least mu ({mu:g})")
    sigma_sq = check_real("sigma_sq", sigma_sq, low=0.0)
    zeta_sq = check_real("zeta_sq", zeta_sq, low=0.0)
    p = check_real("p", p, low=0.0, strict=True)
    if p > 1.0:
        raise ValueError(f"p ({p:g}) must be in (0, 1]")
    tau = check_count("tau", tau)
    return mu, L, sigma_sq, zeta_sq, p, tau


def dsgd_bound_terms(mu: float, L: float, sigma_sq: float, zeta_sq: float, p: float,
                     tau: int, stepsize: float, rounds: int, n: int,
                     r0: float = 1.0) -> DSGDTerms:
    """The three terms of D-SGD's bound (Koloskova et al., ICML 2020, Theorem 2, strongly
    convex case) at a constant stepsize eta, before eta is tuned:

        (1/W_T) sum_t w_t (E f(xbar_t) - f*) + mu E||xbar_T - x*||^2
            <~ r0 exp(-mu eta T / 2) / eta  +  eta sigma^2 / n
               + L eta^2 (tau / p) (sigma^2 + (tau / p) zeta^2),

    for eta <= p / (c L tau), with the theorem's absolute constants set to 1. Choosing eta
    (of order min(p / (L tau), log(T) / (mu T))) gives its rate
    O~(r0 (L tau / p) exp(-mu p T / (L tau)) + sigma^2 / (mu n T)
    + L (sigma^2 p tau + zeta^2 tau^2) / (mu^2 p^2 T^2)), i.e. :func:`dsgd_iterations`.

    Args:
      mu, L: strong convexity and smoothness of every f_i (Assumption 1), 0 < mu <= L.
      sigma_sq: sigma-bar^2 = (1/n) sum_i E||grad F_i(x*, xi) - grad f_i(x*)||^2, the noise
        at the optimum (Assumption 3).
      zeta_sq: zeta-bar^2 = (1/n) sum_i ||grad f_i(x*)||^2, the heterogeneity at the
        optimum (Assumption 3).
      p, tau: the mixing parameter in (0, 1] and its period (Assumption 4;
        :func:`mixing_parameter`).
      stepsize: eta in (0, p / (L tau)].
      rounds: T >= 1; n: the nodes; r0: ||xbar_0 - x*||^2.
    """
    mu, L, sigma_sq, zeta_sq, p, tau = _dsgd_constants(mu, L, sigma_sq, zeta_sq, p, tau)
    eta = check_real("stepsize", stepsize, low=0.0, strict=True)
    limit = p / (L * tau)
    if eta > limit:
        raise ValueError(f"stepsize ({eta:g}) must be at most p / (L tau) = {limit:g}")
    T = check_count("rounds (T)", rounds)
    n = check_count("n (nodes)", n)
    r0 = check_real("r0", r0, low=0.0)
    linear = r0 * math.exp(-mu * eta * T / 2) / eta
    noise = eta * sigma_sq / n
    consensus = L * eta * eta * (tau / p) * (sigma_sq + (tau / p) * zeta_sq)
    return DSGDTerms(linear, noise, consensus, linear + noise + consensus, limit)


def dsgd_iterations(mu: float, L: float, sigma_sq: float, zeta_sq: float, p: float,
                    tau: int, epsilon: float, n: int) -> DSGDIterations:
    """The rounds T after which D-SGD's error is below epsilon (Koloskova et al., ICML 2020,
    Theorem 2, strongly convex case), up to absolute constants and logarithmic factors:

        T = O~( sigma^2 / (mu n epsilon)
                + sqrt(L) (zeta tau + sigma sqrt(p tau)) / (mu p sqrt(epsilon))
                + (L tau / (mu p)) log(1 / epsilon) ).

    The first term is that of mini-batch SGD on n nodes (the topology does not enter); the
    second is the price of decentralisation (1/p: the graph's mixing); the third, the
    deterministic rate. Arguments as :func:`dsgd_bound_terms` (sigma = sqrt(sigma_sq),
    zeta = sqrt(zeta_sq)), epsilon in (0, 1).
    """
    mu, L, sigma_sq, zeta_sq, p, tau = _dsgd_constants(mu, L, sigma_sq, zeta_sq, p, tau)
    eps = check_real("epsilon", epsilon, low=0.0, strict=True)
    if eps >= 1.0:
        raise ValueError(f"epsilon ({eps:g}) must be in (0, 1)")
    n = check_count("n (nodes)", n)
    sigma, zeta = math.sqrt(sigma_sq), math.sqrt(zeta_sq)
    noise = sigma_sq / (mu * n * eps)
    consensus = math.sqrt(L) * (zeta * tau + sigma * math.sqrt(p * tau)) / (mu * p * math.sqrt(eps))
    linear = L * tau / (mu * p) * math.log(1.0 / eps)
    return DSGDIterations(noise, consensus, linear, noise + consensus + linear)
