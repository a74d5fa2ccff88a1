"""Any algorithm's personal models after local fine-tuning: a fair baseline for
personalisation (FedAvg plus fine-tuning against Ditto, pFedMe, Per-FedAvg, APFL)."""

from __future__ import annotations

from typing import Callable

import equinox as eqx
import jax
from jaxtyping import Array, Float

from fedjax_abc._algorithms._base import AbstractAlgorithm, RoundInfo
from fedjax_abc._algorithms._checks import check_leaf, positive_scalar
from fedjax_abc._algorithms._fedavg import sgd_step

__all__ = ["FineTuned", "fine_tune"]


def fine_tune(z: Array, gradient: Callable[[Array], Array], steps: int, stepsize) -> Array:
    """``steps`` gradient steps z <- z - stepsize grad f_i(z) from z (``gradient`` exact)."""
    def step(z_k, _):
        return sgd_step(z_k, gradient(z_k), stepsize), None

    z, _ = jax.lax.scan(step, z, None, length=steps)
    return z


class FineTuned(AbstractAlgorithm):
    """``algorithm`` trained as it is, its clients evaluated after local fine-tuning.

    Every method of the inner algorithm is its own (the server and client states, the
    local steps, the messages, the server's update: the same numbers round for round);
    only :meth:`personal` changes: client i's model is the inner algorithm's personal model
    z_0 (x_t for FedAvg) after K = ``steps`` exact gradient steps on f_i,

        z_{k+1} = z_k - gamma grad f_i(z_k),    k = 0, ..., K - 1,

    gamma = ``stepsize``, on all the client's data: the "FedAvg + fine-tuning" baseline
    (Per-FedAvg's experiments evaluate FedAvg after one such local step), given the same
    personalisation budget as the method it is compared with. On
    f_i(x) = (a_i/2) ||x - b_i||^2, FedAvg's fine-tuned model is
    b_i + (1 - gamma a_i)^K (w* - b_i) at its fixed point w*
    (:func:`fedjax_abc.theory.fine_tuned_personal`).

    Attributes:
      algorithm: the inner algorithm.
      steps: K >= 0, the fine-tuning steps (static: it sets a loop's length); 0 gives the
        inner algorithm's personal model.
      stepsize: gamma > 0, the fine-tuning stepsize (an array leaf).

    Example:
      >>> import fedjax_abc as fa
      >>> fa.algorithms.FineTuned(fa.algorithms.FedAvg(), steps=-1, stepsize=0.1)
      Traceback (most recent call last):
      ...
      ValueError: steps (K) must be an integer >= 0, got -1
    """

    algorithm: AbstractAlgorithm
    stepsize: Float[Array, ""]
    steps: int = eqx.field(static=True)

    def __init__(self, algorithm: AbstractAlgorithm, steps: int, stepsize):
        if not isinstance(algorithm, AbstractAlgorithm):
            raise ValueError(f"algorithm must be a fedjax_abc.algorithms.AbstractAlgorithm, "
                             f"got {algorithm!r}")
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(f"steps (K) must be an integer >= 0, got {steps!r}")
        self.algorithm = algorithm
        self.steps = int(steps)
        self.stepsize = positive_scalar("stepsize", stepsize)

    def __check_init__(self):
        check_leaf("stepsize", self.stepsize, 0.0, strict=True)

    @property
    def reads_scale(self) -> bool:  # the inner algorithm's server update
        return self.algorithm.reads_scale

    @property
    def needs_unit_weights(self) -> bool:
        return self.algorithm.needs_unit_weights

    def init(self, x0):
        return self.algorithm.init(x0)

    def init_client(self, x0):
        return self.algorithm.init_client(x0)

    def client_init(self, server, client):
        return self.algorithm.client_init(server, client)

    def local_step(self, server, y, local, gradient, stepsize):
        return self.algorithm.local_step(server, y, local, gradient, stepsize)

    def client_final(self, server, client, y, local, info):
        return self.algorithm.client_final(server, client, y, local, info)

    def server_update(self, server, mean_message, info: RoundInfo):
        return self.algorithm.server_update(server, mean_message, info)

    def query(self, server, client, full_gradient):
        return self.algorithm.query(server, client, full_gradient)

    def receive(self, server, mean_query):
        return self.algorithm.receive(server, mean_query)

    def check_local_steps(self, local_steps) -> None:
        self.algorithm.check_local_steps(local_steps)

    def personal(self, server, client, objective):
        z = self.algorithm.personal(server, client, objective)
        return fine_tune(z, objective.gradient, self.steps, self.stepsize)
