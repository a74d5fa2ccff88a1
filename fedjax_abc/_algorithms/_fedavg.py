"""Algorithm 1's client part: Q local stochastic gradient steps (eq. 5)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array

__all__ = ["local_run"]


def local_run(problem, oracle, i, x: Array, stepsize, noise, local_steps: int | None = None) -> Array:
    """Q local stochastic gradient steps of client i from x (eq. 5).

    x^{l+1} = x^l - alpha_t g_i(x^l; xi^l), l = 0, ..., Q-1.

    Args:
      problem: a :class:`~fedjax_abc.Problem`.
      oracle: the client's oracle.
      i: client index (may be traced).
      x: x_t, shape (d,).
      stepsize: alpha_t.
      noise: the Q steps' noise: ``oracle.noise(key, (Q, d), dtype)`` (leaves with leading
        axis Q) or :func:`client_noise`.
      local_steps: Q; needed only when ``noise`` does not carry it as a leading axis
        (packed noise from :func:`client_noise`).

    Returns:
      x^Q_{i,t}, shape (d,).

    Example:
      >>> import jax, jax.numpy as jnp, fedjax_abc as fa
      >>> p = fa.problems.huber_offsets(offsets=[0.0, 4.0])
      >>> z = p.oracle.noise(jax.random.key(0), (3, 1), jnp.float64)
      >>> fa.local_run(p, fa.ExactOracle(), 1, jnp.array([0.0]), 0.5, z)  # 3 steps of size 1/2
      Array([1.5], dtype=float64)
    """
    client = problem.client(i)
    if local_steps is None:
        local_steps = jax.tree_util.tree_leaves(noise)[0].shape[0]
    shape = (local_steps,) + x.shape

    def step(x_l, l):
        z = oracle.step_noise(noise, l, shape, x.dtype)
        return x_l - stepsize * oracle.gradient(problem, client, x_l, z), None

    x_q, _ = jax.lax.scan(step, x, jnp.arange(shape[0]))
    return x_q
