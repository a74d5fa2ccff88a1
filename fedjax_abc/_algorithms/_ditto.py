"""Ditto (Li, Hu, Beirami and Smith, ICML 2021): a global model and a regularised personal one.

:func:`ditto_personal_step` is the personal update of Algorithm 1 on its own; :class:`Ditto`
is the algorithm.
"""

from __future__ import annotations

from typing import ClassVar

from jaxtyping import Array, Float

from fedjax_abc._algorithms._base import AbstractAlgorithm, RoundInfo
from fedjax_abc._algorithms._checks import check_leaf, nonnegative_scalar
from fedjax_abc._algorithms._fedavg import ServerState, server_step, sgd_step

__all__ = ["Ditto", "ditto_personal_step"]


def ditto_personal_step(v: Array, g: Array, w: Array, lam, stepsize) -> Array:
    """v - eta (g + lam (v - w)): one step on h_i(v) = f_i(v) + (lam/2) ||v - w||^2, g an
    estimate of grad f_i(v) (Algorithm 1 of Ditto, the personal update)."""
    return sgd_step(v, g + lam * (v - w), stepsize)


class Ditto(AbstractAlgorithm):
    """Ditto (Li, Hu, Beirami and Smith, "Ditto: Fair and robust federated learning through
    personalization", ICML 2021, Algorithm 1).

    Ditto solves, for every client k, min_v h_k(v; w*) = f_k(v) + (lam/2) ||v - w*||^2 (its
    eq. (2)), w* the global model that FedAvg trains. In round t each sampled client runs
    FedAvg's local steps on the global model from y^0 = x_t,

        y^{l+1} = y^l - eta_t g_k(y^l; xi^l),

    and, with the same stepsize, the same number of steps on its personal model v_k (client
    state, v_k = x_0 at the start),

        v_k <- v_k - eta_t (g_k(v_k; xi^l) + lam (v_k - x_t)),

    then sends y^Q; the server averages them (Algorithm 1's global update). Only the sampled
    clients update v_k. :meth:`personal` is v_k. lam = 0 trains each v_k on f_k alone;
    lam -> infinity keeps it at the global model.

    With exact gradients and full participation on f_k(x) = (a_k/2) ||x - b_k||^2 the
    global model converges to FedAvg's fixed point w* and v_k to
    (a_k b_k + lam w*) / (a_k + lam) (:func:`fedjax_abc.theory.ditto_fixed_point`).

    Departures: the paper draws the personal steps' mini-batches apart from the global
    steps'; here step l of both uses the oracle's noise xi^l of that step (each estimate is
    the oracle's, the two are correlated). The paper lets the personal solver take its own
    number of steps s; here s = Q. Implementations often train v_k for separate epochs with
    an optimizer of their own (e.g. a "perturbed" gradient descent), before or after the
    global steps; the fixed point is the same whenever both reach it.

    Attributes:
      lam: the proximal weight lambda >= 0 (an array leaf: a new value compiles nothing new).

    Example:
      >>> import fedjax_abc as fa
      >>> fa.algorithms.Ditto(lam=-1.0)
      Traceback (most recent call last):
      ...
      ValueError: lam must be >= 0, got -1.0
    """

    lam: Float[Array, ""]

    def __init__(self, lam):
        self.lam = nonnegative_scalar("lam", lam)

    def __check_init__(self):
        check_leaf("lam", self.lam, 0.0, strict=False)

    def init(self, x0):
        return ServerState(x0)

    def init_client(self, x0):
        return x0  # v_k = x_0

    def client_init(self, server, client):
        return client  # v_k travels through the local steps beside y

    def local_step(self, server, y, v, gradient, stepsize):
        return (sgd_step(y, gradient(y), stepsize),
                ditto_personal_step(v, gradient(v), server.x, self.lam, stepsize))

    def client_final(self, server, client, y, v, info):
        return y, v

    reads_scale: ClassVar[bool] = True

    def server_update(self, server, mean_message, info: RoundInfo):
        return ServerState(server_step(server.x, mean_message, info.scaled(1.0)))

    def personal(self, server, client, objective):
        return client
