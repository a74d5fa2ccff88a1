"""FedProx [24]: local steps on the proximal objective f_i(y) + (mu/2) ||y - x_t||^2."""

from __future__ import annotations

from jaxtyping import Array, Float

from fedjax_abc._algorithms._base import AbstractAlgorithm, RoundInfo
from fedjax_abc._algorithms._checks import nonnegative_scalar
from fedjax_abc._algorithms._fedavg import ServerState, local_run

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

    def init(self, x0):
        return ServerState(x0)

    def client_init(self, x0):
        return ()

    def client_update(self, problem, oracle, i, server, client, stepsize, noise, local_steps):
        x_t = server.x
        y = local_run(problem, oracle, i, x_t, stepsize, noise, local_steps,
                      correction=lambda y: self.mu * (y - x_t))
        return y, client

    def server_update(self, server, mean_message, info: RoundInfo):
        return ServerState(mean_message)
