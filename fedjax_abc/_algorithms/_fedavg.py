"""Algorithm 1: FedAvg with partial participation, and an optional server stepsize [10].

:func:`local_run` is the client part, Q local stochastic gradient steps (eq. 5), written out
on its own (the engine runs the same steps through :meth:`FedAvg.local_step`); :class:`FedAvg`
is the algorithm.
"""

from __future__ import annotations

from typing import Callable, ClassVar, Optional

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from fedjax_abc._algorithms._base import AbstractAlgorithm, AbstractServerState, RoundInfo
from fedjax_abc._algorithms._checks import check_leaf, positive_scalar

__all__ = ["AbstractLocalSGD", "FedAvg", "ServerState", "local_run", "sgd_step", "server_step"]


def local_run(problem, oracle, i, x: Array, stepsize, noise, local_steps: int | None = None,
              correction: Optional[Callable[[Array], Array]] = None) -> Array:
    """Q local stochastic gradient steps of client i from x (eq. 5).

    x^{l+1} = x^l - alpha_t (g_i(x^l; xi^l) + correction(x^l)), l = 0, ..., Q-1; without a
    correction, Algorithm 1's local steps.

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
      correction: optional ``y -> c(y)`` added to every step's gradient estimate (FedProx's
        mu (y - x_t), SCAFFOLD's c - c_i).

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
        g = oracle.gradient(problem, client, x_l, z)
        if correction is not None:
            g = g + correction(x_l)
        return sgd_step(x_l, g, stepsize), None

    x_q, _ = jax.lax.scan(step, x, jnp.arange(shape[0]))
    return x_q


class ServerState(AbstractServerState):
    """The server state of a stateless algorithm: the model x_t."""

    x: Array


class AbstractLocalSGD(AbstractAlgorithm):
    """An algorithm whose clients run plain local SGD from x_t (eq. 5) and send y^K.

    Stateless clients, no local state besides y: ``init_client``, ``client_init``,
    ``local_step`` (y - alpha g_i(y)) and ``client_final`` (message y) are given; a
    subclass gives ``init`` and ``server_update``.
    """

    def init_client(self, x0):
        return ()

    def client_init(self, server, client):
        return ()

    def local_step(self, server, y, local, gradient, stepsize):
        return sgd_step(y, gradient(y), stepsize), local

    def client_final(self, server, client, y, local, info):
        return y, client


class FedAvg(AbstractLocalSGD):
    """FedAvg with partial participation (Algorithm 1), with a server stepsize eta_g [10].

    Each sampled client runs Q local steps from x_t (eq. 5),
    y^{l+1} = y^l - alpha_t g_i(y^l; xi^l), and sends y_i = y^Q; the server takes
    x_{t+1} = x_t + eta_g (sum_i w_i y_i / sum_i w_i - x_t). With eta_g = 1 (the default)
    this is Algorithm 1's average x_{t+1} = (1/S) sum_{i in S_t} y_i exactly.

    Attributes:
      server_stepsize: eta_g > 0 (an array leaf: a new value compiles nothing new).

    Example:
      >>> import jax, fedjax_abc as fa
      >>> p = fa.problems.huber_offsets(jax.random.key(0), n=10, d_max=20.0)
      >>> res = fa.simulate(p, num_sampled=2, local_steps=5, stepsize=1e-2, rounds=100,
      ...                   x0=p.x_star + 1.0, trials=8, key=jax.random.key(1),
      ...                   algorithm=fa.algorithms.FedAvg(server_stepsize=2.0))
      >>> res.gap.shape
      (8, 101)
    """

    server_stepsize: Float[Array, ""]

    def __init__(self, server_stepsize=1.0):
        self.server_stepsize = positive_scalar("server_stepsize (eta_g)", server_stepsize)

    def __check_init__(self):
        check_leaf("server_stepsize (eta_g)", self.server_stepsize, 0.0, strict=True)

    def init(self, x0):
        return ServerState(x0)

    reads_scale: ClassVar[bool] = True

    def server_update(self, server, mean_message, info: RoundInfo):
        return ServerState(server_step(server.x, mean_message, info.scaled(self.server_stepsize)))


def sgd_step(y: Array, g: Array, stepsize) -> Array:
    """y - alpha g: one local step of eq. (5)."""
    return y - stepsize * g


def server_step(x: Array, mean: Array, eta: Array) -> Array:
    """x + eta (mean - x), and exactly ``mean`` when eta = 1 (Algorithm 1, line 13)."""
    return jnp.where(eta == 1, mean, x + eta * (mean - x))
