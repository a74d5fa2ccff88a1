"""FedExP (Jhunjhunwala, Wang and Joshi, 2023): an extrapolated server step."""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp
from jaxtyping import Array, Float

from fedjax_abc._algorithms._base import RoundInfo
from fedjax_abc._algorithms._checks import check_leaf, positive_scalar
from fedjax_abc._algorithms._fedavg import AbstractLocalSGD, ServerState

__all__ = ["FedExP", "fedexp_stepsize"]


def fedexp_stepsize(mean_sq_norm, mean_update, eps):
    """eta_g = max(1, (1/M) sum_i ||Delta_i||^2 / (2 (||Delta_bar||^2 + eps))) (FedExP's eq. 8)."""
    return jnp.maximum(1.0, mean_sq_norm / (2 * (jnp.sum(mean_update ** 2) + eps)))


class FedExP(AbstractLocalSGD):
    """FedExP (Jhunjhunwala, Wang and Joshi, "FedExP: speeding up federated averaging via
    extrapolation", ICLR 2023, Algorithm 1).

    Clients run plain local SGD from x_t (eq. 5) and send Delta_i = x_t - y_i with
    ||Delta_i||^2; the server takes the extrapolated step

        x_{t+1} = x_t - eta_g Delta_bar,   eta_g = :func:`fedexp_stepsize` >= 1,

    Delta_bar and the mean squared norm over the participants (the slots' normalised
    weights). The paper reports the average of the last two iterates; the records here
    are of x_t itself.

    Attributes:
      eps: epsilon > 0 in eta_g's denominator (an array leaf).

    Example:
      >>> import fedjax_abc as fa
      >>> float(fa.algorithms.FedExP(eps=1e-3).eps)
      0.001
    """

    reads_scale: ClassVar[bool] = True

    eps: Float[Array, ""]

    def __init__(self, eps=1e-3):
        self.eps = positive_scalar("eps", eps)

    def __check_init__(self):
        check_leaf("eps", self.eps, 0.0, strict=True)

    def init(self, x0):
        return ServerState(x0)

    def client_final(self, server, client, y, local, info):
        delta = server.x - y
        return (delta, jnp.sum(delta ** 2)), client

    def server_update(self, server, mean_message, info: RoundInfo):
        delta, sq = mean_message
        eta = fedexp_stepsize(sq, delta, self.eps.astype(delta.dtype))
        return ServerState(server.x - info.scaled(eta * delta))
