"""q-FedAvg (Li, Sanjabi, Beirami and Smith, "Fair resource allocation in federated
learning", ICLR 2020): q-fair federated learning's step, which weighs a client by its loss
raised to the power q."""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp
from jaxtyping import Array, Float

from fedjax_abc._algorithms._base import RoundInfo
from fedjax_abc._algorithms._checks import (check_leaf, local_objective, nonnegative_scalar,
                                            positive_scalar)
from fedjax_abc._algorithms._fedavg import AbstractLocalSGD, ServerState

__all__ = ["QFFL", "qffl_client_terms"]


def qffl_client_terms(loss: Array, delta_w: Array, q: Array, lipschitz: Array):
    """(Delta_k, h_k) of Algorithm 3 (q-FedAvg) from F_k(w^t) and Delta w_k^t.

    Delta_k = F_k(w)^q Delta w_k,  h_k = q F_k(w)^(q-1) ||Delta w_k||^2 + L F_k(w)^q,

    with the first term of h_k taken as 0 where q = 0 or Delta w_k = 0 (its limit; the
    power F^(q-1) would be infinite at F = 0).

    Example:
      >>> import jax.numpy as jnp
      >>> d, h = qffl_client_terms(jnp.asarray(4.0), jnp.array([1.0, 2.0]), 0.5, 2.0)
      >>> d.tolist(), float(h)  # 2 (1, 2);  0.5 / 2 * 5 + 2 * 2
      ([2.0, 4.0], 5.25)
    """
    sq = jnp.sum(delta_w * delta_w)
    f_q = jnp.power(loss, q)
    vanish = (q == 0) | (sq == 0)
    safe = jnp.where(vanish, 1, loss)  # no 0^(q-1) where the term is 0 anyway
    first = jnp.where(vanish, 0, q * jnp.power(safe, q - 1) * sq)
    return f_q * delta_w, first + lipschitz * f_q


class QFFL(AbstractLocalSGD):
    """q-FedAvg (Li, Sanjabi, Beirami and Smith, ICLR 2020, Algorithm 3).

    q-FFL minimises f_q(w) = sum_k p_k F_k(w)^(q+1) / (q + 1) (eq. 2): the larger q, the
    more a client of large loss weighs. In round t each sampled client k runs the engine's
    Q local SGD steps from w^t to w_bar_k (the paper's E epochs) and sends

        Delta w_k = L (w^t - w_bar_k),
        Delta_k = F_k(w^t)^q Delta w_k,
        h_k = q F_k(w^t)^(q-1) ||Delta w_k||^2 + L F_k(w^t)^q      (Algorithm 3);

    the server steps w^{t+1} = w^t - sum_k Delta_k / sum_k h_k. A client sends the
    pair (Delta_k, h_k) and the server takes the ratio of the two weighted means: with unit
    weights the paper's ratio of sums over the sampled set, with a sampler's weights w_k
    sum_k w_k Delta_k / sum_k w_k h_k. L is the paper's
    estimate of the Lipschitz constant of the gradient, its 1/L the step of q-FedSGD: with
    one local step of stepsize 1/L, Delta w_k = grad F_k(w^t).

    F_k(w^t) is the client's exact loss on all its data, ``info.objective.value(x_t)``
    (:class:`~fedjax_abc.algorithms.LocalObjective`), as the authors' code computes it
    (on the client's whole training set, at the global model). The loss must be >= 0 (a
    power q of a negative number is NaN).

    q = 0 is FedAvg: Delta_k = L (w - w_bar_k), h_k = L, and the step is w^{t+1} = mean_k
    w_bar_k whatever L, Algorithm 1 with server stepsize 1 (to rounding).

    Fixed point (exact gradients, full participation): sum_k F_k(w)^q (w - w_bar_k(w)) = 0;
    with one local step, sum_k F_k^q grad F_k = 0, the stationary point of f_q.
    :func:`fedjax_abc.theory.qffl_two_clients` gives it for two quadratic clients.

    Where the authors' code (``flearn/trainers/qffedavg.py``) departs from Algorithm 3: it
    adds 1e-10 to F_k before taking the powers (FLGo's ``qfedavg.py`` adds 1e-8; here
    F_k = 0 gives Delta_k = 0 and the limit of h_k), and both tie L to the local learning
    rate, L = 1 / alpha; here L is a hyperparameter of its own, and L = 1 / alpha is their
    choice.

    Attributes:
      q: the fairness exponent q >= 0 (an array leaf).
      lipschitz: L > 0 (an array leaf).

    Example:
      >>> import fedjax_abc as fa
      >>> alg = fa.algorithms.QFFL(q=1.0, lipschitz=10.0)
      >>> float(alg.q), float(alg.lipschitz)
      (1.0, 10.0)
    """

    q: Float[Array, ""]
    lipschitz: Float[Array, ""]

    def __init__(self, q, lipschitz):
        self.q = nonnegative_scalar("q (q-FFL's exponent)", q)
        self.lipschitz = positive_scalar("lipschitz (q-FFL's L)", lipschitz)

    def __check_init__(self):
        check_leaf("q (q-FFL's exponent)", self.q, 0.0, strict=False)
        check_leaf("lipschitz (q-FFL's L)", self.lipschitz, 0.0, strict=True)

    def init(self, x0):
        return ServerState(x0)

    def client_final(self, server, client, y, local, info):
        dtype = y.dtype
        q, lip = self.q.astype(dtype), self.lipschitz.astype(dtype)
        loss = local_objective("QFFL", info).value(server.x)
        return qffl_client_terms(loss, lip * (server.x - y), q, lip), client

    reads_scale: ClassVar[bool] = False

    def server_update(self, server, mean_message, info: RoundInfo):
        delta, h = mean_message
        return ServerState(server.x - delta / h)
