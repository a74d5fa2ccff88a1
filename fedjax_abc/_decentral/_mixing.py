"""Padded neighbour lists and one gossip step W X at the cost of the edges.

A round's mixing matrix W (n x n, doubly stochastic) is kept as padded neighbour lists:
row i of W is ``self_weight[i]`` on the diagonal and ``weight[i, k]`` at column
``index[i, k]`` for k < k_max; a padded slot has weight 0 and points at node i itself.
One step X <- W X of X (n, d) then costs O(n k_max d), not O(n^2 d):

    (W X)_i = self_weight_i X_i + sum_{k=0}^{k_max-1} weight_{ik} X_{index_{ik}},     (1)

summed in this order (the self term, then k = 0, 1, ...), the same for every node, trial and
backend: :func:`mix`. The unweighted structure of a round is a :class:`Graph` (the same
lists with a ``present`` mask in place of weights); a weights rule
(:mod:`fedjax_abc._decentral._weights`) turns it into :class:`Neighbours`.

Everything here is a pure function of arrays: jittable, and vmappable over a trials axis.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

__all__ = ["Graph", "Neighbours", "UNROLL", "dense", "is_connected", "mix"]

# up to this many slots a row, (1) is written out term by term (XLA fuses it into one pass);
# beyond, a loop over the slots keeps the program small; the order of the sum is the same
UNROLL = 8


class Graph(NamedTuple):
    """Who node i reads from in a round: padded in-neighbour lists.

    Attributes:
      index: (n, k_max) int32, node i's neighbours in a fixed order, then padding (i itself).
      present: (n, k_max) bool, False on the padded slots.

    For every topology but :class:`~fedjax_abc.decentral.Exponential` the lists are
    symmetric: j is listed in row i exactly when i is listed in row j.
    """

    index: Int[Array, "n k"]
    present: Bool[Array, "n k"]


class Neighbours(NamedTuple):
    """A round's mixing matrix W as padded neighbour lists (eq. 1).

    Attributes:
      index: (n, k_max) int32, the column of each slot (a padded slot: the row's own node).
      weight: (n, k_max), W[i, index[i, k]] (0 on a padded slot).
      self_weight: (n,), W[i, i].
    """

    index: Int[Array, "n k"]
    weight: Float[Array, "n k"]
    self_weight: Float[Array, " n"]


def mix(neighbours: Neighbours, X: Array) -> Array:
    """One gossip step W X (eq. 1) from padded neighbour lists, in a fixed summation order.

    ``self_weight[:, None] * X + sum_k weight[:, k, None] * X[index[:, k]]``, the terms
    added one after the other for k = 0, 1, ..., k_max - 1: O(n k_max d) work.

    Args:
      neighbours: the round's :class:`Neighbours` (n nodes, k_max slots).
      X: (n, ...) the nodes' values (a row a node; any trailing shape, e.g. (n, d), or
        (n, d, R) with trials innermost when every trial has the same W).

    Returns:
      W X, the shape and dtype of X.

    Example:
      >>> import jax.numpy as jnp
      >>> from fedjax_abc import decentral
      >>> nb = decentral.Ring().neighbours(4)          # Metropolis-Hastings: 1/3 each
      >>> decentral.mix(nb, jnp.array([[3.0], [0.0], [0.0], [0.0]])).ravel().tolist()
      [1.0, 1.0, 0.0, 1.0]
    """
    index, weight, self_weight = neighbours
    n, k_max = index.shape
    if X.ndim < 1 or X.shape[0] != n:
        raise ValueError(f"X must have one row a node (n={n}), got shape {tuple(X.shape)}")
    shape = (n,) + (1,) * (X.ndim - 1)
    weight = weight.astype(X.dtype)
    out = self_weight.astype(X.dtype).reshape(shape) * X
    if k_max <= UNROLL:
        for k in range(k_max):
            out = out + weight[:, k].reshape(shape) * X[index[:, k]]
        return out

    def add(k, out):
        return out + jnp.take(weight, k, axis=1).reshape(shape) * X[jnp.take(index, k, axis=1)]

    return jax.lax.fori_loop(0, k_max, add, out)


def dense(neighbours: Neighbours) -> Float[Array, "n n"]:
    """The dense W (n, n) that :class:`Neighbours` stand for (for theory and tests)."""
    index, weight, self_weight = neighbours
    n = index.shape[0]
    rows = jnp.broadcast_to(jnp.arange(n, dtype=index.dtype)[:, None], index.shape)
    return jnp.diag(self_weight).at[rows, index].add(weight)


def is_connected(graph: Graph) -> Bool[Array, ""]:
    """Whether a symmetric graph is connected: every node reached from node 0.

    Breadth-first growth of the set reached, R <- R u {i : some present neighbour of i is
    in R}, until it stops growing (at most the graph's diameter + 1 passes of O(n k_max)).
    Jittable and vmappable (a drawn :class:`~fedjax_abc.decentral.ErdosRenyi` graph per
    trial). On a directed graph (the one-peer :class:`~fedjax_abc.decentral.Exponential`
    round) it says whether node 0's value reaches every node along the listed edges.
    """
    index, present = graph
    n = index.shape[0]

    def grow(state):
        reached, _ = state
        more = reached | jnp.any(present & reached[index], axis=1)
        return more, jnp.any(more != reached)

    reached, _ = jax.lax.while_loop(lambda state: state[1], grow,
                                    (jnp.arange(n) == 0, jnp.asarray(True)))
    return jnp.all(reached)
