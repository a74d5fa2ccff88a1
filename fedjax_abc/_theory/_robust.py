"""Theory of Byzantine-robust aggregation: closed forms, the empirical kappa, breakdown.

- :func:`ipm_contraction`: the mean under inner-product manipulation, ((n - f) - f tau)/n.
- :func:`median_bias_at_infinity`, :func:`trimmed_mean_bias_at_infinity`: the coordinate
  median's and the trimmed mean's bias when f of n inputs sit at +infinity and the honest
  ones are N(mu, sigma^2), from the expected normal order statistics.
- :func:`order_statistic_mean`: E[Z_(r:h)], the r-th smallest of h standard normals.
- :func:`robustness`: the empirical kappa of a rule under an attack over many drawn rounds,
  ||F(x) - xbar_H||^2 / (1/|H| sum_{i in H} ||x_i - xbar_H||^2), beside the rule's published
  coefficient (:meth:`~fedjax_abc.robust.AbstractAggregator.kappa`) and the lower bound
  f / (n - 2f) no rule beats.
- :func:`breakdown_fraction`: the fraction f/n of Byzantine clients beyond which no rule
  keeps a bounded error under (G, B)-gradient dissimilarity, 1 / (2 + B^2).
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from fedjax_abc._problems._args import check_count, check_real
from fedjax_abc._robust import _kappa
from fedjax_abc._robust._aggregators import AbstractAggregator
from fedjax_abc._robust._attacks import AbstractAttack, AttackInfo

__all__ = ["Robustness", "breakdown_fraction", "ipm_contraction", "median_bias_at_infinity",
           "order_statistic_mean", "robustness", "trimmed_mean_bias_at_infinity"]


def _n_f(n, f, majority: bool = True) -> tuple[int, int]:
    n = check_count("n", n)
    f = check_count("f", f, low=0)
    if majority and 2 * f >= n:
        raise ValueError(f"needs 2f < n (an honest majority), got n={n}, f={f}")
    if f >= n:
        raise ValueError(f"f ({f}) must be below n ({n})")
    return n, f


def ipm_contraction(n: int, f: int, tau: float) -> float:
    """((n - f) - f tau) / n: the mean of n inputs, f of them IPM(tau)'s -tau xbar_H, is this
    factor times the honest mean xbar_H, in every round (Xie, Koyejo and Gupta, UAI 2019).

    With n inputs, sum = (n - f) xbar_H + f (-tau xbar_H); divided by n. Negative (the
    aggregate points against the honest mean) once tau > (n - f)/f.
    """
    n, f = _n_f(n, f, majority=False)
    return ((n - f) - f * check_real("tau", tau, low=0.0)) / n


def order_statistic_mean(r: int, h: int) -> float:
    """E[Z_(r:h)], the mean of the r-th smallest of h independent standard normals:
    int z h C(h-1, r-1) Phi(z)^(r-1) (1 - Phi(z))^(h-r) phi(z) dz (by quadrature)."""
    from scipy import integrate, special, stats

    h = check_count("h", h)
    r = check_count("r", r)
    if r > h:
        raise ValueError(f"rank r ({r}) must be at most h ({h})")
    log_c = math.log(h) + special.gammaln(h) - special.gammaln(r) - special.gammaln(h - r + 1)

    def density(z):
        return math.exp(log_c + (r - 1) * stats.norm.logcdf(z) + (h - r) * stats.norm.logsf(z)
                        + stats.norm.logpdf(z))

    centre = float(stats.norm.ppf((r - 0.375) / (h + 0.25)))  # Blom's approximation
    value, _ = integrate.quad(lambda z: z * density(z), -14.0, 14.0, points=[centre],
                              limit=400, epsabs=1e-13, epsrel=1e-12)
    return value


def median_bias_at_infinity(n: int, f: int, sigma: float = 1.0) -> float:
    """E[median] - mu of one coordinate when f of n inputs are +infinity and the n - f honest
    ones N(mu, sigma^2): sorted, the n values are the honest order statistics then the
    infinities, so the median (the mean of the middle two for even n) is the honest order
    statistic of rank (n + 1)/2 (n odd), or the mean of ranks n/2 and n/2 + 1 (n even), of
    h = n - f; its bias sigma E[Z_(r:h)] (about sigma Phi^{-1}(n / (2(n - f))) for large n).
    """
    n, f = _n_f(n, f)
    sigma = check_real("sigma", sigma, low=0.0)
    h = n - f
    ranks = [(n + 1) // 2] if n % 2 else [n // 2, n // 2 + 1]
    return sigma * float(np.mean([order_statistic_mean(r, h) for r in ranks]))


def trimmed_mean_bias_at_infinity(n: int, f: int, sigma: float = 1.0) -> float:
    """E[trimmed mean] - mu of one coordinate (f trimmed on each side) under the same attack:
    the f largest values cut are the infinities, the f smallest the honest ranks 1..f, so
    the mean keeps honest ranks f + 1, ..., n - f of h = n - f, and the bias is
    sigma / (n - 2f) sum_{r=f+1}^{h} E[Z_(r:h)]."""
    n, f = _n_f(n, f)
    sigma = check_real("sigma", sigma, low=0.0)
    h = n - f
    return sigma * sum(order_statistic_mean(r, h) for r in range(f + 1, h + 1)) / (n - 2 * f)


class Robustness(NamedTuple):
    """The empirical kappa of a rule under an attack, over drawn rounds.

    Attributes:
      worst: the largest ratio over the rounds (the sup the definition takes, estimated).
      mean, stderr: the ratio's mean over the rounds and its standard error.
      published: the rule's published coefficient kappa(n, f) (None where unknown).
      lower_bound: f / (n - 2f), below which no rule's coefficient lies.
      ratios: every round's ratio, shape (rounds,).
    """

    worst: float
    mean: float
    stderr: float
    published: Optional[float]
    lower_bound: Optional[float]
    ratios: np.ndarray


def robustness(aggregator: AbstractAggregator, attack: AbstractAttack, honest, f: int,
               key: Optional[jax.Array] = None) -> Robustness:
    """The empirical (f, kappa)-robustness coefficient of ``aggregator`` under ``attack``.

    For each drawn round, the n - f honest vectors x_H and the attack's f vectors (all equal,
    computed from the honest ones, placed after them as ByzFL arranges them), the ratio

        ||F(x) - xbar_H||^2 / ((1/|H|) sum_{i in H} ||x_i - xbar_H||^2)

    (Allouah et al., AISTATS 2023, Definition 2: F is (f, kappa)-robust when this is at most
    kappa for every input). Its largest value over the rounds estimates the coefficient the
    rule has against this attack from below.

    Args:
      aggregator: the rule (pre-aggregators included).
      attack: the Byzantine vector's attack.
      honest: the honest vectors of every round, shape (rounds, n - f, d).
      f: the number of Byzantine inputs (n = n - f + f).
      key: for rules and attacks that draw random words (Bucketing, Gaussian): round r's
        words come from ``fold_in(key, r)``; None where neither draws.

    Returns:
      A :class:`Robustness`.

    Example:
      >>> import jax, jax.numpy as jnp, fedjax_abc as fa
      >>> x = jax.random.normal(jax.random.key(0), (200, 8, 3))
      >>> k = fa.theory.robustness(fa.robust.Median(), fa.robust.SignFlip(), x, f=2)
      >>> k.worst <= k.published
      True
    """
    honest = jnp.asarray(honest)
    if honest.ndim != 3:
        raise ValueError(f"honest must have shape (rounds, n - f, d), got {honest.shape}")
    f = check_count("f", f, low=0)
    rounds, h, d = honest.shape
    n = h + f
    if not isinstance(aggregator, AbstractAggregator) or not isinstance(attack, AbstractAttack):
        raise ValueError("robustness takes a fedjax_abc.robust aggregator and attack")
    aggregator.check_slots(n)
    if (attack.num_words(d) or aggregator.num_words(n)) and key is None:
        raise ValueError("this rule or attack draws random numbers: give robustness a key")
    keys = jnp.zeros((rounds, 0), jnp.uint32) if key is None else jax.vmap(
        lambda r: jax.random.key_data(jax.random.fold_in(key, r)))(jnp.arange(rounds))
    ratios = np.asarray(_ratios(aggregator, attack, honest, keys, f))
    with np.errstate(invalid="ignore"):  # an infinite ratio (the mean against Inf)
        se = float(np.std(ratios, ddof=1) / np.sqrt(rounds)) if rounds > 1 else float("nan")
    return Robustness(float(np.max(ratios)), float(np.mean(ratios)), se,
                      aggregator.kappa(n, f), _kappa.kappa_lower_bound(n, f), ratios)


@eqx.filter_jit  # one compilation per rule and attack structure, whatever their values
def _ratios(aggregator: AbstractAggregator, attack: AbstractAttack, honest: Array, keys: Array,
            f: int) -> Array:
    """Every round's ratio of :func:`robustness` (rounds,), its words from ``keys``."""
    rounds, h, d = honest.shape
    n = h + f
    a_words, r_words = attack.num_words(d), aggregator.num_words(n)

    def one(x, key_data):
        words = jax.random.bits(jax.random.wrap_key_data(key_data), (a_words + r_words,),
                                jnp.uint32) if key_data.shape[0] else jnp.zeros((0,), jnp.uint32)
        rows = jnp.concatenate([x, jnp.zeros((f, d), x.dtype)])
        byz = jnp.arange(n) >= h
        info = AttackInfo(aggregator, rows, jnp.ones((n,), x.dtype), byz, words[a_words:])
        out = info.aggregate_with(attack(x, None, words[:a_words], info))
        centre = jnp.mean(x, axis=0)
        spread = jnp.mean(jnp.sum((x - centre) ** 2, axis=1))
        return jnp.sum((out - centre) ** 2) / spread

    return jax.vmap(one)(honest, keys)


def breakdown_fraction(B: float) -> float:
    """1 / (2 + B^2): under (G, B)-gradient dissimilarity,
    (1/n) sum_i ||grad f_i(x) - grad f(x)||^2 <= G^2 + B^2 ||grad f(x)||^2, no rule keeps
    the error bounded once f/n reaches this fraction (Allouah, Guerraoui, Gupta, Pinot and
    Rizk, "Robust distributed learning: tight error bounds and breakdown point under data
    heterogeneity", NeurIPS 2023); 1/2 without heterogeneity growth
    (B = 0). With the optimal kappa = f/(n - 2f), the error floor kappa G^2 / (1 - kappa
    B^2) blows up at exactly this fraction. B is the package's B of the ABC/BGD family
    (``fa.theory.gradient_dissimilarity``).
    """
    B = check_real("B", B, low=0.0)
    return 1.0 / (2.0 + B * B)
