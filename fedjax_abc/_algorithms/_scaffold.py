"""SCAFFOLD [11]: control variates against client drift (option II)."""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp
from jaxtyping import Array, Float

from fedjax_abc._algorithms._base import AbstractAlgorithm, AbstractServerState, RoundInfo
from fedjax_abc._algorithms._checks import check_leaf, positive_scalar
from fedjax_abc._algorithms._fedavg import sgd_step

__all__ = ["Scaffold", "ScaffoldState"]


class ScaffoldState(AbstractServerState):
    """SCAFFOLD's server state: the model x and the server control variate c."""

    x: Array
    c: Array


class Scaffold(AbstractAlgorithm):
    """SCAFFOLD (Karimireddy et al., 2020, Algorithm 1 with option II; the paper's [11]).

    Every client keeps a control variate c_i, the server keeps c; all start at 0. In round
    t, sampled client i runs Q corrected local steps from y^0 = x_t,

        y^{l+1} = y^l - alpha_t (g_i(y^l; xi^l) - c_i + c),

    sets c_i^+ = c_i - c + (x_t - y^K) / (K alpha_t) after its K local steps and sends (y^Q - x_t, c_i^+ - c_i).
    The server steps x_{t+1} = x_t + eta_g mean(Delta y), c <- c + (S / n) mean(Delta c)
    (so that c stays the mean of the c_i). Only the sampled clients keep c_i^+. Needs a
    sampler whose slots name distinct clients, each with weight 1.

    Attributes:
      server_stepsize: eta_g > 0 (an array leaf).

    Example:
      >>> import jax, fedjax_abc as fa
      >>> p = fa.problems.huber_offsets(jax.random.key(0), n=10, d_max=20.0)
      >>> res = fa.simulate(p, num_sampled=2, local_steps=5, stepsize=1e-2, rounds=100,
      ...                   x0=p.x_star + 1.0, trials=8, key=jax.random.key(1),
      ...                   algorithm=fa.algorithms.Scaffold())
      >>> res.x_final.shape
      (8, 1)
    """

    server_stepsize: Float[Array, ""]

    def __init__(self, server_stepsize=1.0):
        self.server_stepsize = positive_scalar("server_stepsize (eta_g)", server_stepsize)

    def __check_init__(self):
        check_leaf("server_stepsize (eta_g)", self.server_stepsize, 0.0, strict=True)

    def init(self, x0):
        return ScaffoldState(x0, jnp.zeros_like(x0))

    def init_client(self, x0):
        return jnp.zeros_like(x0)

    def client_init(self, server, client):
        return server.c - client  # the correction c - c_i of every local step

    def local_step(self, server, y, correction, gradient, stepsize):
        return sgd_step(y, gradient(y) + correction, stepsize), correction

    def client_final(self, server, client, y, correction, info):
        x_t, c_i = server.x, client
        c_new = c_i - server.c + (x_t - y) / (info.steps * info.stepsize)
        return (y - x_t, c_new - c_i), c_new

    needs_unit_weights: ClassVar[bool] = True

    reads_scale: ClassVar[bool] = False

    def server_update(self, server, mean_message, info: RoundInfo):
        dy, dc = mean_message
        x = server.x + self.server_stepsize * dy
        # c stays (1/n) sum_i c_i: the participants' sum of Delta c_i over n (unit weights)
        c = server.c + (info.total_weight / info.num_clients) * dc
        return ScaffoldState(x, c)
