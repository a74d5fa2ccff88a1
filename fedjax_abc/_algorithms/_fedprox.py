"""FedProx [24]: local steps on the proximal objective f_i(y) + (mu/2) ||y - x_t||^2."""

from __future__ import annotations

from typing import ClassVar

from jaxtyping import Array, Float

from fedjax_abc._algorithms._base import AbstractAlgorithm, RoundInfo
from fedjax_abc._algorithms._checks import check_leaf, nonnegative_scalar
from fedjax_abc._algorithms._fedavg import ServerState, sgd_step

__all__ = ["FedProx"]


class FedProx(AbstractAlgorithm):
    """FedProx (Li et al., "Federated optimization in heterogeneous networks", 2020; [24]).

    Client i approximately minimises h_i(y) = f_i(y) + (mu/2) ||y - x_t||^2 by Q stochastic
    gradient steps from x_t:

        y^{l+1} = y^l - alpha_t (g_i(y^l; xi^l) + mu (y^l - x_t)),

    and the server averages the sampled clients' y^Q, as in Algorithm 1. mu = 0 is FedAvg.

    Attributes:
      mu: the proximal weight, >= 0 (an array leaf: a new value compiles nothing new).

    Example:
      >>> import fedjax_abc as fa
      >>> float(fa.algorithms.FedProx(mu=0.1).mu)
      0.1
    """

    mu: Float[Array, ""]

    def __init__(self, mu):
        self.mu = nonnegative_scalar("mu", mu)

    def __check_init__(self):
        check_leaf("mu", self.mu, 0.0, strict=False)

    def init(self, x0):
        return ServerState(x0)

    def init_client(self, x0):
        return ()

    def client_init(self, server, client):
        return ()

    def local_step(self, server, y, local, gradient, stepsize):
        return sgd_step(y, gradient(y) + self.mu * (y - server.x), stepsize), local

    def client_final(self, server, client, y, local, info):
        return y, client

    reads_scale: ClassVar[bool] = True

    def server_update(self, server, mean_message, info: RoundInfo):
        if info.scale is None:
            return ServerState(mean_message)
        return ServerState(server.x + info.scale * (mean_message - server.x))
