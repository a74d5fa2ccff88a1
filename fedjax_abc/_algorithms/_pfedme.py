"""pFedMe (Dinh, Tran and Nguyen, NeurIPS 2020): personalisation with Moreau envelopes.

:func:`pfedme_theta` is the inner problem of eqs. (7)-(8) solved by gradient steps;
:class:`PFedMe` is the algorithm.
"""

from __future__ import annotations

from typing import Callable, ClassVar

import equinox as eqx
import jax
from jaxtyping import Array, Float

from fedjax_abc._algorithms._base import RoundInfo
from fedjax_abc._algorithms._checks import check_leaf, positive_scalar
from fedjax_abc._algorithms._fedavg import AbstractLocalSGD, ServerState, server_step, sgd_step

__all__ = ["PFedMe", "pfedme_theta"]


def pfedme_theta(w: Array, gradient: Callable[[Array], Array], lam, inner_stepsize,
                 inner_steps: int) -> Array:
    """theta_i(w): K gradient steps on h_i(theta; w) = f_i(theta) + (lam/2) ||theta - w||^2
    from theta = w (pFedMe's eq. (7); its accuracy nu of eq. (8) is set by K),

        theta <- theta - inner_stepsize (g(theta) + lam (theta - w)),

    where ``gradient(theta)`` estimates grad f_i(theta) (the local step's oracle, one mini-batch
    for the K steps, or the exact gradient)."""
    def step(theta, _):
        return sgd_step(theta, gradient(theta) + lam * (theta - w), inner_stepsize), None

    theta, _ = jax.lax.scan(step, w, None, length=inner_steps)
    return theta


class PFedMe(AbstractLocalSGD):
    """pFedMe (Dinh, Tran and Nguyen, "Personalized federated learning with Moreau
    envelopes", NeurIPS 2020, Algorithm 1).

    pFedMe minimises the mean of the Moreau envelopes F_i(w) = min_theta f_i(theta) +
    (lam/2) ||theta - w||^2. In round t every client starts from w^0 = x_t; at each local
    step it solves the inner problem approximately (eqs. (7)-(8), :func:`pfedme_theta`: K =
    ``inner_steps`` gradient steps of size ``inner_stepsize`` from theta = w, all with the
    local step's oracle noise, the paper's one mini-batch D_i), then steps on the envelope,

        w <- w - eta_t lam (w - theta_i(w))                                     (9)

    (eta_t the run's stepsize), and sends w^Q; the server takes
    x_{t+1} = (1 - beta) x_t + beta mean_i w_i^Q (Algorithm 1's global update).
    :meth:`personal` is theta_i(x_t) with the exact gradient: the personal model a client
    computes at the start of a round from the model it receives (the engine evaluates it
    at x_t, for every client, sampled or not).

    On f_i(x) = (a_i/2) ||x - b_i||^2 with exact gradients each local step is a gradient step
    on a quadratic of curvature a_i lam (1 - rho_i^K) / (a_i + lam), rho_i = 1 -
    inner_stepsize (a_i + lam), the Moreau envelope's a_i lam / (a_i + lam) as K -> infinity
    (:func:`fedjax_abc.theory.pfedme_fixed_point`).

    Departures: the authors' code (CharlieDinh/pFedMe, ``userpFedMe.py`` and its
    ``pFedMeOptimizer``) warm-starts theta from the previous local step's theta instead of
    from w, adds a weight decay mu theta (mu = 0.001) to every inner step, and reports the
    personal model reached at the round's last local step (theta_i(w^{Q-1}), not
    theta_i(x_t)). The paper's clients all compute their local steps and the server then
    samples whose w^Q it averages; here only the sampled clients run (the same law for the
    next server model, since a client's local steps do not change its state).

    Attributes:
      lam: lambda > 0, the Moreau envelope's weight (an array leaf).
      inner_steps: K >= 1, the inner gradient steps (static: it sets a loop's length).
      inner_stepsize: the inner steps' stepsize > 0 (an array leaf; the paper's
        "personal learning rate").
      beta: the server's step beta > 0 (an array leaf); beta = 1 averages as FedAvg.

    Example:
      >>> import fedjax_abc as fa
      >>> fa.algorithms.PFedMe(lam=15.0, inner_steps=0, inner_stepsize=0.01)
      Traceback (most recent call last):
      ...
      ValueError: inner_steps (K) must be an integer >= 1, got 0
    """

    lam: Float[Array, ""]
    inner_stepsize: Float[Array, ""]
    beta: Float[Array, ""]
    inner_steps: int = eqx.field(static=True)

    def __init__(self, lam, inner_steps, inner_stepsize, beta=1.0):
        if isinstance(inner_steps, bool) or not isinstance(inner_steps, int) or inner_steps < 1:
            raise ValueError(f"inner_steps (K) must be an integer >= 1, got {inner_steps!r}")
        self.lam = positive_scalar("lam", lam)
        self.inner_steps = int(inner_steps)
        self.inner_stepsize = positive_scalar("inner_stepsize", inner_stepsize)
        self.beta = positive_scalar("beta", beta)

    def __check_init__(self):
        check_leaf("lam", self.lam, 0.0, strict=True)
        check_leaf("inner_stepsize", self.inner_stepsize, 0.0, strict=True)
        check_leaf("beta", self.beta, 0.0, strict=True)

    def init(self, x0):
        return ServerState(x0)

    def theta(self, w: Array, gradient: Callable[[Array], Array]) -> Array:
        """theta_i(w) of this algorithm's K, lam and inner stepsize (:func:`pfedme_theta`)."""
        return pfedme_theta(w, gradient, self.lam, self.inner_stepsize, self.inner_steps)

    def local_step(self, server, w, local, gradient, stepsize):
        return sgd_step(w, self.lam * (w - self.theta(w, gradient)), stepsize), local

    reads_scale: ClassVar[bool] = True

    def server_update(self, server, mean_message, info: RoundInfo):
        return ServerState(server_step(server.x, mean_message, info.scaled(self.beta)))

    def personal(self, server, client, objective):
        return self.theta(server.x, objective.gradient)
