"""MIME (Karimireddy et al., 2020): local steps that mimic centralized SGD with momentum, with
an SVRG correction from the participants' full gradients at x_t."""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp
from jaxtyping import Array, Float

from fedjax_abc._algorithms._base import AbstractAlgorithm, AbstractServerState, RoundInfo
from fedjax_abc._algorithms._checks import check_momentum, momentum

__all__ = ["Mime", "MimeState"]


class MimeState(AbstractServerState):
    """MIME's server state: the model x, the momentum m and c, the mean of the round's
    participants' full gradients at x (zero before the first round)."""

    x: Array
    m: Array
    c: Array


class Mime(AbstractAlgorithm):
    """MIME with an SGD-momentum base optimizer (Karimireddy, Jaggi, Kale, Mohri, Reddi,
    Stich and Suresh, "Breaking the centralized barrier for cross-device federated
    learning", NeurIPS 2021; Algorithm 1, Mime).

    A round has two communications. First each sampled client sends its full-batch
    gradient grad f_i(x_t), and the server broadcasts their mean c = mean_i grad f_i(x_t).
    Then client i runs its local steps from y^0 = x_t with the server's momentum m held
    fixed and the SVRG-corrected gradient

        g^l = g_i(y^l; xi^l) - g_i(x_t; xi^l) + c,
        y^{l+1} = y^l - alpha_t ((1 - beta) g^l + beta m),

    (both stochastic gradients on the same mini-batch xi^l), and sends y^K. The server takes
    x_{t+1} = mean_i y_i and m <- (1 - beta) c + beta m. With exact gradients the correction
    makes every client follow grad f = c at x_t in its first step: full participation and
    one local step give centralized gradient descent with momentum.

    Attributes:
      beta: the momentum in [0, 1) (an array leaf); beta = 0 is SVRG-corrected local SGD.

    Example:
      >>> import fedjax_abc as fa
      >>> float(fa.algorithms.Mime(beta=0.9).beta)
      0.9
    """

    beta: Float[Array, ""]

    def __init__(self, beta=0.9):
        self.beta = momentum("beta (momentum)", beta)

    def __check_init__(self):
        check_momentum("beta (momentum)", self.beta)

    def init(self, x0):
        return MimeState(x0, jnp.zeros_like(x0), jnp.zeros_like(x0))

    def init_client(self, x0):
        return ()

    def query(self, server, client, full_gradient):
        return full_gradient(server.x)

    def receive(self, server, mean_query):
        return MimeState(server.x, server.m, mean_query)

    def client_init(self, server, client):
        return ()

    def local_step(self, server, y, local, gradient, stepsize):
        b = self.beta.astype(y.dtype)
        g = gradient(y) - gradient(server.x) + server.c
        return y - stepsize * ((1 - b) * g + b * server.m), local

    def client_final(self, server, client, y, local, info):
        return y, client

    reads_scale: ClassVar[bool] = False

    def server_update(self, server, mean_message, info: RoundInfo):
        b = self.beta.astype(mean_message.dtype)
        return MimeState(mean_message, (1 - b) * server.c + b * server.m, server.c)
