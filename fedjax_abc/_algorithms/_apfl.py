"""APFL (Deng, Kamani and Mahdavi, 2020): a personal model mixed with the global one.

:func:`apfl_step` is one local step of Algorithm 1 (with eq. (10)'s step of the mixing
weight where it is learned); :class:`APFL` is the algorithm.
"""

from __future__ import annotations

from typing import Callable, ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from fedjax_abc._algorithms._base import AbstractAlgorithm, RoundInfo
from fedjax_abc._algorithms._checks import check_leaf, nonnegative_scalar
from fedjax_abc._algorithms._fedavg import ServerState, server_step, sgd_step

__all__ = ["APFL", "APFLClient", "apfl_step"]


def _mixing_weight(value):
    """``value`` as a float array leaf; ValueError unless it is a finite number in [0, 1]."""
    leaf = nonnegative_scalar("alpha", value)
    if float(leaf) > 1:
        raise ValueError(f"alpha must be <= 1, got {float(leaf)}")
    return leaf


def _check_mixing_weight(value) -> None:
    """:func:`check_leaf` for a weight in [0, 1] (a tracer passes unchecked)."""
    check_leaf("alpha", value, 0.0, strict=False)
    if not isinstance(value, jax.core.Tracer) and float(value) > 1:
        raise ValueError(f"alpha must be <= 1, got {float(value)}")


class APFLClient(NamedTuple):
    """A client's APFL state: its personal model v_i and its mixing weight alpha_i."""

    v: Array
    alpha: Array


def apfl_step(w: Array, client: APFLClient, gradient: Callable[[Array], Array], stepsize,
              learn_alpha: bool) -> tuple[Array, APFLClient]:
    """One local step of APFL's Algorithm 1 from (w, v, alpha), g the step's estimate:

        w <- w - eta g(w),
        v <- v - eta alpha g(v_bar),            v_bar = alpha v + (1 - alpha) w,
        alpha <- P_[0,1](alpha - eta <v - w, g(v_bar)>)     (eq. (10), where learned),

    every right-hand side at the step's start (P_[0,1] clips to [0, 1])."""
    v, alpha = client
    g_bar = gradient(alpha * v + (1 - alpha) * w)
    new_alpha = jnp.clip(alpha - stepsize * jnp.vdot(v - w, g_bar), 0, 1).astype(alpha.dtype) \
        if learn_alpha \
        else alpha
    return (sgd_step(w, gradient(w), stepsize),
            APFLClient(sgd_step(v, alpha * g_bar, stepsize), new_alpha))


class APFL(AbstractAlgorithm):
    """APFL (Deng, Kamani and Mahdavi, "Adaptive personalized federated learning", 2020,
    arXiv:2003.13461, Algorithm 1).

    Each client keeps a personal model v_i (client state, v_i = x_0 at the start) and a
    mixing weight alpha_i; its personal predictor is the mixture
    v_bar_i = alpha_i v_i + (1 - alpha_i) w. In round t each sampled client takes Q local
    steps from w = x_t (:func:`apfl_step`): w on f_i as FedAvg's, and v_i on
    f_i(alpha_i v + (1 - alpha_i) w) as a function of v, with the same stepsize and the same
    sample; with ``learn_alpha`` also alpha_i by its gradient (eq. (10)), clipped to [0, 1].
    The server averages the w^Q (the synchronisation every tau = Q local iterations). Only
    the sampled clients update v_i (and alpha_i). :meth:`personal` is
    alpha_i v_i + (1 - alpha_i) x_t, the mixture with the model a client receives.

    On f_i(x) = (a_i/2) ||x - b_i||^2 with exact gradients and full participation the global
    model reaches FedAvg's fixed point w*, and for fixed alpha in (0, 1] the personal model
    reaches a closed form (:func:`fedjax_abc.theory.apfl_fixed_point`): b_i exactly when
    Q = 1 or alpha = 1, otherwise b_i plus a bias from the global model's drift within a
    round.

    Departures: Algorithm 1 mixes v with the local copy w of the current step (as here);
    implementations often train v on its own loss and mix only for evaluation. The alpha
    step of PFLlib's APFL client (after FedTorch) adds a penalty 0.02 alpha and takes the
    gradients at v and w apart, alpha g(v) + (1 - alpha) g(w), in place of g(v_bar).

    Attributes:
      alpha: the mixing weight in [0, 1] (an array leaf): fixed, or alpha_i's start when
        learned. alpha = 0 is FedAvg (the personal model is x_t); alpha = 1 trains v_i on f_i
        alone.
      learn_alpha: whether each client learns its alpha_i (eq. (10)) (static).

    Example:
      >>> import fedjax_abc as fa
      >>> fa.algorithms.APFL(alpha=1.5)
      Traceback (most recent call last):
      ...
      ValueError: alpha must be <= 1, got 1.5
    """

    alpha: Float[Array, ""]
    learn_alpha: bool = eqx.field(static=True)

    def __init__(self, alpha, learn_alpha: bool = False):
        self.alpha = _mixing_weight(alpha)
        if not isinstance(learn_alpha, bool):
            raise ValueError(f"learn_alpha must be True or False, got {learn_alpha!r}")
        self.learn_alpha = learn_alpha

    def __check_init__(self):
        _check_mixing_weight(self.alpha)

    def init(self, x0):
        return ServerState(x0)

    def init_client(self, x0):
        return APFLClient(x0, jnp.asarray(self.alpha, x0.dtype))

    def client_init(self, server, client):
        return client  # (v_i, alpha_i) travel through the local steps beside w

    def local_step(self, server, w, client, gradient, stepsize):
        return apfl_step(w, client, gradient, stepsize, self.learn_alpha)

    def client_final(self, server, client, w, local, info):
        return w, local

    reads_scale: ClassVar[bool] = True

    def server_update(self, server, mean_message, info: RoundInfo):
        return ServerState(server_step(server.x, mean_message, info.scaled(1.0)))

    def personal(self, server, client, objective):
        return client.alpha * client.v + (1 - client.alpha) * server.x
