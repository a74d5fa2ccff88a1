"""Hierarchical federated training: clients under edge servers, edge servers under a cloud.

The n clients are split into G groups of equal size m = n / G, each under an edge server.
A step of the :class:`Hierarchical` schedule is an edge round: every edge server runs one
synchronous round of the algorithm (Algorithm 1 by default) with its own clients, its
sampler drawing among its m clients (``num_sampled=S``: S of each group), exactly as
:class:`~fedjax_abc.Rounds` runs a round over all n. After every E edge rounds the cloud
averages the edge models, x = (1/G) sum_g x_g (the groups have equal sizes, so this is
the clients' weighted average), and every edge server starts again from x (HierFAVG: Liu,
Zhang, Song and Letaief, "Client-edge-cloud hierarchical federated learning", ICC 2020,
Algorithm 1, with kappa_1 = Q local steps and kappa_2 = E edge rounds).

Edge round t of group g draws from round key k_{tG + g} of the trial (the counter streams of
the synchronous engine with the round index tG + g): one edge server holding every client
(G = 1) makes round t's draws of a synchronous run, and with E = 1 it is FedAvg itself.
The records read the average of the edge models, (1/G) sum_g x_g, which is the cloud's
model after a cloud round, and record the edges' spread (1/G) sum_g ||x_g - x_bar||^2 as
``edge_spread``.
"""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Int

from fedjax_abc._engine import _round
from fedjax_abc._engine._aggregate import needs_messages
from fedjax_abc._engine._metrics import client_records
from fedjax_abc._engine._random import round_keys
from fedjax_abc._engine._round import ordered_sum
from fedjax_abc._engine._schedule import AbstractSchedule, stateless_sampler

__all__ = ["Hierarchical", "HierarchicalState"]


class HierarchicalState(NamedTuple):
    """The G edge servers' synchronous states: a ``RoundState`` whose every leaf has a
    leading axis of G (its clients' states: (G, m, R, ...))."""

    edges: _round.RoundState


def _group_problem(problem, members: Array):
    """The problem of one group's clients (``members``, (m,) global indices), in their
    order: the clients' rows of the parameters and of f_i*."""
    sub = eqx.tree_at(lambda p: p.params, problem,
                      jax.tree_util.tree_map(lambda a: jnp.take(a, members, axis=0),
                                             problem.params))
    minima = problem.minima
    if not minima.deferred and jnp.ndim(minima.local_minima) == 1:
        sub = eqx.tree_at(lambda p: p.minima.local_minima, sub,
                          jnp.take(minima.local_minima, members))
    return sub


def _edge_average(x: Array) -> Array:
    """(1/G) sum_g x_g of edge models (G, ..., R, d), summed in an order fixed by G."""
    return ordered_sum(x) / x.shape[0]


class Hierarchical(AbstractSchedule):
    """Clients under G edge servers, E edge rounds per cloud round (see the module).

    Attributes:
      groups: (G, m) int32, the clients of each edge server (every client once).
      edge_rounds: E >= 1, the edge rounds between two cloud averages (static).

    Build it with :meth:`Hierarchical.contiguous` (clients 0..m-1 under the first edge
    server, and so on) or from each client's edge server (``Hierarchical(assignment, E)``
    with ``assignment`` of shape (n,), every server holding as many clients).

    Example:
      >>> import jax, jax.numpy as jnp, fedjax_abc as fa
      >>> p = fa.problems.quadratics(jax.random.key(0), n=8, d=2)
      >>> res = fa.simulate(p, num_sampled=2, local_steps=2, stepsize=0.1, rounds=12,
      ...                   trials=3, key=jax.random.key(1), x0=jnp.ones(2),
      ...                   schedule=fa.decentral.Hierarchical.contiguous(8, 2, edge_rounds=3))
      >>> res.metrics["edge_spread"].shape
      (3, 13)
    """

    groups: Int[Array, "G m"]
    edge_rounds: int = eqx.field(static=True)

    def __init__(self, assignment, edge_rounds: int = 1):
        a = np.asarray(assignment)
        if a.ndim != 1 or a.size == 0 or a.dtype.kind not in "iu":
            raise ValueError("assignment must give each client's edge server as integers, "
                             f"shape (n,), got {a.dtype} of shape {a.shape}")
        servers, counts = np.unique(a, return_counts=True)
        if servers[0] < 0 or not np.array_equal(servers, np.arange(servers.size)):
            raise ValueError(f"edge servers must be numbered 0..G-1 with a client each, got "
                             f"{servers.tolist()}"[:200])
        if np.any(counts != counts[0]):
            raise ValueError(f"every edge server must hold as many clients, got "
                             f"{counts.tolist()}"[:200])
        if isinstance(edge_rounds, bool) or not isinstance(edge_rounds, (int, np.integer)) \
                or edge_rounds < 1:
            raise ValueError(f"edge_rounds (E) must be an integer >= 1, got {edge_rounds!r}")
        self.groups = jnp.asarray(np.argsort(a, kind="stable").reshape(servers.size, -1),
                                  jnp.int32)
        self.edge_rounds = int(edge_rounds)

    @classmethod
    def contiguous(cls, num_clients: int, num_edges: int, edge_rounds: int = 1) -> "Hierarchical":
        """G = ``num_edges`` edge servers of n / G consecutive clients each."""
        if isinstance(num_edges, bool) or not isinstance(num_edges, (int, np.integer)) \
                or num_edges < 1:
            raise ValueError(f"num_edges (G) must be an integer >= 1, got {num_edges!r}")
        if num_edges > num_clients:
            raise ValueError(f"more edge servers (G={num_edges}) than clients (n={num_clients})")
        if num_clients % num_edges:
            raise ValueError(f"n={num_clients} clients do not split into G={num_edges} equal "
                             "groups")
        return cls(np.repeat(np.arange(num_edges), num_clients // num_edges), edge_rounds)

    def check(self, *, problem, oracle, sampler, algorithm, transform, local_steps, aggregator,
              byzantine, generator, dtype) -> None:
        G, m = self.groups.shape
        n = problem.num_clients
        if G * m != n:
            raise ValueError(f"the edge servers hold {G * m} clients, the problem has n={n}")
        sampler.validate(m)
        if transform is not None:
            raise ValueError("Hierarchical runs without message transforms: pass transform=None")
        if needs_messages(aggregator, byzantine):
            raise ValueError("Hierarchical averages at every level: an aggregator or Byzantine "
                             "clients do not apply (leave them out)")
        if not stateless_sampler(sampler, m):
            raise ValueError(f"Hierarchical draws each edge round with a stateless sampler, "
                             f"not {type(sampler).__name__}")

    def init(self, parts, program, x0, trial_keys, stepsize):
        G, m = self.groups.shape
        one = _round.init_state(parts.algorithm, x0, m, parts.sampler, None)
        return HierarchicalState(jax.tree_util.tree_map(
            lambda a: jnp.broadcast_to(a, (G,) + a.shape), one))

    def advance(self, parts, program, state, trial_keys, t0, stepsizes):
        G, m = self.groups.shape
        E = self.edge_rounds
        edge_program = program._replace(capacity=None)

        def edge(members, edge_state, k, alpha):
            edge_parts = parts._replace(problem=_group_problem(parts.problem, members))
            return _round.batched_round(edge_parts, edge_program, edge_state, k, alpha)

        def round_(edges, inputs):
            t, alpha = inputs
            keys = jax.vmap(lambda g: round_keys(trial_keys, t * G + g, program.generator))(
                jnp.arange(G, dtype=jnp.int32))  # (G, 2, R)
            edges = jax.vmap(edge, in_axes=(0, 0, 0, None))(self.groups, edges, keys, alpha)
            x = edges.server.x  # (G, R, d)
            cloud = (t + 1) % E == 0
            x = jnp.where(cloud, jnp.broadcast_to(_edge_average(x), x.shape), x)
            return edges._replace(server=eqx.tree_at(lambda s: s.x, edges.server, x)), None

        ts = t0 + jnp.arange(stepsizes.shape[0], dtype=jnp.int32)
        edges, _ = jax.lax.scan(round_, state.edges, (ts, stepsizes))
        return HierarchicalState(edges)

    def model(self, state):
        return _edge_average(jnp.moveaxis(state.edges.server.x, -3, 0))

    def record_names(self):
        return ("edge_spread",)

    def records(self, parts, program, state):
        x = state.edges.server.x  # (G, R, d)
        gap = x - _edge_average(x)[None]
        per_edge = ordered_sum(jnp.moveaxis(gap * gap, -1, 0))  # (G, R)
        return (ordered_sum(per_edge) / x.shape[0],)

    def clients(self, parts, program, state):
        G, m = self.groups.shape

        def edge(members, edge_state):
            problem = _group_problem(parts.problem, members)
            return client_records(problem, parts.algorithm, edge_state.server,
                                  edge_state.clients, program.groups)

        models, losses = jax.vmap(edge)(self.groups, state.edges)  # (G, R, m, ...)
        order = jnp.argsort(self.groups.reshape(-1))  # global client j sits at order[j]

        def regroup(a):  # (G, R, m, ...) -> (R, n, ...) in the clients' own order
            a = jnp.moveaxis(a, 0, 1)
            a = a.reshape(a.shape[:1] + (G * m,) + a.shape[3:])
            return jnp.take(a, order, axis=1)

        return regroup(models), regroup(losses)
