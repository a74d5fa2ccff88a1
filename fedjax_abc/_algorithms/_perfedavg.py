"""Per-FedAvg (Fallah, Mokhtari and Ozdaglar, NeurIPS 2020): federated MAML.

:func:`hessian_vector_product` and :func:`perfedavg_direction` are the local step's parts;
:class:`PerFedAvg` is the algorithm.
"""

from __future__ import annotations

from typing import Callable, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from fedjax_abc._algorithms._base import RoundInfo
from fedjax_abc._algorithms._checks import check_leaf, nonnegative_scalar
from fedjax_abc._algorithms._fedavg import AbstractLocalSGD, ServerState, server_step, sgd_step

__all__ = ["PerFedAvg", "VARIANTS", "hessian_vector_product", "perfedavg_direction"]

VARIANTS = ("hf", "fo")


def hessian_vector_product(gradient: Callable[[Array], Array], w: Array, u: Array,
                           delta) -> Array:
    """H(w) u for the Jacobian H of ``gradient`` at w.

    delta > 0: the central difference of Per-FedAvg (HF),
    (g(w + delta u) - g(w - delta u)) / (2 delta); delta = 0: the exact product, a ``jax.jvp``
    of ``gradient`` at w along u. Both are computed and one is selected (delta may be traced),
    so ``gradient`` must be differentiable.
    """
    safe = jnp.where(delta > 0, delta, 1).astype(w.dtype)
    difference = (gradient(w + safe * u) - gradient(w - safe * u)) / (2 * safe)
    exact = jax.jvp(gradient, (w,), (u,))[1]
    return jnp.where(delta > 0, difference, exact)


def perfedavg_direction(w: Array, gradient: Callable[[Array], Array], alpha, variant: str,
                        delta) -> Array:
    """The direction of a Per-FedAvg local step at w: with w~ = w - alpha g(w) and
    u = g(w~), (I - alpha H(w)) u for "hf" (H u by :func:`hessian_vector_product`) and u
    for "fo", where ``gradient`` is the step's estimate g."""
    u = gradient(w - alpha * gradient(w))
    if variant == "fo":
        return u
    return u - alpha * hessian_vector_product(gradient, w, u, delta)


class PerFedAvg(AbstractLocalSGD):
    """Per-FedAvg (Fallah, Mokhtari and Ozdaglar, "Personalized federated learning with
    theoretical guarantees: a model-agnostic meta-learning approach", NeurIPS 2020,
    Algorithm 1).

    Per-FedAvg minimises F(w) = (1/n) sum_i f_i(w - alpha grad f_i(w)) (its eq. (3)): the
    mean loss after one personal gradient step of size alpha. Each sampled client takes Q
    local steps from w = x_t,

        w~ = w - alpha g_i(w),    w <- w - beta (I - alpha H_i(w)) g_i(w~),

    beta being the run's stepsize, and the server averages the w^Q (Algorithm 1). The two
    approximations of the paper's Section 5:

    - ``"hf"`` (Hessian-free): H_i(w) u by the central difference
      (g_i(w + delta u) - g_i(w - delta u)) / (2 delta) with delta > 0, or exactly (a
      ``jax.jvp`` of the step's gradient estimate) with delta = 0;
    - ``"fo"`` (first-order): H_i = 0, w <- w - beta g_i(w~).

    Every gradient of a local step is the oracle's estimate with that step's noise (the paper
    draws three independent batches D, D', D''). :meth:`personal` is one exact gradient
    step from x_t, x_t - alpha grad f_i(x_t), the model the meta-objective evaluates.

    On f_i(x) = (a_i/2) ||x - b_i||^2 with exact gradients the local step is a gradient step
    on a quadratic of curvature a_i (1 - alpha a_i)^2 ("hf", exactly the gradient of F_i) or
    a_i (1 - alpha a_i) ("fo"): the first-order variant converges to another point
    (:func:`fedjax_abc.theory.perfedavg_fixed_point`, the gap
    :func:`~fedjax_abc.theory.perfedavg_first_order_bias`).

    Departures: the Per-FedAvg client of the pFedMe authors' code (CharlieDinh/pFedMe,
    ``userperavg.py``) takes the first-order step only, and its personal model for
    evaluation (``train_one_step``) takes two steps on two mini-batches, of sizes alpha and
    beta, instead of one step of size alpha.

    Attributes:
      alpha: the inner (personalisation) stepsize >= 0 (an array leaf); alpha = 0 is FedAvg.
      delta: the finite difference's step >= 0 (an array leaf; 0: exact Hessian-vector
        products); read by "hf" only.
      variant: "hf" or "fo" (static).

    Example:
      >>> import fedjax_abc as fa
      >>> fa.algorithms.PerFedAvg(alpha=0.01, variant="so")
      Traceback (most recent call last):
      ...
      ValueError: variant must be one of ('hf', 'fo'), got 'so'
    """

    alpha: Float[Array, ""]
    delta: Float[Array, ""]
    variant: str = eqx.field(static=True)

    def __init__(self, alpha, variant: str = "hf", delta=1e-3):
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
        self.alpha = nonnegative_scalar("alpha", alpha)
        self.delta = nonnegative_scalar("delta", delta)
        self.variant = variant

    def __check_init__(self):
        check_leaf("alpha", self.alpha, 0.0, strict=False)
        check_leaf("delta", self.delta, 0.0, strict=False)

    def init(self, x0):
        return ServerState(x0)

    def local_step(self, server, w, local, gradient, stepsize):
        d = perfedavg_direction(w, gradient, self.alpha, self.variant, self.delta)
        return sgd_step(w, d, stepsize), local

    reads_scale: ClassVar[bool] = True

    def server_update(self, server, mean_message, info: RoundInfo):
        return ServerState(server_step(server.x, mean_message, info.scaled(1.0)))

    def personal(self, server, client, objective):
        return sgd_step(server.x, objective.gradient(server.x), self.alpha)
