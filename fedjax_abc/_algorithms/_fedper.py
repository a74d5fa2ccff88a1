"""FedPer (Arivazhagan, Aggarwal, Singh and Choudhary, "Federated learning with
personalization layers", 2019): a shared body and personal heads trained jointly."""

from __future__ import annotations

from jaxtyping import Array, Bool

from fedjax_abc._algorithms._body_head import AbstractBodyHead, HeadRun, check_head
from fedjax_abc._algorithms._fedavg import sgd_step

__all__ = ["FedPer"]


class FedPer(AbstractBodyHead):
    """FedPer (Arivazhagan, Aggarwal, Singh and Choudhary, 2019): base layers shared,
    personalisation layers kept by each client.

    Every local step trains body and head together, at the client's model
    z = (body of y, h_i):

        z^{l+1} = z^l - alpha_t g_i(z^l; xi^l),   l = 0, ..., Q - 1,

    from z^0 = (body of x_t, h_i); the client keeps z^Q's head and sends its body; the
    server averages the bodies (FedAvg on the base layers; the personalisation layers are
    trained locally and never sent). See
    :class:`~fedjax_abc.algorithms.AbstractBodyHead` for what x_t and the client states
    hold. An empty head (all False) is FedAvg.

    Fixed point (exact gradients, full participation, clients separable in body and head,
    as f_i(x) = a_i/2 ||x - b_i||^2): each head at b_i's head coordinates, the body at
    FedAvg's fixed point with Q local steps (:func:`fedjax_abc.theory.body_head_fixed_point`).

    Attributes:
      head: Bool[Array, "d"], True on the personal coordinates (an array leaf; at least
        one coordinate shared). :func:`~fedjax_abc.algorithms.head_mask` builds it for a
        ``from_model`` problem.

    Example:
      >>> import fedjax_abc as fa
      >>> fa.algorithms.FedPer(head=[False, False, True]).head.tolist()
      [False, False, True]
    """

    head: Bool[Array, " d"]

    def __init__(self, head):
        self.head = check_head(head)

    def __check_init__(self):
        check_head(self.head)

    def local_step(self, server, y, local: HeadRun, gradient, stepsize):
        z = self.point(y, local.head)
        z = sgd_step(z, gradient(z), stepsize)
        return self.point(z, y), HeadRun(self.point(local.head, z), local.step + 1)
