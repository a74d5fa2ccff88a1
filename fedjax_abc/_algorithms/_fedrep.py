"""FedRep (Collins, Hassani, Mokhtari and Shakkottai, "Exploiting shared representations
for personalized federated learning", ICML 2021): personal heads trained first, then the
shared representation."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Int

from fedjax_abc._algorithms._body_head import AbstractBodyHead, HeadRun, check_head
from fedjax_abc._algorithms._fedavg import sgd_step
from fedjax_abc._problems._local_work import AbstractLocalSteps

__all__ = ["FedRep"]


class FedRep(AbstractBodyHead):
    """FedRep (Collins, Hassani, Mokhtari and Shakkottai, ICML 2021, Algorithm 1).

    Client i first updates its head h_i alone for tau_h steps at the fixed body of x_t,
    then the body alone for tau steps at its new head:

        h^{l+1} = h^l - alpha_t g_i(phi_t, h^l)_head,          l < tau_h,
        phi^{l+1} = phi^l - alpha_t g_i(phi^l, h^{tau_h})_body,  tau_h <= l < Q,

    and the server averages the bodies phi_i. The engine's Q local steps are
    split: the first ``head_steps`` (tau_h) train the head, the remaining Q - tau_h
    (tau) the body; with random or per-client local work (K_i steps), a client with
    K_i <= tau_h trains only its head that round. See
    :class:`~fedjax_abc.algorithms.AbstractBodyHead` for what x_t and the client states
    hold.

    Departures: the authors' code counts the local work in epochs over the client's data
    (``--local_ep`` in all, the last ``--local_rep_ep`` of them for the body, the same
    head-first split); here tau_h and Q are steps of the oracle.

    Fixed point (exact gradients, full participation, clients separable in body and head,
    as f_i(x) = a_i/2 ||x - b_i||^2): each head at b_i's head coordinates, the body at
    FedAvg's fixed point with Q - tau_h local steps
    (:func:`fedjax_abc.theory.body_head_fixed_point`).

    Attributes:
      head: Bool[Array, "d"], True on the personal coordinates (an array leaf; at least
        one shared). :func:`~fedjax_abc.algorithms.head_mask` builds it for a
        ``from_model`` problem.
      head_steps: tau_h >= 0, an integer below Q (an array leaf).

    Example:
      >>> import fedjax_abc as fa
      >>> int(fa.algorithms.FedRep(head=[False, True], head_steps=3).head_steps)
      3
    """

    head: Bool[Array, " d"]
    head_steps: Int[Array, ""]

    def __init__(self, head, head_steps):
        self.head = check_head(head)
        self.head_steps = _steps(head_steps)

    def __check_init__(self):
        check_head(self.head)
        _steps(self.head_steps)

    def local_step(self, server, y, local: HeadRun, gradient, stepsize):
        z = self.point(y, local.head)
        z = sgd_step(z, gradient(z), stepsize)
        on_head = local.step < self.head_steps
        y = jnp.where(on_head, y, self.point(z, y))
        h = jnp.where(on_head, self.point(local.head, z), local.head)
        return y, HeadRun(h, local.step + 1)

    def check_local_steps(self, local_steps) -> None:
        """tau_h must leave the body at least one of the Q (or Q_max) local steps."""
        Q = local_steps.max_steps if isinstance(local_steps, AbstractLocalSteps) else local_steps
        tau_h = _steps(self.head_steps)
        if tau_h is not None and int(tau_h) >= Q:
            raise ValueError(f"head_steps (tau_h={int(tau_h)}) must be below the local steps "
                             f"(Q={Q}): the body needs at least one of them")


def _steps(value):
    """``head_steps`` as an int32 array leaf; ValueError unless it is an integer >= 0. A
    tracer passes unchecked (None)."""
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"head_steps (tau_h) must be an integer >= 0, got {value!r}")
    try:
        a = np.asarray(value)
    except Exception:  # a tracer
        return None
    if a.shape != () or not np.issubdtype(a.dtype, np.number) or not np.isfinite(a) or \
            a != np.round(a) or a < 0:
        raise ValueError(f"head_steps (tau_h) must be an integer >= 0, got {value!r}")
    return np.asarray(int(a), np.int32)
