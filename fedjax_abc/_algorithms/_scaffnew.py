"""Scaffnew / ProxSkip (Mishchenko et al., 2022): local steps with control variates and
communication with probability p."""

from __future__ import annotations

from typing import ClassVar, NamedTuple

import jax.numpy as jnp
from jaxtyping import Array, Float

from fedjax_abc._algorithms._base import AbstractAlgorithm, RoundInfo
from fedjax_abc._algorithms._checks import check_leaf, positive_scalar
from fedjax_abc._algorithms._fedavg import ServerState, sgd_step
from fedjax_abc._problems._local_work import AbstractLocalSteps, GeometricSteps

__all__ = ["Scaffnew", "ScaffnewClient"]


class ScaffnewClient(NamedTuple):
    """A client's Scaffnew state: h_i, its last local model and p / gamma of that round."""

    h: Array
    y: Array
    p_over_gamma: Array


class Scaffnew(AbstractAlgorithm):
    """Scaffnew, ProxSkip's federated form (Mishchenko, Malinovsky, Stich and Richtarik,
    "ProxSkip: yes! Local gradient steps provably lead to communication acceleration!
    Finally!", ICML 2022, Algorithm 2).

    Each iteration every client takes y_i <- y_i - gamma (g_i(y_i) - h_i); with probability
    p the clients communicate. A round here is the K ~ Geometric(p) iterations up to a
    communication: run it with ``local_steps=Scaffnew(p).local_steps(max_steps)`` (one K for
    all clients, :class:`~fedjax_abc.GeometricSteps` with ``shared=True``). At the
    communication the server averages y_i - (gamma / p) h_i into x_{t+1}, and each client
    sets h_i <- h_i + (p / gamma) (x_{t+1} - y_i) (done at the start of its next round, when
    it receives x_{t+1}); h_i = 0 at the start. gamma is the run's stepsize. With exact
    gradients and full participation the fixed point is x* (the h_i become grad f_i(x*)).
    The method assumes full participation; it needs a sampler with distinct slots. With
    partial participation a client applies its h_i update at its next participation, with
    the model of that round instead of x_{t+1}: a heuristic outside the paper's analysis,
    whose control variates can drift and diverge.

    Attributes:
      p: the communication probability in (0, 1] (an array leaf); p = 1 is gradient
        descent with one local step.

    Example:
      >>> import fedjax_abc as fa
      >>> fa.algorithms.Scaffnew(p=0.2).local_steps(100).max_steps
      100
    """

    needs_unit_weights: ClassVar[bool] = True

    p: Float[Array, ""]

    def __init__(self, p):
        self.p = positive_scalar("p (communication probability)", p)
        if float(self.p) > 1:
            raise ValueError(f"p (communication probability) must be <= 1, got {float(self.p)}")

    def __check_init__(self):
        check_leaf("p (communication probability)", self.p, 0.0, strict=True)
        check_leaf("1 - p (communication probability)", 1 - self.p, 0.0, strict=False)

    def local_steps(self, max_steps: int):
        """The law of the iterations between two communications: Geometric(p), shared."""
        return GeometricSteps(self.p, max_steps, shared=True)

    def check_local_steps(self, local_steps) -> None:
        """A law shared by the clients with a probability p (Scaffnew's own, a shared
        Geometric law, :meth:`local_steps`) must have this p: a round is the Geometric(p)
        iterations up to a communication, and its control variates are scaled by the same
        p (a sweep or tune over p must change both)."""
        p = local_steps.stop_probability() if isinstance(local_steps, AbstractLocalSteps) \
            else None  # Q (an int) has none
        if p is not None and local_steps.same_for_all_clients() and float(p) != float(self.p):
            raise ValueError(f"Scaffnew's p ({float(self.p):g}) and its law of local steps' p "
                             f"({float(p):g}) differ: run it with local_steps="
                             "Scaffnew(p).local_steps(max_steps), one p for both (to vary p, "
                             "give each p its own law: one run per p)")

    def init(self, x0):
        return ServerState(x0)

    def init_client(self, x0):
        return ScaffnewClient(jnp.zeros_like(x0), x0, jnp.zeros((), x0.dtype))

    def client_init(self, server, client):
        # h_i's update of the last communication, now that x_{t+1} is known
        return client.h + client.p_over_gamma * (server.x - client.y)

    def local_step(self, server, y, h, gradient, stepsize):
        return sgd_step(y, gradient(y) - h, stepsize), h

    def client_final(self, server, client, y, h, info):
        p = self.p.astype(y.dtype)
        gamma = info.stepsize
        return y - (gamma / p) * h, ScaffnewClient(h, y, p / gamma)

    reads_scale: ClassVar[bool] = False

    def server_update(self, server, mean_message, info: RoundInfo):
        return ServerState(mean_message)
