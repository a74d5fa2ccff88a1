"""Communication topologies: who each node averages with in round t.

A topology is a value (an ``equinox.Module``) whose :meth:`AbstractTopology.graph` gives
round t's padded neighbour lists (:class:`~fedjax_abc._decentral._mixing.Graph`) as a pure,
jittable function of t and uint32 random words; a weights rule
(:mod:`~fedjax_abc._decentral._weights`) makes them a mixing matrix
(:meth:`AbstractTopology.neighbours`, dense: :meth:`AbstractTopology.matrix`).

Static (the same graph every round, no words):

- :class:`Ring`: node i with i - 1 and i + 1 (mod n); n >= 3.
- :class:`Torus`: a rows x cols grid wrapped both ways, node r cols + c with its four
  neighbours; rows, cols >= 3, n = rows cols.
- :class:`Complete`: every pair; n >= 2 (W = 11^T / n under both weight rules).
- :class:`Star`: node 0 with every other; n >= 2.

Random or time-varying:

- :class:`ErdosRenyi`: each pair an edge with probability p, drawn once per trial from
  ``num_trial_words(n)`` = n (n - 1) / 2 words (:meth:`ErdosRenyi.init_state`).
- :class:`Exponential`: the one-peer exponential graph of Ying, Yuan, Chen, Hu, Pan and Yin,
  "Exponential Graph is Provably Efficient for Decentralized Deep Training", NeurIPS 2021:
  in round t node i averages with node i + 2^(t mod tau) (mod n), tau = ceil(log2 n),
  weights 1/2. No words.
- :class:`RandomMatching`: a uniformly random matching each round from ``num_words(n)`` =
  n words; matched pairs average (weight 1/2), the unmatched node of an odd n keeps its
  value.

How many words a topology needs: :meth:`AbstractTopology.num_words` a round and
:meth:`AbstractTopology.num_trial_words` a trial (both 0 for the static ones), as the
samplers' ``num_words`` (``fedjax_abc._problems._samplers``): the engine hands them over
from the trial's counter streams; nothing here holds a key.
"""


import abc
import math
from typing import ClassVar, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from fedjax_abc._decentral._mixing import Graph, Neighbours, dense
from fedjax_abc._decentral._weights import AbstractWeights, MetropolisHastings
from fedjax_abc._problems._args import check_count

__all__ = ["AbstractTopology", "Complete", "ErdosRenyi", "Exponential", "RandomMatching",
           "Ring", "Star", "Torus", "check_words"]


def check_words(owner: str, words, count: int) -> Array:
    """``words`` as a uint32 array of shape (count,), or ValueError naming ``owner``."""
    shape = None if words is None else tuple(jnp.shape(words))
    if shape != (count,):
        raise ValueError(f"{owner} needs {count} uint32 words, got "
                         f"{'none' if shape is None else f'shape {shape}'}")
    words = jnp.asarray(words)
    if not jnp.issubdtype(words.dtype, jnp.integer):
        raise ValueError(f"{owner} needs uint32 words, got dtype {words.dtype}")
    return words.astype(jnp.uint32)


def _nodes(n: int) -> Array:
    return jnp.arange(n, dtype=jnp.int32)


def _all_present(index: Array) -> Graph:
    return Graph(index.astype(jnp.int32), jnp.ones(index.shape, bool))


class AbstractTopology(eqx.Module):
    """Who node i reads from in round t, as padded neighbour lists.

    Subclasses implement :meth:`graph` and :meth:`max_degree`, say whether their graph
    changes with t (``time_varying``) and lists every edge both ways (``symmetric``), and
    give :meth:`num_words` / :meth:`num_trial_words` / :meth:`init_state` where they draw.
    """

    time_varying: eqx.AbstractClassVar[bool]
    """True when the graph depends on the round t (:class:`Exponential`)."""

    symmetric: eqx.AbstractClassVar[bool]
    """True when j is listed in row i exactly when i is in row j (all but
    :class:`Exponential`): then both weight rules give a symmetric W."""

    @abc.abstractmethod
    def max_degree(self, n: int) -> int:
        """k_max: the slots of a row (a Python int, static)."""

    @abc.abstractmethod
    def graph(self, n: int, t=0, words: Optional[Array] = None, state=None) -> Graph:
        """Round t's :class:`Graph` on n nodes from the round's ``num_words(n)`` uint32
        words and the trial's ``state`` (:meth:`init_state`); static topologies ignore
        t, words and state. Jittable with n static, t, words and state traced."""

    def validate(self, n: int) -> None:
        """Raises ValueError where the topology has no graph on n nodes (default: n < 2)."""
        n = check_count("n (nodes)", n)
        if n < 2:
            raise ValueError(f"{type(self).__name__} needs n >= 2 nodes, got n={n}")

    def num_words(self, n: int) -> int:
        """uint32 random words a round needs (default: none)."""
        return 0

    def num_trial_words(self, n: int) -> int:
        """uint32 random words a trial needs once, for :meth:`init_state` (default: none)."""
        return 0

    def init_state(self, n: int, trial_words: Optional[Array] = None):
        """What a trial draws once (its ``num_trial_words(n)`` words): None by default; the
        graph of an :class:`ErdosRenyi` trial."""
        return None

    def period(self, n: int) -> Optional[int]:
        """The number of rounds after which a deterministic time-varying graph repeats
        (:class:`Exponential`'s tau); None for the others."""
        return None

    def neighbours(self, n: int, weights: Optional[AbstractWeights] = None, t=0,
                   words: Optional[Array] = None, state=None) -> Neighbours:
        """Round t's mixing matrix as :class:`Neighbours`: ``weights`` (default
        :class:`~fedjax_abc.decentral.MetropolisHastings`) applied to :meth:`graph`."""
        weights = MetropolisHastings() if weights is None else weights
        return weights(self.graph(n, t, words, state))

    def matrix(self, n: int, weights: Optional[AbstractWeights] = None, t=0,
               words: Optional[Array] = None, state=None) -> Float[Array, "n n"]:
        """Round t's dense mixing matrix W (n, n): :meth:`neighbours` written out."""
        return dense(self.neighbours(n, weights, t, words, state))


class Ring(AbstractTopology):
    """Node i with i - 1 and i + 1 (mod n), in that order; n >= 3 (two distinct neighbours).

    Under :class:`~fedjax_abc.decentral.MetropolisHastings` (or the uniform rule) W has
    1/3 on the diagonal and both neighbours, eigenvalues 1/3 + 2/3 cos(2 pi k / n).

    Example:
      >>> from fedjax_abc import decentral
      >>> decentral.Ring().graph(5).index[0].tolist()
      [4, 1]
    """

    time_varying: ClassVar[bool] = False
    symmetric: ClassVar[bool] = True

    def validate(self, n):
        n = check_count("n (nodes)", n)
        if n < 3:
            raise ValueError(f"Ring needs n >= 3 nodes, got n={n}")

    def max_degree(self, n):
        return 2

    def graph(self, n, t=0, words=None, state=None):
        self.validate(n)
        i = _nodes(n)
        return _all_present(jnp.stack([(i - 1) % n, (i + 1) % n], axis=1))


class Torus(AbstractTopology):
    """A rows x cols grid wrapped both ways: node r cols + c with its neighbours above,
    below, left and right (mod rows, cols), in that order; n = rows cols, rows, cols >= 3
    (four distinct neighbours).

    Attributes:
      rows, cols: the grid's sides (static).
    """

    time_varying: ClassVar[bool] = False
    symmetric: ClassVar[bool] = True

    rows: int = eqx.field(static=True)
    cols: int = eqx.field(static=True)

    def __check_init__(self):
        for name in ("rows", "cols"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 3:
                raise ValueError(f"Torus {name} must be an integer >= 3, got {value!r}")

    def validate(self, n):
        n = check_count("n (nodes)", n)
        if n != self.rows * self.cols:
            raise ValueError(f"Torus({self.rows}, {self.cols}) has {self.rows * self.cols} "
                             f"nodes, got n={n}")

    def max_degree(self, n):
        return 4

    def graph(self, n, t=0, words=None, state=None):
        self.validate(n)
        R, C = self.rows, self.cols
        r, c = _nodes(n) // C, _nodes(n) % C
        return _all_present(jnp.stack([((r - 1) % R) * C + c, ((r + 1) % R) * C + c,
                                       r * C + (c - 1) % C, r * C + (c + 1) % C], axis=1))


class Complete(AbstractTopology):
    """Every pair of nodes; node i's neighbours in increasing order. Both weight rules give
    W = 11^T / n (consensus in one step). Its rows have n - 1 slots: cost n^2 a step."""

    time_varying: ClassVar[bool] = False
    symmetric: ClassVar[bool] = True

    def max_degree(self, n):
        return n - 1

    def graph(self, n, t=0, words=None, state=None):
        self.validate(n)
        i, k = _nodes(n)[:, None], _nodes(n - 1)[None, :]
        return _all_present(jnp.where(k < i, k, k + 1))


class Star(AbstractTopology):
    """Node 0 (the hub) with every other node; a leaf's one neighbour in slot 0, its other
    n - 2 slots padding (the hub's degree sets k_max = n - 1: cost n^2 a step).

    Under :class:`~fedjax_abc.decentral.MetropolisHastings` every edge has weight 1/n, a
    leaf keeps 1 - 1/n and the hub 1/n; W's second eigenvalue is 1 - 1/n.
    """

    time_varying: ClassVar[bool] = False
    symmetric: ClassVar[bool] = True

    def max_degree(self, n):
        return n - 1

    def graph(self, n, t=0, words=None, state=None):
        self.validate(n)
        i, k = _nodes(n)[:, None], _nodes(n - 1)[None, :]
        hub = i == 0
        index = jnp.where(hub, k + 1, jnp.where(k == 0, 0, i))
        return Graph(index, hub | (k == 0))


def _bad_p(p):
    raise ValueError(f"ErdosRenyi's p must be a number in (0, 1], got {p!r}")


class ErdosRenyi(AbstractTopology):
    """G(n, p): each of the n (n - 1) / 2 pairs an edge independently with probability p,
    drawn once per trial (the same graph every round of the trial).

    Words: ``num_trial_words(n)`` = n (n - 1) / 2, one per pair (i, j), i < j, in the
    row-major order of the upper triangle (NumPy's ``triu_indices(n, 1)``); the pair is an
    edge when its word w satisfies w < p 2^32 (probability ceil(p 2^32) / 2^32, within
    2^-32 of p). :meth:`init_state` draws the trial's :class:`Graph` (node i's neighbours
    in increasing order, k_max = n - 1 slots); :meth:`graph` returns it every round. A
    draw may be disconnected (``fedjax_abc.decentral.is_connected``); the theory needs it
    connected (``fa.theory.mixing_parameter`` refuses lambda_2 = 1).

    Attributes:
      p: the edge probability in (0, 1] (an array leaf: a new p compiles nothing new).
    """

    time_varying: ClassVar[bool] = False
    symmetric: ClassVar[bool] = True

    p: Float[Array, ""]

    def __init__(self, p):
        if isinstance(p, (str, bytes, bool)) or np.ndim(p) != 0 or not np.isreal(p):
            _bad_p(p)
        self.p = jnp.asarray(p, float)

    def __check_init__(self):  # also for a value put in by eqx.tree_at (a sweep's axis)
        if not isinstance(self.p, jax.core.Tracer) and not 0.0 < float(self.p) <= 1.0:
            _bad_p(float(self.p))

    def max_degree(self, n):
        return n - 1

    def num_trial_words(self, n):
        return n * (n - 1) // 2

    def init_state(self, n, trial_words=None):
        """The trial's graph from its n (n - 1) / 2 words (see the class)."""
        self.validate(n)
        words = check_words(f"ErdosRenyi on n={n} nodes (once a trial)", trial_words,
                            self.num_trial_words(n))
        iu, ju = np.triu_indices(n, 1)
        scale = jnp.asarray(2.0 ** 32, self.p.dtype)
        edge = words.astype(self.p.dtype) < self.p * scale
        adjacency = jnp.zeros((n, n), bool).at[iu, ju].set(edge)
        adjacency = adjacency | adjacency.T
        # row i's neighbours in increasing order: neighbour j goes to slot (its rank in the
        # row); a non-neighbour to slot n - 1, past the last, and is dropped
        slot = jnp.where(adjacency, jnp.cumsum(adjacency, axis=1, dtype=jnp.int32) - 1, n - 1)
        rows = jnp.broadcast_to(_nodes(n)[:, None], (n, n))
        cols = jnp.broadcast_to(_nodes(n)[None, :], (n, n))
        index = jnp.broadcast_to(_nodes(n)[:, None], (n, n - 1)).at[rows, slot].set(
            cols, mode="drop")
        degree = jnp.sum(adjacency, axis=1, dtype=jnp.int32)
        return Graph(index, _nodes(n - 1)[None, :] < degree[:, None])

    def graph(self, n, t=0, words=None, state=None):
        if not isinstance(state, Graph):
            raise ValueError("ErdosRenyi draws its graph once a trial: pass "
                             "state=topology.init_state(n, trial_words)")
        return state


def _log2_ceil(n: int) -> int:
    return max(1, math.ceil(math.log2(n)))


class Exponential(AbstractTopology):
    """The one-peer exponential graph (Ying et al., NeurIPS 2021): in round t node i
    averages with node (i + 2^(t mod tau)) mod n, tau = ceil(log2 n), weights 1/2:

        W_t = (I + P^(2^(t mod tau))) / 2,   P the cyclic shift (P X)_i = X_{i+1 mod n}.

    Each W_t is doubly stochastic but not symmetric (node i reads from i + 2^k and is read
    by i - 2^k). For n a power of 2, any tau consecutive rounds average exactly: the W_t
    commute and W_{tau-1} ... W_0 = 2^-tau sum_{s=0}^{n-1} P^s = 11^T / n (each shift
    s < n is one sum of distinct powers of 2). For other n the graph is defined the same
    way (its rounds still mix, without exact averaging). No words; n >= 2.
    """

    time_varying: ClassVar[bool] = True
    symmetric: ClassVar[bool] = False

    def max_degree(self, n):
        return 1

    def period(self, n):
        return _log2_ceil(n)

    def graph(self, n, t=0, words=None, state=None):
        self.validate(n)
        tau = _log2_ceil(n)
        shift = jnp.left_shift(jnp.int32(1), jnp.asarray(t, jnp.int32) % tau)
        return _all_present(((_nodes(n) + shift) % n)[:, None])


class RandomMatching(AbstractTopology):
    """A uniformly random matching each round: matched pairs average (weight 1/2).

    Words: ``num_words(n)`` = n a round, one per node. The nodes sorted by their words
    (ties, of probability below n^2 / 2^33, by node index) form a uniformly random
    permutation pi; positions 2m and 2m + 1 are matched, m < n // 2 (for odd n the node at
    the last position is unmatched and keeps its value). For even n this is a uniformly
    random perfect matching; E||W X - Xbar||^2 = (n - 2) / (2 (n - 1)) ||X - Xbar||^2
    (``fa.theory.expected_matching_contraction``). n >= 2.
    """

    time_varying: ClassVar[bool] = False
    symmetric: ClassVar[bool] = True

    def max_degree(self, n):
        return 1

    def num_words(self, n):
        return n

    def graph(self, n, t=0, words=None, state=None):
        self.validate(n)
        words = check_words(f"RandomMatching on n={n} nodes (a round)", words, n)
        order = jnp.argsort(words, stable=True).astype(jnp.int32)  # position -> node
        mate = _nodes(n) ^ 1                                       # position -> its pair's
        partner = jnp.where(mate < n, order[jnp.minimum(mate, n - 1)], order)
        index = jnp.zeros((n,), jnp.int32).at[order].set(partner)
        return Graph(index[:, None], (index != _nodes(n))[:, None])
