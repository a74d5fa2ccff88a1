"""MimeLite (Karimireddy et al., 2020): clients step with the server's frozen momentum."""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp
from jaxtyping import Array, Float

from fedjax_abc._algorithms._base import AbstractAlgorithm, AbstractServerState, RoundInfo
from fedjax_abc._algorithms._checks import check_momentum, momentum

__all__ = ["MimeLite", "MimeLiteState"]


class MimeLiteState(AbstractServerState):
    """MimeLite's server state: the model x and the momentum m."""

    x: Array
    m: Array


class MimeLite(AbstractAlgorithm):
    """MimeLite with an SGD-momentum base optimizer (Karimireddy, Jaggi, Kale, Mohri, Reddi,
    Stich and Suresh, "Breaking the centralized barrier for cross-device federated
    learning", NeurIPS 2021; Algorithm 2, MimeLite).

    Client i runs its local steps from y^0 = x_t with the server's momentum m held fixed,

        y^{l+1} = y^l - alpha_t ((1 - beta) g_i(y^l; xi^l) + beta m),

    and sends y^K with its gradient at x_t (the first step's, g_i(x_t; xi^0)). The server
    takes x_{t+1} = mean_i y_i and m <- (1 - beta) mean_i g_i(x_t) + beta m. With one
    local step and full participation this is centralized SGD with (averaged) momentum,
    m <- (1 - beta) grad f(x) + beta m, x <- x - alpha m. (The paper's MIME adds an SVRG
    correction with the clients' full gradients at x_t, a second communication round; it
    is not implemented.)

    Attributes:
      beta: the momentum in [0, 1) (an array leaf); beta = 0 is FedAvg.

    Example:
      >>> import fedjax_abc as fa
      >>> float(fa.algorithms.MimeLite(beta=0.9).beta)
      0.9
    """

    reads_scale: ClassVar[bool] = True

    beta: Float[Array, ""]

    def __init__(self, beta=0.9):
        self.beta = momentum("beta (momentum)", beta)

    def __check_init__(self):
        check_momentum("beta (momentum)", self.beta)

    def init(self, x0):
        return MimeLiteState(x0, jnp.zeros_like(x0))

    def init_client(self, x0):
        return ()

    def client_init(self, server, client):
        return jnp.zeros_like(server.x), jnp.zeros((), bool)  # g_i(x_t), taken yet

    def local_step(self, server, y, local, gradient, stepsize):
        g_x, taken = local
        b = self.beta.astype(y.dtype)
        g = gradient(y)
        y_next = y - stepsize * ((1 - b) * g + b * server.m)
        return y_next, (jnp.where(taken, g_x, g), jnp.ones((), bool))

    def client_final(self, server, client, y, local, info):
        return (y, local[0]), client

    def server_update(self, server, mean_message, info: RoundInfo):
        y, g_x = mean_message
        b = self.beta.astype(y.dtype)
        x = y if info.scale is None else server.x + info.scale * (y - server.x)
        return MimeLiteState(x, (1 - b) * info.scaled(g_x) + b * server.m)
