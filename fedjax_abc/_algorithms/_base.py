"""The algorithm interface: a federated algorithm as a value (an ``equinox.Module``).

An algorithm is four pure functions, in the spirit of optax's ``init`` / ``update``:

- ``init(x0) -> server state`` of one trial (a pytree with a field ``x``, the model the
  records read);
- ``client_init(x0) -> client state`` of one client of one trial (``()`` when stateless);
- ``client_update(problem, oracle, i, server, client, stepsize, noise, local_steps)
  -> (message, new client state)``: client i's work in a round, from the server's state;
- ``server_update(server, mean_message, info) -> server state``: the server's step from the
  weighted mean of the sampled clients' messages.

The engine runs them for every trial and every (virtual or sampled) client: hyperparameters
are array leaves, so a new value (``FedProx(mu=0.2)``) compiles nothing new. Only sampled
clients (weight > 0) keep their new client state; the others keep the old one.
"""

from __future__ import annotations

import abc
from typing import Any, NamedTuple

import equinox as eqx
from jaxtyping import Array

__all__ = ["AbstractAlgorithm", "RoundInfo"]


class RoundInfo(NamedTuple):
    """What the server knows about a round besides the mean message (one trial).

    Attributes:
      total_weight: sum of the sampled slots' weights (S for uniform sampling), shape ().
      num_clients: n (static).
      stepsize: alpha_t, shape ().
      local_steps: Q (static).
    """

    total_weight: Array
    num_clients: int
    stepsize: Array
    local_steps: int


class AbstractAlgorithm(eqx.Module):
    """A federated algorithm: server and client states, client and server updates.

    Subclass it and implement the four methods; see :class:`~fedjax_abc.algorithms.FedAvg`
    for the simplest example and the README for a user-written one.
    """

    @abc.abstractmethod
    def init(self, x0: Array) -> Any:
        """The server state of one trial at t = 0; it has a field ``x`` (shape (d,))."""

    @abc.abstractmethod
    def client_init(self, x0: Array) -> Any:
        """One client's state at t = 0 (``()`` for a stateless algorithm)."""

    @abc.abstractmethod
    def client_update(self, problem, oracle, i, server, client, stepsize, noise,
                      local_steps: int) -> tuple[Any, Any]:
        """(message, new client state) of client i in a round (i may be traced).

        ``noise`` is the client's noise for the round's ``local_steps`` steps, as
        :func:`~fedjax_abc.local_run` takes it.
        """

    @abc.abstractmethod
    def server_update(self, server, mean_message, info: RoundInfo) -> Any:
        """The next server state from the weighted mean of the sampled clients' messages."""
