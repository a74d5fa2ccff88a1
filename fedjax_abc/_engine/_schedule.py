"""How the server and the clients take turns: the schedule, a component of every run.

The driver (``_chunk``) runs any schedule the same way, chunk by chunk and segment by
segment, with checkpoints, progress, devices and sweeps: it asks the schedule for the
trials' state at t = 0 (:meth:`AbstractSchedule.init`), to advance it by a block of steps
(:meth:`~AbstractSchedule.advance`), for the model the records read
(:meth:`~AbstractSchedule.model`), for its own records beside the gap
(:meth:`~AbstractSchedule.records`, named by :meth:`~AbstractSchedule.record_names`) and
for every client's own model (:meth:`~AbstractSchedule.clients`). As diffrax's loop runs
any solver, the schedule holds what differs: :class:`Rounds`, the synchronous rounds of
Algorithm 1 (the default), or a gossip schedule whose state is every node's model.

A schedule's methods are traced inside the compiled program; ``parts`` and ``program`` are
the run's components and static settings (``_round.Parts``, ``_round.Program``).
"""

from __future__ import annotations

import abc
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from fedjax_abc._algorithms._base import RoundInfo
from fedjax_abc._engine import _round
from fedjax_abc._engine._metrics import client_records
from fedjax_abc._engine._names import describe
from fedjax_abc._engine._round import Parts, client_round
from fedjax_abc._problems._problem import cast_floating, with_placeholder_minima

__all__ = ["AbstractSchedule", "Rounds", "check_local_model", "stateless_sampler"]


class AbstractSchedule(eqx.Module):
    """How a run's steps go: the state its trials carry and how one block of steps
    changes it. Subclass it and implement the abstract methods (see :class:`Rounds`)."""

    @abc.abstractmethod
    def init(self, parts, program, x0: Array, trial_keys: Array, stepsize) -> Any:
        """The state at t = 0 of trials started at x0 (R, d), the trials' key data (2, R)
        and the first stepsize of :meth:`stepsizes` (for work done at t = 0; None where the
        schedule keeps the default :meth:`stepsizes`, whose start does no work)."""

    @abc.abstractmethod
    def advance(self, parts, program, state, trial_keys: Array, t0, stepsizes: Array) -> Any:
        """Steps t0, ..., t0 + K - 1 of every trial, stepsizes (K,), the trials' key data
        (2, R): the state after them."""

    @abc.abstractmethod
    def model(self, state) -> Array:
        """The model the records read (the gap, x_t, the final iterate), (R, d)."""

    @abc.abstractmethod
    def record_names(self) -> tuple[str, ...]:
        """The names of the schedule's own records (each a number per trial and record),
        beside the transform's statistics and the sampler's records."""

    @abc.abstractmethod
    def records(self, parts, program, state) -> tuple:
        """The transform's statistics, the sampler's records and the schedule's own (its
        :meth:`record_names`), in that order, each of shape (R,)."""

    @abc.abstractmethod
    def clients(self, parts, program, state) -> tuple[Array, Array]:
        """Every client's own model (R, n, d) and its loss f_i there (R, n)."""

    def stepsizes(self, alphas: np.ndarray) -> tuple[float, np.ndarray]:
        """(the stepsize :meth:`init` is given, the stepsizes of steps 0, ..., T - 1) from
        the run's T stepsizes: by default (alpha_0, the stepsizes as given)."""
        return alphas[0], alphas

    def check(self, *, problem, oracle, sampler, algorithm, transform, local_steps, aggregator,
              byzantine, generator, dtype) -> None:
        """Raises ValueError (one line) where the run's other components do not fit the
        schedule (given as ``build`` has them, before they are cast; ``dtype`` the run's
        JAX dtype); by default everything fits."""


class Rounds(AbstractSchedule):
    """Synchronous rounds (Algorithm 1): each round the sampler picks the participants,
    each runs its local steps from the server's model x_t, and the server aggregates their
    messages (:func:`~fedjax_abc._engine._round.batched_round`). The default schedule."""

    def init(self, parts, program, x0, trial_keys, stepsize):
        return _round.init_state(parts.algorithm, x0, parts.problem.num_clients, parts.sampler,
                                 parts.transform)

    def advance(self, parts, program, state, trial_keys, t0, stepsizes):
        return _round.run_rounds(parts, program, state, trial_keys, t0, stepsizes)

    def model(self, state):
        return state.server.x

    def record_names(self):
        return ()

    def records(self, parts, program, state):
        totals = tuple(state.totals[name] for name in sorted(state.totals)) if state.totals else ()
        if not parts.sampler.record_names():
            return totals
        return totals + tuple(jax.vmap(parts.sampler.records)(state.sampler))

    def clients(self, parts, program, state):
        return client_records(parts.problem, parts.algorithm, state.server, state.clients,
                              program.groups)


def stateless_sampler(sampler, n: int) -> bool:
    """Whether ``sampler`` carries nothing from round to round for n clients (no state, no
    records): what a schedule that draws its rounds' participants itself needs."""
    state = jax.eval_shape(lambda: sampler.init_state(n))
    return not jax.tree_util.tree_leaves(state) and not sampler.record_names()


def check_local_model(algorithm, problem, oracle, Q, generator: str, x, who: str) -> None:
    """ValueError (one line) for an algorithm whose clients keep state or answer a query,
    whose message is not a model like x, or whose server step is not "take the mean
    model" (a server stepsize, momentum, an adaptive step): where a client's message is
    used as a model (an asynchronous rule's server step, a gossip step), the algorithm's
    own server step would be ignored silently. Q: local steps or a law of them; ``who``:
    the schedule, named in the message."""
    name = type(algorithm).__name__
    # the components as the run has them: in its dtype (float32 included)
    problem, oracle, algorithm = (with_placeholder_minima(problem).astype(x.dtype),
                                  cast_floating(oracle, x.dtype), cast_floating(algorithm, x.dtype))
    client = jax.eval_shape(algorithm.init_client, x)
    if jax.tree_util.tree_leaves(client):
        raise ValueError(f"{name} keeps client states, which {who}'s clients do not carry: "
                         "use an algorithm whose clients are stateless (FedAvg, FedProx)")
    server = jax.eval_shape(algorithm.init, x)
    if jax.eval_shape(lambda s: algorithm.query(s, (), lambda y: y), server) is not None:
        raise ValueError(f"{name} asks its clients a query before the local steps; a client "
                         f"of {who} starts from the model alone")
    message = jax.eval_shape(lambda s: client_round(
        Parts(problem, oracle, None, algorithm, None, Q), generator, jnp.zeros((), jnp.int32),
        s, (), (), jnp.zeros((2,), jnp.uint32), jnp.ones((), x.dtype))[0], server)
    if not (isinstance(message, jax.ShapeDtypeStruct) and message.shape == x.shape):
        raise ValueError(f"{name}'s clients send {jax.tree_util.tree_structure(message)}, not "
                         f"a local model: {who} takes the clients' models (FedAvg, FedProx)")
    info = RoundInfo(jnp.ones((), x.dtype), problem.num_clients, jnp.ones((), x.dtype), Q, None)
    state = algorithm.init(jnp.linspace(1.0, 2.0, x.shape[0], dtype=x.dtype))
    for mean in (jnp.linspace(-1.0, 3.0, x.shape[0], dtype=x.dtype),  # two steps: momentum
                 jnp.linspace(2.0, -2.0, x.shape[0], dtype=x.dtype)):  # shows in the second
        state = algorithm.server_update(state, mean, info)
        if not np.allclose(state.x, mean):
            raise ValueError(f"{describe(algorithm)} has a server step of its own (a server "
                             f"stepsize, momentum, an adaptive step), which {who}'s own step "
                             "would replace: use FedAvg() or FedProx")
