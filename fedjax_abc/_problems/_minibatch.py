"""The mini-batch oracle of a learning problem: the gradient of the loss on b of a client's samples.

Footnote 1 of the paper: the sample xi^l_{i,t} may be "a data sample or mini-batch drawn
from D_i". :class:`MinibatchOracle` draws, at every local step, b row indices of client i's
m_i samples uniformly, from the client's counter-based random words (b words a step), so
``mask`` and ``gather`` modes draw the same mini-batches:

- with replacement, row = floor(w m_i / 2^32) for each word w (as the samplers draw
  clients, ``_uniform_below``);
- without replacement, Floyd's algorithm on the b words: for k = 0..b-1, t = floor(w_k (j +
  1) / 2^32) with j = m_i - b + k, taken unless already chosen, else j. Every b-subset is
  equally likely (the order within the batch is not uniform, which the mean ignores).

The estimate g_i(x; xi) = w_i ((1/b) sum_{j in batch} grad ell_j(x) + l2 x) is unbiased for
grad f_i(x), with variance w_i^2 s_i^2(x) / b (with replacement) or w_i^2 s_i^2(x) (m_i -
b) / (b (m_i - 1)) (without), s_i^2(x) = (1/m_i) sum_j ||grad ell_j(x) - mean||^2 the
population variance of the per-sample gradients (:meth:`MinibatchOracle.variance`).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from fedjax_abc._problems._args import check_flag
from fedjax_abc._problems._models import ClientData, DatasetLoss
from fedjax_abc._problems._oracles import AbstractOracle
from fedjax_abc._problems._samplers import _uniform_below

__all__ = ["MinibatchOracle", "minibatch_rows"]


def minibatch_rows(words: Array, m: Array, replace: bool) -> Array:
    """b row indices in [0, m) from b uint32 words: uniform with or without replacement.

    Args:
      words: (b,) uint32 random words.
      m: the number of rows (>= b without replacement; may be traced).
      replace: draw with replacement (floor(w m / 2^32)) or without (Floyd's algorithm).

    Returns:
      (b,) int32 row indices.
    """
    if replace:
        return _uniform_below(words, m)
    b = words.shape[0]
    slots = jnp.arange(b)

    def step(k, chosen):  # step k compares with the k rows taken so far
        j = m - b + k
        t = _uniform_below(words[k], j + 1)
        taken = jnp.any((chosen == t) & (slots < k))
        return chosen.at[k].set(jnp.where(taken, j, t).astype(jnp.int32))

    # a loop of b steps rather than b steps unrolled (b^2 / 2 comparisons written out): the
    # same rows, and XLA compiles the learning workload's program (b = 32) in 3 s, not 7.5
    return jax.lax.fori_loop(0, b, step, jnp.zeros(b, jnp.int32))


def _check_batch(batch_size) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
            or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    return int(batch_size)


class MinibatchOracle(AbstractOracle):
    """g_i(x; xi) = the gradient of f_i's loss on a uniform mini-batch of b of its m_i samples.

    For the learning problems (``fedjax_abc.problems.softmax_regression`` and others), whose
    per-client parameters are a ``ClientData``. A new mini-batch every local step.

    Attributes:
      batch_size: b (static: it sets shapes).
      replace: sample the b rows with replacement (default False: b distinct rows, which
        needs b <= m_i for every client).

    Example:
      >>> import jax, numpy as np, fedjax_abc as fa
      >>> X = [np.eye(3)[[0, 1, 2, 0]], np.eye(3)[[1, 2]]]
      >>> y = [np.array([0, 1, 2, 0]), np.array([1, 2])]
      >>> p = fa.problems.softmax_regression(X, y, l2=0.1, oracle=fa.MinibatchOracle(2))
      >>> res = fa.simulate(p, local_steps=3, stepsize=0.5, rounds=20, x0=np.zeros(p.dim),
      ...                   trials=4, key=jax.random.key(0))
      >>> bool(res.gap[:, -1].mean() < res.gap[:, 0].mean())
      True

    Reference: footnote 1 of the paper (a sample or mini-batch drawn from D_i).
    """

    batch_size: int = eqx.field(static=True)
    replace: bool = eqx.field(static=True, default=False)

    def __init__(self, batch_size: int, replace: bool = False):
        self.batch_size = _check_batch(batch_size)
        self.replace = check_flag("replace", replace)

    def validate(self, problem) -> None:
        """Raises ValueError unless ``problem`` holds ClientData with m_i >= b (no replacement)."""
        if not isinstance(problem.params, ClientData) or not isinstance(problem.loss, DatasetLoss):
            raise ValueError("MinibatchOracle needs a learning problem (per-client ClientData, "
                             "e.g. fedjax_abc.problems.softmax_regression), got "
                             f"{type(problem.params).__name__} parameters")
        counts = np.asarray(problem.params.count)
        if not self.replace and counts.min() < self.batch_size:
            i = int(np.argmin(counts))
            raise ValueError(f"batch_size (b={self.batch_size}) exceeds client {i}'s {int(counts[i])} "
                             "samples: without replacement b <= m_i is needed for every client "
                             "(use a smaller batch or replace=True)")

    def steps_per_evaluation(self, problem) -> float:
        """All the clients' rows over the b rows of a step."""
        return float(np.sum(np.asarray(problem.params.count))) / self.batch_size

    def noise(self, key, shape, dtype):
        return jax.random.bits(key, (shape[0], self.batch_size), jnp.uint32)

    def num_words(self, shape):
        return int(shape[0]) * self.batch_size

    def noise_from_words(self, words, shape, dtype):
        return words[: self.num_words(shape)].reshape(shape[0], self.batch_size)

    def rows(self, problem, client, words: Array) -> Array:
        """The step's b row indices of client ``client.index`` from its b words."""
        return minibatch_rows(words, problem.params.count[client.index], self.replace)

    def gradient(self, problem, client, x, words):
        data = problem.params
        i = client.index
        rows = self.rows(problem, client, words)
        # read the rows straight from the data as rows i M + r of the (n M, p) array: one
        # plain gather (client.params, the client's whole slice, is then unused)
        n, M = data.labels.shape
        flat = i * M + rows
        batch = ClientData(data.features.reshape(n * M, -1).at[flat].get(
                               mode="promise_in_bounds"),
                           data.labels.reshape(n * M).at[flat].get(mode="promise_in_bounds"),
                           jnp.asarray(self.batch_size, data.count.dtype), data.weight[i],
                           data.l2[i])
        return problem.local_grad(client._replace(params=batch), x)

    def variance(self, problem, i, x) -> Array:
        """E||g_i(x; xi) - grad f_i(x)||^2 in closed form (see the module docstring).

        Per-sample gradients are formed a block of rows at a time (memory: 128 x d).
        """
        data = problem.params
        client = problem.client(i)
        full = problem.local_grad(client, x)
        M = data.labels.shape[1]
        m = data.count[i]

        def dev_sq(j):  # ||g_j - mean||^2 for sample j of client i (g_j: loss on row j alone)
            one = ClientData(data.features[i, j][None], data.labels[i, j][None],
                             jnp.asarray(1, data.count.dtype), data.weight[i], data.l2[i])
            g = problem.local_grad(client._replace(params=one), x)
            return jnp.sum((g - full) ** 2)

        sq = jax.lax.map(dev_sq, jnp.arange(M), batch_size=128)
        pop = jnp.sum(jnp.where(jnp.arange(M) < m, sq, 0)) / m
        b = self.batch_size
        if self.replace:
            return pop / b
        mf = m.astype(pop.dtype)
        return jnp.where(m > 1, pop * (mf - b) / (b * jnp.maximum(mf - 1, 1)), 0.0)
