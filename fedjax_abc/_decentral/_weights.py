"""Mixing weights: a round's graph -> its doubly stochastic mixing matrix W.

A rule is a value (an ``equinox.Module``) and a pure function of one round's
:class:`~fedjax_abc._decentral._mixing.Graph`: ``rule(graph) -> Neighbours``, jittable and
vmappable. With deg_i the number of node i's neighbours:

- :class:`MetropolisHastings`: w_ij = 1 / (1 + max(deg_i, deg_j)) on an edge, the rest of
  the row on the diagonal (Xiao, Boyd and Lall, "A scheme for robust distributed sensor
  fusion based on average consensus", IPSN 2005): symmetric and doubly stochastic
  on any symmetric graph, with positive self weights.
- :class:`UniformWeights`: the max-degree rule w_ij = 1 / (1 + deg_max) on an edge, the
  rest on the diagonal (Xiao and Boyd, "Fast linear iterations for distributed averaging",
  Systems & Control Letters 2004). On a regular graph (ring, torus, complete,
  the one-peer graphs) it is the uniform average 1 / (deg + 1) over a node and its
  neighbours; on an irregular graph it stays symmetric and doubly stochastic, where
  1 / (deg_i + 1) would not be.
- :class:`Matrix`: a user's dense symmetric doubly stochastic W (checked on input), read on
  the graph's edges: the graph must hold W's off-diagonal support
  (:meth:`Matrix.validate`).

On the one-peer graphs (:class:`~fedjax_abc.decentral.Exponential`,
:class:`~fedjax_abc.decentral.RandomMatching`) every listed node has one neighbour, so both
rules give the weight 1/2 that those topologies are defined with (an unmatched node keeps
its value, self weight 1).
"""

from __future__ import annotations

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from fedjax_abc._decentral._mixing import Graph, Neighbours

__all__ = ["AbstractWeights", "Matrix", "MetropolisHastings", "STOCHASTIC_TOL",
           "UniformWeights", "check_doubly_stochastic"]

# how far from 1 a row or column sum of a given W may be (and how far from symmetric W is)
STOCHASTIC_TOL = 1e-12


class AbstractWeights(eqx.Module):
    """A rule from a round's graph to its mixing weights.

    Subclass it and implement ``__call__``; a rule that fits only some topologies or sizes
    says so in :meth:`validate`.
    """

    @abc.abstractmethod
    def __call__(self, graph: Graph) -> Neighbours:
        """The round's :class:`Neighbours`: W's weights on the graph's slots (0 on padding)
        and its diagonal."""

    def validate(self, topology, n: int) -> None:
        """Raises ValueError where the rule cannot weight ``topology`` on n nodes (default:
        it can)."""


def _degrees(graph: Graph) -> Array:
    return jnp.sum(graph.present, axis=1, dtype=jnp.int32)


def _with_self(graph: Graph, weight: Array) -> Neighbours:
    """Neighbours with each row's remaining weight, 1 - sum_k w_ik, on its diagonal."""
    return Neighbours(graph.index, weight, 1.0 - jnp.sum(weight, axis=1))


class MetropolisHastings(AbstractWeights):
    """w_ij = 1 / (1 + max(deg_i, deg_j)) on each edge, w_ii = 1 - sum_{j != i} w_ij.

    Symmetric because max(deg_i, deg_j) is; each row sums to 1 by construction and
    w_ii >= 1 - deg_i / (1 + deg_i) > 0. Reference: Xiao, Boyd and Lall, IPSN 2005.

    Example:
      >>> from fedjax_abc import decentral
      >>> decentral.Ring().matrix(4)[0].tolist()          # deg 2: 1/3 each
      [0.333..., 0.333..., 0.0, 0.333...]
    """

    def __call__(self, graph):
        deg = _degrees(graph)
        top = jnp.maximum(deg[:, None], deg[graph.index])
        weight = jnp.where(graph.present, 1.0 / (1.0 + top), 0.0)
        return _with_self(graph, weight)


class UniformWeights(AbstractWeights):
    """The max-degree rule: w_ij = 1 / (1 + deg_max) on each edge, w_ii = 1 - deg_i w.

    On a regular graph of degree deg this is 1 / (deg + 1) on a node and each of its
    neighbours: the uniform average. On an irregular graph (a star, an Erdos-Renyi draw)
    the rule 1 / (deg_i + 1) would not be doubly stochastic; the max-degree rule is, and
    gives the low-degree nodes the extra self weight. Reference: Xiao and Boyd, Systems &
    Control Letters 2004.
    """

    def __call__(self, graph):
        deg = _degrees(graph)
        weight = jnp.where(graph.present, 1.0 / (1.0 + jnp.max(deg)), 0.0)
        return _with_self(graph, weight)


def check_doubly_stochastic(name: str, W, symmetric: bool = True,
                            tol: float = STOCHASTIC_TOL) -> np.ndarray:
    """``W`` as a float64 NumPy matrix, or ValueError (one line) unless it is square,
    finite, non-negative, with every row and column summing to 1 within ``tol`` (default
    :data:`STOCHASTIC_TOL`) and, where asked, symmetric within it."""
    try:
        a = np.asarray(W, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a square matrix of real numbers") from None
    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape[0] < 1:
        raise ValueError(f"{name} must be a square matrix, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite")
    if np.any(a < 0):
        i, j = np.argwhere(a < 0)[0]
        raise ValueError(f"{name} must be non-negative, got {name}[{i}, {j}] = {a[i, j]:g}")
    for axis, what in ((1, "row"), (0, "column")):
        sums = a.sum(axis=axis)
        bad = np.abs(sums - 1.0) > tol
        if np.any(bad):
            i = int(np.argmax(bad))
            raise ValueError(f"{name} is not doubly stochastic: {what} {i} sums to "
                             f"{float(sums[i])!r}")
    if symmetric and np.any(np.abs(a - a.T) > tol):
        i, j = np.argwhere(np.abs(a - a.T) > tol)[0]
        raise ValueError(f"{name} must be symmetric, got {name}[{i}, {j}] = {a[i, j]:g} "
                         f"but {name}[{j}, {i}] = {a[j, i]:g}")
    return a


class Matrix(AbstractWeights):
    """A given symmetric doubly stochastic W (n x n), read on the graph's edges.

    W is checked when built (and again after ``eqx.tree_at``): square, non-negative, rows
    and columns summing to 1 within 1e-12, symmetric within 1e-12. The round's weights are
    W[i, index[i, k]] on the present slots and W[i, i] on the diagonal, so the mixing is W
    exactly when every off-diagonal nonzero of W is an edge of the graph: use it with the
    static topology W was built on (its cost is that graph's), or with
    :class:`~fedjax_abc.decentral.Complete` for any W (cost n^2). :meth:`validate` checks it.

    Attributes:
      W: (n, n) float64 array leaf (a sweep over matrices of one shape compiles nothing
        new; in a float32 program its weights are rounded to float32).

    Example:
      >>> import numpy as np
      >>> from fedjax_abc import decentral
      >>> W = np.array([[0.5, 0.5, 0.0], [0.5, 0.25, 0.25], [0.0, 0.25, 0.75]])
      >>> decentral.Complete().matrix(3, decentral.Matrix(W))[1].tolist()
      [0.5, 0.25, 0.25]
    """

    W: Float[Array, "n n"]

    def __init__(self, W):
        self.W = check_doubly_stochastic("W", W)

    def __check_init__(self):  # also for a W put in by eqx.tree_at (a sweep's axis)
        if not isinstance(self.W, jax.core.Tracer):
            dtype = np.asarray(self.W).dtype
            eps = np.finfo(dtype).eps if np.issubdtype(dtype, np.floating) else 0.0
            check_doubly_stochastic("W", self.W,
                                    tol=max(STOCHASTIC_TOL, 8 * np.shape(self.W)[0] * eps))

    def validate(self, topology, n):
        if self.W.shape != (n, n):
            raise ValueError(f"Matrix(W) has W of shape {tuple(self.W.shape)}, not ({n}, {n}) "
                             f"for n={n} nodes")
        if topology.time_varying or topology.num_words(n) or topology.num_trial_words(n):
            raise ValueError(f"Matrix(W) needs a static topology, got "
                             f"{type(topology).__name__}")
        graph = topology.graph(n)
        edge = np.eye(n, dtype=bool)
        rows = np.broadcast_to(np.arange(n)[:, None], graph.index.shape)
        present = np.asarray(graph.present)
        edge[rows[present], np.asarray(graph.index)[present]] = True
        off = (np.asarray(self.W) != 0) & ~edge
        if np.any(off):
            i, j = np.argwhere(off)[0]
            raise ValueError(f"Matrix(W) puts weight on ({i}, {j}), which is no edge of "
                             f"{type(topology).__name__}")

    def __call__(self, graph):
        W = jnp.asarray(self.W)
        n = graph.index.shape[0]
        rows = jnp.arange(n)[:, None]
        weight = jnp.where(graph.present, W[rows, graph.index], 0.0)
        return Neighbours(graph.index, weight, jnp.diagonal(W))
