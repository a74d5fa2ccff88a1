"""Attacks: what the Byzantine participants of a round send.

An attack is a value and a pure function of one trial's round, ByzFL's definitions
(``byzfl.attacks``): ``attack(honest, weights, words, info) -> vector``, the one vector
(D,) every Byzantine participant sends, from the honest participants' messages
``honest`` (m, D) with ``weights`` (m,) (0: absent or Byzantine; attacks are omniscient:
they read the round's honest messages). In a run the vectors are updates, messages
relative to the round's origin (see :mod:`~fedjax_abc._robust._aggregators`), so that a
sign flip flips the honest update, not the model. ``info`` (:class:`AttackInfo`) carries
what the optimised attacks evaluate: the aggregator in use and the round's slots.
"""

from __future__ import annotations

import abc
import statistics
from typing import Any, NamedTuple, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from fedjax_abc._algorithms._checks import check_leaf, nonnegative_scalar, positive_scalar
from fedjax_abc._problems._args import check_count, check_real
from fedjax_abc._problems._learning import with_flipped_labels
from fedjax_abc._problems._oracles import normals_from_words
from fedjax_abc._robust._aggregators import AbstractAggregator, WeightedMean, present_first

__all__ = ["ALittleIsEnough", "AbstractAttack", "AttackInfo", "Gaussian", "Inf",
           "InnerProductManipulation", "LabelFlip", "Mimic", "OptimalALittleIsEnough",
           "OptimalInnerProductManipulation", "SignFlip", "alie_z_max", "honest_mean",
           "standalone_info"]


class AttackInfo(NamedTuple):
    """What an attack may read of its round besides the honest messages (one trial).

    Attributes:
      aggregator: the rule the server applies (pre-aggregators included).
      vectors: every slot's vector (m, D), the Byzantine slots' as the honest ones left
        them (they are replaced by the attack).
      weights: every slot's weight (m,), Byzantine slots included (0: absent).
      byzantine: (m,) bool, the slots whose vector the attack sets.
      words: the aggregator's random words of the round.
      poisoned: every slot's update (m, D) computed on the attack's poisoned problem
        (:meth:`AbstractAttack.poisoned`), the same random numbers; None where the attack
        poisons nothing.
    """

    aggregator: AbstractAggregator
    vectors: Array
    weights: Array
    byzantine: Array
    words: Optional[Array] = None
    poisoned: Optional[Array] = None

    def aggregate_with(self, vector: Array) -> Array:
        """The aggregate of the round when every Byzantine slot sends ``vector``."""
        rows = jnp.where(self.byzantine[:, None], vector[None, :], self.vectors)
        return self.aggregator(rows, self.weights, self.words)


def standalone_info(honest: Array, f: int, aggregator: AbstractAggregator = WeightedMean(),
                    words=None) -> AttackInfo:
    """The info of an attack used outside a run: the n - f honest rows followed by f
    Byzantine ones, as ByzFL's optimised attacks arrange them."""
    rows = jnp.concatenate([honest, jnp.zeros((f,) + honest.shape[1:], honest.dtype)])
    byz = jnp.arange(rows.shape[0]) >= honest.shape[0]
    return AttackInfo(aggregator, rows, jnp.ones(rows.shape[:1], honest.dtype), byz, words)


def honest_mean(honest: Array, weights: Optional[Array]) -> Array:
    """The mean of the present honest rows."""
    rows, present, k = present_first(honest, weights)
    total = jnp.sum(jnp.where(present[:, None], rows, 0), axis=0)
    return total / jnp.maximum(k, 1).astype(rows.dtype)


def _honest_std(honest: Array, weights: Optional[Array]) -> Array:
    """The coordinates' sample standard deviation over the present honest rows (ddof 1)."""
    rows, present, k = present_first(honest, weights)
    mean = honest_mean(honest, weights)
    sq = jnp.sum(jnp.where(present[:, None], (rows - mean) ** 2, 0), axis=0)
    return jnp.sqrt(sq / jnp.maximum(k - 1, 1).astype(rows.dtype))


class AbstractAttack(eqx.Module):
    """The vector every Byzantine participant of a round sends (see the module)."""

    def num_words(self, dim: int) -> int:
        """uint32 random words a round needs for vectors of ``dim`` entries (default: none)."""
        return 0

    def poisoned(self, problem) -> Optional[Any]:
        """The problem whose updates the attack reads besides the honest ones (every
        client's local work repeated on it, in ``AttackInfo.poisoned``), or None (the
        default: none). Raises ValueError where the attack cannot poison ``problem``."""
        return None

    @abc.abstractmethod
    def __call__(self, honest: Float[Array, "m D"], weights: Optional[Array] = None,
                 words: Optional[Array] = None,
                 info: Optional[AttackInfo] = None) -> Float[Array, " D"]:
        """The Byzantine vector of the round."""


class SignFlip(AbstractAttack):
    """-mean of the honest vectors (ByzFL's ``SignFlipping``)."""

    def __call__(self, honest, weights=None, words=None, info=None):
        return -honest_mean(honest, weights)


class InnerProductManipulation(AbstractAttack):
    """-tau mean of the honest vectors (ByzFL's ``InnerProductManipulation``).

    With f of n participants Byzantine and the plain mean, the aggregate is
    ((n - f) - f tau)/n times the honest mean (:func:`fedjax_abc.theory.ipm_contraction`).

    Reference: Xie, Koyejo and Gupta, "Fall of empires", UAI 2019.
    """

    tau: Float[Array, ""]

    def __init__(self, tau=2.0):
        self.tau = nonnegative_scalar("InnerProductManipulation's tau", tau)

    def __check_init__(self):
        check_leaf("InnerProductManipulation's tau", self.tau, 0.0, strict=False)

    def __call__(self, honest, weights=None, words=None, info=None):
        return -self.tau.astype(honest.dtype) * honest_mean(honest, weights)


class ALittleIsEnough(AbstractAttack):
    """mean + tau std of the honest vectors, coordinate-wise, std with ddof = 1 (ByzFL's
    ``ALittleIsEnough``); :func:`alie_z_max` gives Baruch et al.'s tau.

    Reference: Baruch, Baruch and Goldberg, "A little is enough", NeurIPS 2019.
    """

    tau: Float[Array, ""]

    def __init__(self, tau=1.5):
        self.tau = positive_scalar("ALittleIsEnough's tau", tau)

    def __check_init__(self):
        check_leaf("ALittleIsEnough's tau", self.tau, 0.0, strict=True)

    def __call__(self, honest, weights=None, words=None, info=None):
        return honest_mean(honest, weights) + self.tau.astype(honest.dtype) * _honest_std(
            honest, weights)


def alie_z_max(n: int, f: int) -> float:
    """Baruch et al.'s z_max: s = floor(n/2 + 1) - f honest inputs must be won over, and
    z_max = Phi^{-1}((n - s)/n) (Baruch, Baruch and Goldberg, NeurIPS 2019, Algorithm 3)."""
    n = check_count("n", n)
    f = check_count("f", f, low=0)
    s = n // 2 + 1 - f
    if not 0 < s < n:
        raise ValueError(f"alie_z_max needs 0 < floor(n/2 + 1) - f < n, got n={n}, f={f}")
    return statistics.NormalDist().inv_cdf((n - s) / n)


class Gaussian(AbstractAttack):
    """A vector of independent N(mu, sigma^2) entries, drawn from the round's words
    (ByzFL's ``Gaussian``: one draw for all Byzantine participants)."""

    mu: Float[Array, ""]
    sigma: Float[Array, ""]

    def __init__(self, mu=0.0, sigma=1.0):
        self.mu = _finite("Gaussian's mu", mu)
        self.sigma = nonnegative_scalar("Gaussian's sigma", sigma)

    def __check_init__(self):
        check_leaf("Gaussian's mu", self.mu, -np.inf, strict=False)
        check_leaf("Gaussian's sigma", self.sigma, 0.0, strict=False)

    def num_words(self, dim):
        return dim

    def __call__(self, honest, weights=None, words=None, info=None):
        dim = honest.shape[1]
        if words is None:
            raise ValueError(f"Gaussian draws its vector: give it {dim} uint32 words")
        z = normals_from_words(words, dim, honest.dtype)
        return self.mu.astype(honest.dtype) + self.sigma.astype(honest.dtype) * z


def _finite(name: str, value):
    v = check_real(name, value)
    if not np.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v}")
    return np.asarray(v, np.float64)


class Mimic(AbstractAttack):
    """The honest vector of present honest participant ``epsilon`` (in slot order; ByzFL's
    ``Mimic``): the Byzantine ones repeat one honest client, overweighting it.

    Reference: Karimireddy, He and Jaggi, ICLR 2022.
    """

    epsilon: int = eqx.field(static=True)

    def __init__(self, epsilon: int = 0):
        self.epsilon = check_count("Mimic's epsilon", epsilon, low=0)

    def __call__(self, honest, weights=None, words=None, info=None):
        rows, present, k = present_first(honest, weights)
        return rows[jnp.minimum(self.epsilon, jnp.maximum(k - 1, 0))]


class LabelFlip(AbstractAttack):
    """ByzFL's ``LabelFlipping``: every Byzantine participant sends the mean of the honest
    participants' updates computed on their data with the labels flipped, y -> K - 1 - y
    (their local steps repeated on the flipped problem, with the same random numbers). A
    learning problem's attack: any other is refused when the run is built.

    Reference: Tolpegin, Truex, Gursoy and Liu, "Data poisoning attacks against federated
    learning systems", ESORICS 2020; ByzFL's ``Client`` (targets flipped as K - 1 - y).
    """

    def poisoned(self, problem):
        return with_flipped_labels(problem)

    def __call__(self, honest, weights=None, words=None, info=None):
        if info is None or info.poisoned is None:
            raise ValueError("LabelFlip sends the mean of the honest updates on flipped labels: "
                             "give it an AttackInfo whose poisoned holds them (a run does)")
        return honest_mean(info.poisoned, weights)


class Inf(AbstractAttack):
    """A vector of +inf (ByzFL's ``Inf``): breaks any rule without a filter."""

    def __call__(self, honest, weights=None, words=None, info=None):
        return jnp.full(honest.shape[1:], jnp.inf, honest.dtype)


def _line_search(evaluate, start, delta, ratio, evals: int):
    """ByzFL's search for the attack's scale: an expansion phase (delta doubling while the
    distance grows, then delta times ratio), then a contraction phase (delta times ratio
    every try, keeping the best), ``evals`` evaluations in all. Returns the best scale."""
    best_y = evaluate(start)

    def body(i, carry):
        best_x, best_y, delta, expanding = carry
        x = best_x + delta
        y = evaluate(x)
        better = y > best_y
        grow = expanding & better
        delta = jnp.where(grow, delta * 2, delta * ratio)
        return (jnp.where(better, x, best_x), jnp.where(better, y, best_y), delta,
                expanding & better)

    best_x, *_ = jax.lax.fori_loop(0, evals - 1, body,
                                   (start, best_y, delta, jnp.asarray(True)))
    return best_x


class _AbstractOptimal(AbstractAttack):
    """An attack of one scale chosen each round to push the aggregate farthest from the
    honest mean, against the aggregator in use (ByzFL's ``Optimal_*``)."""

    evals: int = eqx.field(static=True)
    start: Float[Array, ""]
    delta: Float[Array, ""]
    ratio: Float[Array, ""]

    @abc.abstractmethod
    def scaled(self, honest, weights, tau) -> Array:
        """The attack's vector at scale tau."""

    def __call__(self, honest, weights=None, words=None, info=None):
        if info is None:
            raise ValueError(f"{type(self).__name__} evaluates the aggregator in use: give it "
                             "an AttackInfo (fa.robust.standalone_info outside a run)")
        target = honest_mean(honest, weights)
        dtype = honest.dtype

        def distance(tau):
            gap = info.aggregate_with(self.scaled(honest, weights, tau)) - target
            return jnp.sqrt(jnp.sum(gap ** 2))

        tau = _line_search(distance, self.start.astype(dtype), self.delta.astype(dtype),
                           self.ratio.astype(dtype), self.evals)
        return self.scaled(honest, weights, tau)


def _optimal_fields(obj, evals, start, delta, ratio) -> None:
    name = type(obj).__name__
    obj.evals = check_count(f"{name}'s evals", evals)
    obj.start = _finite(f"{name}'s start", start)
    delta = _finite(f"{name}'s delta", delta)
    if float(delta) == 0:
        raise ValueError(f"{name}'s delta must be nonzero")
    obj.delta = delta
    ratio = _finite(f"{name}'s ratio", ratio)
    if not 0.5 < float(ratio) < 1:
        raise ValueError(f"{name}'s ratio must be in (0.5, 1), got {float(ratio)}")
    obj.ratio = ratio


class OptimalInnerProductManipulation(_AbstractOptimal):
    """IPM with its tau searched every round against the aggregator in use (ByzFL's
    ``Optimal_InnerProductManipulation``: ``evals`` evaluations from ``start``, step
    ``delta``, shrink ``ratio``)."""

    def __init__(self, evals: int = 20, start=0.0, delta=10.0, ratio=0.8):
        _optimal_fields(self, evals, start, delta, ratio)

    def scaled(self, honest, weights, tau):
        return -tau * honest_mean(honest, weights)


class OptimalALittleIsEnough(_AbstractOptimal):
    """ALIE with its tau searched every round against the aggregator in use (ByzFL's
    ``Optimal_ALittleIsEnough``)."""

    def __init__(self, evals: int = 20, start=0.0, delta=10.0, ratio=0.8):
        _optimal_fields(self, evals, start, delta, ratio)

    def scaled(self, honest, weights, tau):
        return honest_mean(honest, weights) + tau * _honest_std(honest, weights)
