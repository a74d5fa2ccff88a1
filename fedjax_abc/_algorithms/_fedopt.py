"""FedOpt: an optax optimizer on the server, applied to the pseudo-gradient.

Reddi et al., "Adaptive Federated Optimization" (ICLR 2021): FedAvgM, FedAdam, FedYogi and
FedAdagrad are FedOpt with ``optax.sgd(lr, momentum=b)``, ``optax.adam(lr)``,
``optax.yogi(lr)`` and ``optax.adagrad(lr)``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import equinox as eqx
import numpy as np
import optax
from jaxtyping import Array

from fedjax_abc._algorithms._base import AbstractServerState, RoundInfo
from fedjax_abc._algorithms._checks import momentum, positive_scalar
from fedjax_abc._algorithms._fedavg import AbstractLocalSGD

__all__ = ["FedAdagrad", "FedAdam", "FedAvgM", "FedOpt", "FedOptState", "FedYogi"]


class FedOptState(AbstractServerState):
    """FedOpt's server state: the model x and the server optimizer's state."""

    x: Array
    opt_state: Any


def _check_descends(tx: optax.GradientTransformation) -> None:
    """ValueError unless ``tx``'s first update of a pseudo-gradient of ones steps against it
    (a negative learning rate would climb): checked on a point of R^1 in NumPy's float64."""
    x = np.zeros(1)
    try:
        updates, _ = tx.update(np.ones(1), tx.init(x), x)
        step = float(np.asarray(updates)[0])
    except Exception:  # noqa: BLE001 - an optimizer this probe cannot run: not judged
        return
    if not step < 0:
        raise ValueError(f"server_optimizer's first update of a pseudo-gradient of ones is "
                         f"{step:g}: it must step against it (a positive learning rate)")


class FedOpt(AbstractLocalSGD):
    """FedAvg's clients with an optax server optimizer (Reddi et al., 2021).

    Sampled clients run Q local steps from x_t as in Algorithm 1; the server forms the
    pseudo-gradient Delta_t = x_t - sum_i w_i y_i / sum_i w_i and applies the optimizer:
    (u_t, s_{t+1}) = tx.update(Delta_t, s_t, x_t), x_{t+1} = x_t + u_t. ``optax.sgd(1.0)``
    is Algorithm 1 (to rounding).

    The optimizer is static: reuse one object to avoid recompiling (a new
    ``optax.adam(1e-3)`` is a new program); for hyperparameters that change without
    recompiling, build it with ``optax.inject_hyperparams``.

    Attributes:
      server_optimizer: an ``optax.GradientTransformation``.

    Example:
      >>> import jax, optax, fedjax_abc as fa
      >>> p = fa.problems.huber_offsets(jax.random.key(0), n=10, d_max=20.0)
      >>> res = fa.simulate(p, num_sampled=2, local_steps=5, stepsize=1e-2, rounds=100,
      ...                   x0=p.x_star + 1.0, trials=8, key=jax.random.key(1),
      ...                   algorithm=fa.algorithms.FedOpt(optax.adam(0.1)))
      >>> res.gap.shape
      (8, 101)
    """

    server_optimizer: optax.GradientTransformation = eqx.field(static=True)

    def __init__(self, server_optimizer):
        if not isinstance(server_optimizer, optax.GradientTransformation):
            raise ValueError("server_optimizer must be an optax GradientTransformation "
                             f"(e.g. optax.adam(1e-2)), got {type(server_optimizer).__name__}")
        _check_descends(server_optimizer)
        self.server_optimizer = server_optimizer

    def init(self, x0):
        return FedOptState(x0, self.server_optimizer.init(x0))

    reads_scale: ClassVar[bool] = True

    def server_update(self, server, mean_message, info: RoundInfo):
        pseudo_grad = info.scaled(server.x - mean_message)
        updates, opt_state = self.server_optimizer.update(pseudo_grad, server.opt_state, server.x)
        return FedOptState(optax.apply_updates(server.x, updates), opt_state)


def FedAvgM(server_lr=1.0, momentum=0.9) -> FedOpt:  # noqa: N802 - a named algorithm
    """FedAvg with server momentum (Hsu et al., 2019): ``FedOpt(optax.sgd(lr, momentum))``.

    v <- momentum v + Delta_t, x_{t+1} = x_t - lr v, Delta_t the pseudo-gradient.
    """
    return FedOpt(optax.sgd(positive("server_lr", server_lr),
                            momentum=check_beta("momentum", momentum)))


def FedAdam(server_lr=1e-2, b1=0.9, b2=0.99, eps=1e-3) -> FedOpt:  # noqa: N802
    """FedAdam (Reddi et al., 2021): ``FedOpt(optax.adam(lr, b1, b2, eps))``.

    Adam on the pseudo-gradient with the paper's defaults beta_1 = 0.9, beta_2 = 0.99 and
    tau = eps = 1e-3; optax corrects the moments' bias (m / (1 - b1^t), v / (1 - b2^t)),
    the paper's Algorithm 2 does not.
    """
    return FedOpt(optax.adam(positive("server_lr", server_lr), b1=check_beta("b1", b1),
                             b2=check_beta("b2", b2), eps=positive("eps", eps)))


def FedYogi(server_lr=1e-2, b1=0.9, b2=0.99, eps=1e-3) -> FedOpt:  # noqa: N802
    """FedYogi (Reddi et al., 2021): ``FedOpt(optax.yogi(lr, b1, b2, eps))``.

    Yogi's second moment v <- v - (1 - b2) Delta^2 sign(v - Delta^2) on the
    pseudo-gradient, with the paper's defaults (as :func:`FedAdam`).
    """
    return FedOpt(optax.yogi(positive("server_lr", server_lr), b1=check_beta("b1", b1),
                             b2=check_beta("b2", b2), eps=positive("eps", eps)))


def FedAdagrad(server_lr=1e-2, eps=1e-3) -> FedOpt:  # noqa: N802
    """FedAdagrad (Reddi et al., 2021): ``FedOpt(optax.adagrad(lr, eps=eps))``.

    v <- v + Delta^2, x_{t+1} = x_t - lr Delta / sqrt(v + eps) (optax's form, with its
    initial accumulator 0.1; the paper divides by sqrt(v) + tau, without momentum here).
    """
    return FedOpt(optax.adagrad(positive("server_lr", server_lr), eps=positive("eps", eps)))


def positive(name: str, value) -> float:
    """A finite number > 0 as a Python float (an optax hyperparameter)."""
    return float(positive_scalar(name, value))


def check_beta(name: str, value) -> float:
    """A momentum or moment decay in [0, 1) as a Python float (an optax hyperparameter)."""
    return float(momentum(name, value))
