"""FedDyn (Acar et al., 2021): dynamic regularisation, a linear term per client."""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp
from jaxtyping import Array, Float

from fedjax_abc._algorithms._base import AbstractAlgorithm, AbstractServerState, RoundInfo
from fedjax_abc._algorithms._checks import check_leaf, positive_scalar
from fedjax_abc._algorithms._fedavg import sgd_step

__all__ = ["FedDyn", "FedDynState"]


class FedDynState(AbstractServerState):
    """FedDyn's server state: the model x and h (the mean of the clients' linear terms)."""

    x: Array
    h: Array


class FedDyn(AbstractAlgorithm):
    """FedDyn (Acar, Zhao, Matas, Mattina, Whatmough and Saligrama, "Federated learning
    based on dynamic regularization", ICLR 2021, Algorithm 1).

    Client i keeps g_i (the gradient of its last local objective's linear term; 0 at the
    start) and approximately minimises f_i(y) - <g_i, y> + (a/2) ||y - x_t||^2 by its local
    steps from x_t,

        y^{l+1} = y^l - alpha_t (g_i(y^l; xi^l) - g_i + a (y^l - x_t)),

    then sets g_i <- g_i - a (y^K - x_t). The server, from the participants P_t,

        h <- h - (a / n) sum_{i in P_t} (y_i - x_t),   x_{t+1} = mean_{P_t} y_i - h / a.

    With exact gradients a fixed point is x* whatever the local steps (sum_i g_i = n h
    stays true, and h = 0 at a fixed point). Needs a sampler with distinct slots, each with
    weight 1.

    Attributes:
      alpha: the regularisation weight a > 0 (an array leaf).

    Example:
      >>> import fedjax_abc as fa
      >>> float(fa.algorithms.FedDyn(alpha=0.1).alpha)
      0.1
    """

    needs_unit_weights: ClassVar[bool] = True

    alpha: Float[Array, ""]

    def __init__(self, alpha=0.01):
        self.alpha = positive_scalar("alpha (FedDyn's a)", alpha)

    def __check_init__(self):
        check_leaf("alpha (FedDyn's a)", self.alpha, 0.0, strict=True)

    def init(self, x0):
        return FedDynState(x0, jnp.zeros_like(x0))

    def init_client(self, x0):
        return jnp.zeros_like(x0)

    def client_init(self, server, client):
        return client  # g_i, fixed through the round's local steps

    def local_step(self, server, y, g_i, gradient, stepsize):
        a = self.alpha.astype(y.dtype)
        return sgd_step(y, gradient(y) - g_i + a * (y - server.x), stepsize), g_i

    def client_final(self, server, client, y, local, info):
        a = self.alpha.astype(y.dtype)
        return (y, y - server.x), client - a * (y - server.x)

    reads_scale: ClassVar[bool] = False

    def server_update(self, server, mean_message, info: RoundInfo):
        a = self.alpha.astype(server.x.dtype)
        y_mean, dy = mean_message
        h = server.h - a * (info.total_weight / info.num_clients) * dy  # unit weights
        return FedDynState(y_mean - h / a, h)
