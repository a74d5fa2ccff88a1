"""Aggregation rules: a round's messages -> the server's aggregate, robust or not.

A rule is a value (an ``equinox.Module``) and a pure function of one trial's round:
``rule(vectors, weights, words) -> aggregate``, with ``vectors`` of shape (m, D) (one row a
slot), ``weights`` (m,) (weight 0: an absent slot) and ``words`` the uint32 random words
the rule asks for (:meth:`AbstractAggregator.num_words`; none for the deterministic ones).
Every rule but :class:`WeightedMean` treats the present slots alike (their weights'
sizes do not count), as the papers define them; in a run it needs a sampler with unit
weights.

The definitions are those of ByzFL (EPFL's reference library for Byzantine-robust
learning, ``byzfl.aggregators``), on the present rows in slot order: the same output on
the same input. Where the papers leave a choice (ties, the even median, Krum's number of
neighbours, the geometric median's start), ByzFL's is taken and named in the docstring.

In a run the engine hands a rule the participants' messages relative to the round's
origin (the message of a client whose local model did not move: x_t for the model
FedAvg sends), so that rules which are not translation-equivariant (clipping) clip
updates, not models (:meth:`~fedjax_abc.algorithms.AbstractAlgorithm.origin`).
"""


import abc
import itertools
import math
from typing import ClassVar, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from fedjax_abc._algorithms._checks import check_leaf, positive_scalar
from fedjax_abc._problems._args import check_count
from fedjax_abc._robust import _kappa

__all__ = ["AbstractAggregator", "COMPARISON_ROWS", "CenteredClipping", "GeometricMedian",
           "Krum", "MDA", "MDA_MAX_SUBSETS", "Median", "MultiKrum", "TrimmedMean",
           "WeightedMean", "at_rank", "check_f_leaf", "f_leaf", "pairwise_distances",
           "present_first", "ranks"]


def present_first(vectors: Array, weights: Optional[Array]) -> tuple[Array, Array, Array]:
    """The rows with a positive weight first, in slot order, then the absent ones:
    (rows (m, D), present (m,) bool, k = how many are present)."""
    m = vectors.shape[0]
    if weights is None:
        return vectors, jnp.ones((m,), bool), jnp.asarray(m, jnp.int32)
    present = weights > 0
    k = jnp.sum(present, dtype=jnp.int32)
    # each row's place: the present ones in slot order, then the absent ones (no sort)
    place = jnp.where(present, jnp.cumsum(present) - 1, k + jnp.cumsum(~present) - 1)
    order = jnp.zeros((m,), jnp.int32).at[place].set(jnp.arange(m, dtype=jnp.int32))
    return vectors[order], jnp.arange(m) < k, k


# up to this many rows, order statistics come from comparing every pair of rows, where
# XLA:CPU's sort of a short axis costs several times as much; beyond, from a sort
COMPARISON_ROWS = 32


def ranks(values: Array) -> Array:
    """Each entry's place in the stable ascending order along axis 0 (ties by index), for
    every other axis: the inverse of ``jnp.argsort(values, axis=0, stable=True)``."""
    m = values.shape[0]
    if m > COMPARISON_ROWS:
        return jnp.argsort(jnp.argsort(values, axis=0, stable=True), axis=0, stable=True)
    i = jnp.arange(m).reshape((m, 1) + (1,) * (values.ndim - 1))
    a, b = values[:, None], values[None, :]  # entry i against entry j
    before = (b < a) | ((b == a) & (i.swapaxes(0, 1) < i))
    return jnp.sum(before, axis=1, dtype=jnp.int32)


def at_rank(values: Array, rank: Array, r) -> Array:
    """The entry of rank ``r`` along axis 0 (``ranks``), for every other axis."""
    return jnp.sum(jnp.where(rank == r, values, 0), axis=0)


def pairwise_distances(vectors: Array) -> Array:
    """||v_i - v_j||^2 for every pair of rows, (m, m), from the differences themselves (as
    SciPy's ``cdist``): no cancellation between close rows, and no (m, m, D) array."""
    return jax.vmap(lambda v: jnp.sum((vectors - v) ** 2, axis=-1))(vectors)


def _ranked_present(vectors: Array, present: Array) -> tuple[Array, Array]:
    """Every coordinate's values with the absent rows at +inf, and their ranks (``ranks``:
    the present rows first, an absent row after any present one of the same value)."""
    values = jnp.where(present[:, None], vectors, jnp.inf)
    return values, ranks(values)


def _mean_of(vectors: Array, take: Array) -> Array:
    """The mean of the rows where ``take`` (at least one)."""
    total = jnp.sum(jnp.where(take[:, None], vectors, 0), axis=0)
    return total / jnp.maximum(jnp.sum(take), 1).astype(vectors.dtype)


class AbstractAggregator(eqx.Module):
    """A rule from a round's messages (m, D) with weights (m,) to the aggregate (D,).

    Subclass it and implement ``__call__``; say whether it is the weighted mean that the
    engine may add up slot by slot (``streaming``: only :class:`WeightedMean`), and give
    ``num_words`` where the rule draws random numbers. Theory methods return None where
    nothing is published.
    """

    streaming: eqx.AbstractClassVar[bool]
    """True only for a rule that is sum_j w_j v_j / sum_j w_j: the engine then adds the
    slots' messages as they are computed, never holding a round's messages at once."""

    def num_words(self, m: int) -> int:
        """uint32 random words a round of m slots needs (default: none)."""
        return 0

    def check_slots(self, m: int) -> None:
        """Raises ValueError where the rule cannot run on m slots (default: it can)."""

    def kappa(self, n: int, f: int) -> Optional[float]:
        """The rule's (f, kappa)-robustness coefficient on n inputs, where published."""
        return None

    @abc.abstractmethod
    def __call__(self, vectors: Float[Array, "m D"], weights: Optional[Float[Array, " m"]] = None,
                 words: Optional[Array] = None) -> Float[Array, " D"]:
        """The aggregate of the present rows (weight > 0; all rows where weights is None)."""


class WeightedMean(AbstractAggregator):
    """sum_j w_j v_j / sum_j w_j (the default; Algorithm 1's average for unit weights).

    In a run, the engine's own fixed-order sum: the program of a run without robust
    aggregation. Returns zeros for a round without participants.

    Example:
      >>> import jax.numpy as jnp, fedjax_abc as fa
      >>> fa.robust.WeightedMean()(jnp.array([[0.0], [3.0]]), jnp.array([1.0, 2.0]))
      Array([2.], dtype=float64)
    """

    streaming: ClassVar[bool] = True

    def __call__(self, vectors, weights=None, words=None):
        if weights is None:
            return jnp.mean(vectors, axis=0)
        w = weights.astype(vectors.dtype)
        total = jnp.sum(w)
        return jnp.sum(w[:, None] * vectors, axis=0) / jnp.where(total > 0, total, 1)


def f_leaf(name: str, f) -> np.ndarray:
    """f as an int32 array leaf (a new f compiles nothing new); ValueError unless f is an
    integer >= 0."""
    if isinstance(f, (np.ndarray, jax.Array)) and np.ndim(f) == 0 and \
            np.issubdtype(np.asarray(f).dtype, np.integer):
        f = int(f)
    return np.asarray(check_count(f"{name}'s f (Byzantine inputs tolerated)", f, low=0),
                      np.int32)


def check_f_leaf(name: str, f) -> None:
    """:func:`f_leaf`'s check of a value put in with ``eqx.tree_at`` (tracers pass)."""
    if isinstance(f, jax.core.Tracer):
        return
    if np.ndim(f) != 0 or not np.issubdtype(np.asarray(f).dtype, np.integer) or int(f) < 0:
        raise ValueError(f"{name}'s f (Byzantine inputs tolerated) must be an integer >= 0, "
                         f"got {np.asarray(f).tolist()!r}")


def _check_majority(name: str, f, m: int, extra: int = 0) -> None:
    f = int(f)
    if m < 2 * f + 1 + extra:
        need = "n > 2f" if extra == 0 else f"n >= 2f + {1 + extra}"
        raise ValueError(f"{name}(f={f}) needs {need} inputs, got {m} slots a round")


class Median(AbstractAggregator):
    """The coordinate-wise median of the present rows (the mean of the two middle values
    where their number is even, as NumPy's and ByzFL's ``Median``).

    Reference: Yin, Chen, Ramchandran and Bartlett, ICML 2018.

    Example:
      >>> import jax.numpy as jnp, fedjax_abc as fa
      >>> fa.robust.Median()(jnp.array([[0.0, 5.0], [1.0, -1.0], [9.0, 2.0]]))
      Array([1., 2.], dtype=float64)
    """

    streaming: ClassVar[bool] = False

    def kappa(self, n, f):
        return _kappa.kappa_median(n, f)

    def __call__(self, vectors, weights=None, words=None):
        rows, present, k = present_first(vectors, weights)
        values, rank = _ranked_present(rows, present)
        low = at_rank(values, rank, jnp.maximum(k - 1, 0) // 2)
        high = at_rank(values, rank, k // 2)
        return jnp.where(low == high, low, (low + high) / 2)


class TrimmedMean(AbstractAggregator):
    """The coordinate-wise mean of the present rows with the f smallest and the f largest
    values of each coordinate left out (ByzFL's ``TrMean``; needs n > 2f). f is an int
    array leaf: a sweep over it is one program.

    Reference: Yin, Chen, Ramchandran and Bartlett, ICML 2018.
    """

    f: Int[Array, ""]
    streaming: ClassVar[bool] = False

    def __init__(self, f: int):
        self.f = f_leaf("TrimmedMean", f)

    def __check_init__(self):
        check_f_leaf("TrimmedMean", self.f)

    def check_slots(self, m):
        _check_majority("TrimmedMean", self.f, m)

    def kappa(self, n, f):
        return _kappa.kappa_trimmed_mean(n, f)

    def __call__(self, vectors, weights=None, words=None):
        rows, present, k = present_first(vectors, weights)
        values, rank = _ranked_present(rows, present)
        keep = (rank >= self.f) & (rank < k - self.f)
        total = jnp.sum(jnp.where(keep, values, 0), axis=0)
        return total / jnp.maximum(k - 2 * self.f, 1).astype(rows.dtype)


def _krum_scores(rows: Array, present: Array, k: Array, f: int) -> Array:
    """Each present row's mean squared distance to its k - f - 1 nearest other present rows
    (ByzFL's Krum: the sorted row of distances, its own 0 first, entries 1 .. k - f - 1);
    +inf for the absent rows."""
    dist = jnp.where(present[None, :], pairwise_distances(rows), jnp.inf)
    rank = ranks(dist.T).T  # each row's entries ranked along the row
    near = (rank >= 1) & (rank < k - f)
    score = jnp.sum(jnp.where(near, dist, 0), axis=1) / jnp.maximum(k - f - 1, 1)
    return jnp.where(present, score, jnp.inf)


class Krum(AbstractAggregator):
    """The present row with the smallest mean squared distance to its k - f - 1 nearest
    present neighbours (k present rows; the first such row on ties).

    ByzFL's definition: Blanchard et al.'s original counts k - f - 2 neighbours; ByzFL, and
    so this rule, k - f - 1. A run needs n >= 2f + 3 slots (the original paper's condition
    for its guarantee; ByzFL checks only n > 2f); applied to an array, k > 2f present rows.

    Reference: Blanchard, El Mhamdi, Guerraoui and Stainer, NeurIPS 2017.
    """

    f: Int[Array, ""]
    streaming: ClassVar[bool] = False

    def __init__(self, f: int):
        self.f = f_leaf("Krum", f)

    def __check_init__(self):
        check_f_leaf("Krum", self.f)

    def check_slots(self, m):
        _check_majority("Krum", self.f, m, extra=2)

    def kappa(self, n, f):
        return _kappa.kappa_krum(n, f)

    def __call__(self, vectors, weights=None, words=None):
        rows, present, k = present_first(vectors, weights)
        score = _krum_scores(rows, present, k, self.f)
        return rows[jnp.argmin(score)]


class MultiKrum(AbstractAggregator):
    """The mean of the k - f present rows of smallest Krum score (ByzFL's ``MultiKrum``; a
    run needs n >= 2f + 3 slots, as Krum).

    Reference: El Mhamdi, Guerraoui and Rouault, ICML 2018.
    """

    f: Int[Array, ""]
    streaming: ClassVar[bool] = False

    def __init__(self, f: int):
        self.f = f_leaf("MultiKrum", f)

    def __check_init__(self):
        check_f_leaf("MultiKrum", self.f)

    def check_slots(self, m):
        _check_majority("MultiKrum", self.f, m, extra=2)

    def __call__(self, vectors, weights=None, words=None):
        rows, present, k = present_first(vectors, weights)
        score = _krum_scores(rows, present, k, self.f)
        return _mean_of(rows, ranks(score) < k - self.f)


class GeometricMedian(AbstractAggregator):
    """The smoothed Weiszfeld iteration for the geometric median, as ByzFL runs it: from
    z = 0, ``iterations`` times z <- sum_i b_i v_i / sum_i b_i with
    b_i = 1 / max(||v_i - z||, nu), over the present rows without an infinite entry.

    Attributes:
      nu: the smoothing nu > 0 (an array leaf).
      iterations: T >= 0 (static).

    Reference: Pillutla, Kakade and Harchaoui, "Robust aggregation for federated
    learning", IEEE TSP 2022 (RFA, smoothed Weiszfeld).
    """

    nu: Float[Array, ""]
    iterations: int = eqx.field(static=True)
    streaming: ClassVar[bool] = False

    def __init__(self, nu=0.1, iterations: int = 3):
        self.nu = positive_scalar("GeometricMedian's nu (smoothing)", nu)
        self.iterations = check_count("GeometricMedian's iterations", iterations, low=0)

    def __check_init__(self):
        check_leaf("GeometricMedian's nu (smoothing)", self.nu, 0.0, strict=True)

    def kappa(self, n, f):
        return _kappa.kappa_geometric_median(n, f)

    def __call__(self, vectors, weights=None, words=None):
        rows, present, k = present_first(vectors, weights)
        take = present & jnp.all(jnp.isfinite(rows), axis=1)
        safe = jnp.where(take[:, None], rows, 0)
        nu = self.nu.astype(rows.dtype)
        z = jnp.zeros(rows.shape[1:], rows.dtype)
        for _ in range(self.iterations):
            size = jnp.sqrt(jnp.sum((safe - z) ** 2, axis=1))
            beta = jnp.where(take, 1 / jnp.maximum(size, nu), 0)
            z = jnp.sum(beta[:, None] * safe, axis=0) / jnp.sum(beta)
        return z


class CenteredClipping(AbstractAggregator):
    """``iterations`` times v <- v + mean_i clip(v_i - v, tau), from v = 0 (in a run: the
    round's origin, so the clipping acts on the updates), clip(u, tau) = u min(1, tau/||u||).

    ByzFL's ``CenteredClipping`` keeps its last output as the next call's start (a state
    inside the object); here every round starts at the origin, which for FedAvg's messages
    is the previous round's aggregate x_t.

    Attributes:
      tau: the clipping radius tau > 0 (an array leaf).
      iterations: L >= 1 (static).

    Reference: Karimireddy, He and Jaggi, "Learning from history for Byzantine robust
    optimization", ICML 2021.
    """

    tau: Float[Array, ""]
    iterations: int = eqx.field(static=True)
    streaming: ClassVar[bool] = False

    def __init__(self, tau=100.0, iterations: int = 1):
        self.tau = positive_scalar("CenteredClipping's tau (clipping radius)", tau)
        self.iterations = check_count("CenteredClipping's iterations", iterations)

    def __check_init__(self):
        check_leaf("CenteredClipping's tau (clipping radius)", self.tau, 0.0, strict=True)

    def __call__(self, vectors, weights=None, words=None):
        rows, present, k = present_first(vectors, weights)
        tau = self.tau.astype(rows.dtype)
        v = jnp.zeros(rows.shape[1:], rows.dtype)
        for _ in range(self.iterations):
            diff = rows - v
            size = jnp.sqrt(jnp.sum(diff ** 2, axis=1))
            factor = jnp.minimum(1, tau / size)
            v = v + _mean_of(diff * factor[:, None], present)
        return v


# MDA looks at every subset: more than this many for one round is refused
MDA_MAX_SUBSETS = 200_000


def _mda_exclusions(m: int, f: int) -> np.ndarray:
    """Every set of f of the m (present-first) rows to leave out, (C(m, f), f), in the
    order in which ByzFL meets the kept sets: for the k present rows, ByzFL visits the
    kept sets of k - f in lexicographic order, which is the descending lexicographic
    order of the left-out sets (the first row in which two kept sets differ is kept by
    the earlier one), whatever k."""
    sets = list(itertools.combinations(range(m), f))[::-1]
    return np.array(sets, np.int32).reshape(len(sets), f)


class MDA(AbstractAggregator):
    """Minimum diameter averaging: the mean of the k - f present rows whose largest pairwise
    distance is smallest (the first such set in ByzFL's order on ties), over all
    C(k, f) choices (needs n > 2f).

    Reference: El Mhamdi, Guerraoui and Rouault, ICML 2018; Rousseeuw 1985 (MVE).
    """

    f: int = eqx.field(static=True)
    streaming: ClassVar[bool] = False

    def __init__(self, f: int):
        self.f = check_count("MDA's f (Byzantine inputs tolerated)", f, low=0)

    def check_slots(self, m):
        _check_majority("MDA", self.f, m)
        count = math.comb(m, self.f)
        if count > MDA_MAX_SUBSETS:
            raise ValueError(f"MDA(f={self.f}) compares C({m}, {self.f}) = {count:.3g} subsets a "
                             f"round, more than {MDA_MAX_SUBSETS:,}: use fewer slots or "
                             "another rule")

    def kappa(self, n, f):
        return _kappa.kappa_mda(n, f)

    def __call__(self, vectors, weights=None, words=None):
        rows, present, k = present_first(vectors, weights)
        m = rows.shape[0]
        self.check_slots(m)
        out = jnp.asarray(_mda_exclusions(m, self.f))  # (C, f)
        j = jnp.arange(m)
        left = jnp.any(out[:, :, None] == j[None, None, :], axis=1)  # (C, m)
        kept = present[None, :] & ~left
        valid = jnp.all(out < k, axis=1)
        dist = pairwise_distances(rows)
        pair = kept[:, :, None] & kept[:, None, :]
        diameter = jnp.max(jnp.where(pair, dist[None], -jnp.inf), axis=(1, 2))
        best = jnp.argmin(jnp.where(valid, diameter, jnp.inf))
        return _mean_of(rows, kept[best])
