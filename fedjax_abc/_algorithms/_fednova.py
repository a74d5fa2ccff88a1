"""FedNova (Wang et al., 2020): normalised averaging against objective inconsistency."""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp
from jaxtyping import Array, Float

from fedjax_abc._algorithms._base import AbstractAlgorithm, RoundInfo
from fedjax_abc._algorithms import _checks
from fedjax_abc._algorithms._checks import check_leaf, positive_scalar
from fedjax_abc._algorithms._fedavg import ServerState

__all__ = ["FedNova", "momentum_norm"]


def momentum_norm(steps, momentum):
    """||a_i||_1 of K local steps of SGD with momentum rho (FedNova's eq. for a_i).

    a_{i,l} = (1 - rho^(K-l)) / (1 - rho), l = 0, ..., K-1, whose sum is
    (K - rho (1 - rho^K) / (1 - rho)) / (1 - rho); K for rho = 0 (vanilla SGD).
    """
    K = jnp.asarray(steps, jnp.asarray(momentum).dtype)
    rho = jnp.asarray(momentum)
    safe = jnp.where(rho == 0, 0.5, rho)
    general = (K - safe * (1 - safe ** K) / (1 - safe)) / (1 - safe)
    return jnp.where(rho == 0, K, general)


class FedNova(AbstractAlgorithm):
    """FedNova (Wang, Liu, Liang, Joshi and Poor, "Tackling the objective inconsistency
    problem in heterogeneous federated optimization", NeurIPS 2020).

    Client i runs its K_i local steps of SGD with momentum rho from x_t,

        m^{l+1} = rho m^l + g_i(y^l; xi^l),   y^{l+1} = y^l - alpha_t m^{l+1},   m^0 = 0,

    (rho = 0: vanilla local SGD) and sends its normalised update d_i = (x_t - y^K) /
    ||a_i||_1 (:func:`momentum_norm`; ||a_i||_1 = K_i for vanilla SGD) with K_i's norm. The
    server steps with the effective number of steps tau_eff = sum_i w_i ||a_i||_1:

        x_{t+1} = x_t - eta_g tau_eff sum_i w_i d_i,   w_i = the slots' normalised weights.

    With equal K_i this is FedAvg (with server stepsize eta_g); with unequal K_i FedAvg's
    fixed point weights client i by its steps, FedNova's by 1 (Theorem 1 of the paper).

    Attributes:
      momentum: rho in [0, 1) (an array leaf).
      server_stepsize: eta_g > 0 (an array leaf).

    Example:
      >>> import fedjax_abc as fa
      >>> float(fa.algorithms.FedNova(momentum=0.9).momentum)
      0.9
    """

    reads_scale: ClassVar[bool] = True

    momentum: Float[Array, ""]
    server_stepsize: Float[Array, ""]

    def __init__(self, momentum=0.0, server_stepsize=1.0):
        self.momentum = _checks.momentum("momentum (rho)", momentum)
        self.server_stepsize = positive_scalar("server_stepsize (eta_g)", server_stepsize)

    def __check_init__(self):
        _checks.check_momentum("momentum (rho)", self.momentum)
        check_leaf("server_stepsize (eta_g)", self.server_stepsize, 0.0, strict=True)

    def init(self, x0):
        return ServerState(x0)

    def init_client(self, x0):
        return ()

    def client_init(self, server, client):
        return jnp.zeros_like(server.x)  # the local momentum m^0

    def local_step(self, server, y, m, gradient, stepsize):
        m = self.momentum.astype(y.dtype) * m + gradient(y)
        return y - stepsize * m, m

    def client_final(self, server, client, y, m, info):
        norm = momentum_norm(info.steps, self.momentum.astype(y.dtype))
        return ((server.x - y) / norm, norm), client

    def server_update(self, server, mean_message, info: RoundInfo):
        d, tau_eff = mean_message
        return ServerState(server.x - info.scaled(self.server_stepsize * tau_eff * d))
