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
from jaxtyping import Array

from fedjax_abc._engine import _round
from fedjax_abc._engine._metrics import client_records

__all__ = ["AbstractSchedule", "Rounds"]


class AbstractSchedule(eqx.Module):
    """How a run's steps go: the state its trials carry and how one block of steps
    changes it. Subclass it and implement the abstract methods (see :class:`Rounds`)."""

    @abc.abstractmethod
    def init(self, parts, program, x0: Array) -> Any:
        """The state at t = 0 of trials started at x0 (R, d)."""

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

    def check(self, *, problem, oracle, sampler, algorithm, transform, local_steps, aggregator,
              byzantine, generator, dtype) -> None:
        """Raises ValueError (one line) where the run's other components do not fit the
        schedule (given as ``build`` has them, before they are cast; ``dtype`` the run's
        JAX dtype); by default everything fits."""


class Rounds(AbstractSchedule):
    """Synchronous rounds (Algorithm 1): each round the sampler picks the participants,
    each runs its local steps from the server's model x_t, and the server aggregates their
    messages (:func:`~fedjax_abc._engine._round.batched_round`). The default schedule."""

    def init(self, parts, program, x0):
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
