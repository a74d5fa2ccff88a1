"""The algorithm interface: a federated algorithm as a value (an ``equinox.Module``).

An algorithm gives the steps; the engine runs the loops (fedjax's ``client_init /
client_step / client_final`` in equinox's container). For one trial:

- ``init(x0) -> server state``: an :class:`AbstractServerState`, whose ``x`` is the model
  x_t that the records read;
- ``init_client(x0) -> client state`` of one client at t = 0 (``()`` when stateless);
- ``client_init(server, client) -> local``: the client's local state besides its model
  (``()`` for plain local SGD); the local model starts at y^0 = x_t;
- ``local_step(server, y, local, gradient, stepsize) -> (y, local)``: one local step, where
  ``gradient(z)`` is the oracle's estimate g_i(z; xi^l) of this step (the same noise at
  every point it is called at);
- ``client_final(server, client, y, local, info) -> (message, client state)``: what the
  client sends after its local steps, and its new state; ``info`` is a :class:`LocalInfo`
  (how many steps it took, the stepsize);
- ``server_update(server, mean_message, info) -> server state``: the server's step from the
  weighted mean of the participants' messages.

One optional method gives client i its own model: ``personal(server, client, objective)``,
the model a personalised algorithm evaluates client i at (its own v_i for Ditto, the
mixture of APFL, x_t adapted by one step for Per-FedAvg; x_t by default), where
``objective`` is a :class:`LocalObjective` (f_i and its exact gradient on all the client's
data). ``simulate(..., record_clients=True)`` records every client's personal model and
its loss f_i at every record.

Two optional methods give a round a first communication before the local steps (MIME's
full gradients at x_t): ``query(server, client, full_gradient)``, what a sampled client
sends first (``full_gradient(z)`` is its exact grad f_i(z) on all its data), and
``receive(server, mean_query) -> server state``, the state the clients' local steps start
from, given the weighted mean of the round's queries. The default ``query`` returns None:
one communication a round.

The engine owns the scan over local steps, the oracle's noise, the step mask of
heterogeneous or random local work (:mod:`fedjax_abc._engine._local`) and the message
transforms applied to Delta_i = y_i - x_t before ``client_final``. Hyperparameters are array
leaves, so a new value (``FedProx(mu=0.2)``) compiles nothing new; they are checked in
``__check_init__``, which the sweep runs again for every grid value. Only participants
(weight > 0) keep their new client state.
"""

# no ``from __future__ import annotations`` here: equinox reads ``eqx.AbstractVar`` from the
# annotation object (a string annotation would declare a field instead)

import abc
import dataclasses
from typing import Any, Callable, ClassVar, NamedTuple, Optional, Union

import equinox as eqx
from jaxtyping import Array

__all__ = ["AbstractAlgorithm", "AbstractServerState", "LocalInfo", "LocalObjective", "RoundInfo",
           "recheck", "recheck_all"]


class RoundInfo(NamedTuple):
    """What the server knows about a round besides the mean message (one trial).

    Attributes:
      total_weight: sum of the sampled slots' weights (S for uniform sampling), shape ().
      num_clients: n (static).
      stepsize: alpha_t, shape ().
      local_steps: Q, or Q_max when the clients' local work differs (static).
      scale: None for a normalised sampler (the mean message is the round's aggregate);
        for an unbiased one (``sampler.normalised()`` False), sum_j w_j, shape (): the
        aggregate update is ``scale`` times the mean message's (see :meth:`scaled`).
    """

    total_weight: Array
    num_clients: int
    stepsize: Array
    local_steps: int
    scale: Optional[Array] = None

    def scaled(self, update):
        """``update`` (an array, or the server stepsize) times ``scale``; as is when None."""
        return update if self.scale is None else update * self.scale


class LocalObjective(NamedTuple):
    """Client i's own objective, exactly, on all its data (one client of one trial).

    Attributes:
      index: i, an int32 array of shape ().
      value: z -> f_i(z), shape ().
      gradient: z -> grad f_i(z), the exact gradient (no oracle noise).
    """

    index: Array
    value: Callable[[Array], Array]
    gradient: Callable[[Array], Array]


class LocalInfo(NamedTuple):
    """What a client knows about its round's local work (one client of one trial).

    Attributes:
      steps: how many local steps it took: the int Q, or a traced count (shape ()) when the
        clients' local work differs or is random.
      stepsize: alpha_t, shape ().
      objective: the client's :class:`LocalObjective` (its index, f_i and grad f_i exactly),
        for rules that weigh a client by its loss (q-FFL, AFL); None where the engine
        gives none (an asynchronous client).
    """

    steps: Union[int, Array]
    stepsize: Array
    objective: Optional[LocalObjective] = None


class AbstractServerState(eqx.Module):
    """A server state: the model ``x`` (shape (d,)) and whatever else the algorithm keeps.

    Example:
      >>> import jax.numpy as jnp, fedjax_abc as fa
      >>> class MomentumState(fa.algorithms.AbstractServerState):
      ...     x: jnp.ndarray
      ...     m: jnp.ndarray
      >>> MomentumState(jnp.zeros(2), jnp.ones(2)).x
      Array([0., 0.], dtype=float64)
    """

    x: eqx.AbstractVar[Array]


class AbstractAlgorithm(eqx.Module):
    """A federated algorithm: the six functions of the module's docstring.

    Subclass it, implement the abstract methods and declare ``reads_scale`` (whether
    ``server_update`` applies ``RoundInfo.scale``); see :class:`~fedjax_abc.algorithms.FedAvg`
    for the simplest example and the algorithms guide (``docs/guides/algorithms.md``) for a
    user-written one.
    """

    reads_scale: eqx.AbstractVar[bool]
    """True when ``server_update`` applies ``RoundInfo.scale`` (then the algorithm may run
    with an unbiased sampler, e.g. ``Poisson(probs)``); the engine refuses the pair
    otherwise. Every algorithm declares it (``reads_scale: ClassVar[bool] = True``, or a
    property where it depends on the algorithm's fields, as
    :class:`~fedjax_abc.algorithms.FineTuned`'s); a class that does not cannot be
    instantiated. A subclass inherits its parent's value: one that writes its own
    ``server_update`` declares it again."""

    needs_unit_weights: ClassVar[bool] = False
    """True when the server keeps a mean of client states (SCAFFOLD's c, FedDyn's h) that
    only unit weights keep exact; the engine then refuses samplers whose
    ``unit_weights()`` is False (SizeWeighted, unbiased weights)."""

    @abc.abstractmethod
    def init(self, x0: Array) -> AbstractServerState:
        """The server state of one trial at t = 0."""

    @abc.abstractmethod
    def init_client(self, x0: Array) -> Any:
        """One client's state at t = 0 (``()`` for a stateless algorithm)."""

    @abc.abstractmethod
    def client_init(self, server, client) -> Any:
        """The local state (besides the local model y^0 = x_t) a client starts its round with."""

    @abc.abstractmethod
    def local_step(self, server, y: Array, local, gradient: Callable[[Array], Array],
                   stepsize) -> tuple[Array, Any]:
        """One local step: (y^l, local) -> (y^{l+1}, local)."""

    @abc.abstractmethod
    def client_final(self, server, client, y: Array, local,
                     info: LocalInfo) -> tuple[Any, Any]:
        """(message, new client state) after ``info.steps`` local steps ended at y."""

    @abc.abstractmethod
    def server_update(self, server, mean_message, info: RoundInfo) -> AbstractServerState:
        """The next server state from the weighted mean of the participants' messages."""

    def query(self, server, client, full_gradient: Callable[[Array], Array]) -> Any:
        """What a sampled client sends before its local steps; None: no first communication."""
        return None

    def receive(self, server, mean_query) -> AbstractServerState:
        """The server state the local steps start from, given the mean of the queries."""
        return server

    def personal(self, server, client, objective: LocalObjective) -> Array:
        """Client i's own model, shape (d,), from the server state and its client state;
        ``objective`` gives f_i and its exact gradient. By default the server's model x_t:
        an algorithm without personal models evaluates every client at the global one."""
        return server.x

    def check_local_steps(self, local_steps) -> None:
        """Raises ValueError where the run's local work (Q, or a law of local steps) does
        not fit the algorithm's own settings; by default anything fits. The simulator calls
        it when a run is built and at every run (after ``eqx.tree_at``, a sweep's point),
        with concrete values."""


def recheck(module: eqx.Module) -> None:
    """Runs every ``__check_init__`` of ``module``'s classes again (after ``eqx.tree_at``).

    ``eqx.tree_at`` builds a module without ``__init__``, so a value put into a field (a
    sweep's ``"algorithm.mu"``) would skip the checks the constructor runs.
    """
    for cls in type(module).__mro__:
        check = cls.__dict__.get("__check_init__")
        if check is not None:
            check(module)


def recheck_all(obj) -> None:
    """:func:`recheck` of every module in ``obj``: it, its fields, tuples and lists of them,
    outermost first (a component with a value put deep inside it, a run's components)."""
    cls = type(obj)
    if eqx.Module in cls.__mro__:
        recheck(obj)
        children = [object.__getattribute__(obj, f.name) for f in dataclasses.fields(cls)]
    elif cls is tuple or cls is list:
        children = obj
    else:
        return
    for child in children:
        kind = type(child)
        # only a module, a tuple or a list can hold a module: the other values (arrays,
        # numbers, functions, None) are passed over here, without a call each
        if kind is tuple or kind is list or eqx.Module in kind.__mro__:
            recheck_all(child)
