"""Decentralised training without a server: the :class:`Gossip` schedule (D-SGD).

Every node i of a graph keeps its own model x_i; a trial's state is every node's model,
(n, R, d) for R trials. Round t (Koloskova, Loizou, Boreiri, Jaggi and Stich, "A unified
theory of decentralized SGD with changing topology and local updates", ICML 2020,
Algorithm 1, with the order of its two steps either way):

- adapt-then-combine (``order="atc"``, the default): each node takes its Q local steps
  from x_i (the algorithm's ``local_step``, the oracle's noise of stream 1 under k_t, as a
  client of a synchronous round), giving y_i, then x_i <- sum_j W_ij y_j;
- combine-then-adapt (``order="cta"``): x_i <- sum_j W_ij x_j first, then the local steps
  from there.

W is round t's mixing matrix (:class:`~fedjax_abc.decentral.AbstractTopology` with its
weights rule), applied as a sparse product over padded neighbour lists
(:func:`~fedjax_abc.decentral.mix`): a round's mixing costs O(n k_max d), not n^2. With
a sampler, only the round's participants (the sampler's slots of stream 0) take local
steps; every node mixes. Random graphs draw their words from the trial's counter streams:
a round's graph (a matching) from stream 9 under k_t, a trial's graph (Erdos-Renyi) once
from stream 10 under k_0.

With ``tracking=True`` the nodes track the average gradient (gradient tracking, DIGing:
Nedic, Olshevsky and Shi, SIAM J. Optim. 2017, eq. (3); Koloskova et al.'s Algorithm 1
with tracking in the adapt-then-combine form): with g_t the nodes' stochastic gradients at
x_t (each node's oracle noise of stream 1 under k_t, as a client's first local step),

    y_t = W y_{t-1} + g_t - g_{t-1}   (y_{-1} = g_{-1} = 0, so y_0 = g_0),
    x_{t+1} = W (x_t - alpha_t y_t),

which removes the heterogeneity bias of plain D-SGD: with exact gradients every node
reaches x*. It takes one local step a round (Q = 1).

The records read the nodes' average x_bar = (1/n) sum_i x_i (the gap, x_t) and record the
consensus error (1/n) sum_i ||x_i - x_bar||^2 as ``consensus``; every node's own model is
x_i (``record_clients=True``). On the complete graph with uniform weights, adapt-then-
combine is FedAvg with full participation: each node's new model is the mean of the
local models (to rounding: the two sum the same terms in different orders).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from fedjax_abc._decentral._mixing import dense, mix
from fedjax_abc._decentral._topology import AbstractTopology
from fedjax_abc._decentral._weights import AbstractWeights, MetropolisHastings
from fedjax_abc._engine._aggregate import needs_messages
from fedjax_abc._engine._random import (GRAPH_STREAM, SAMPLER_STREAM, TRIAL_GRAPH_STREAM,
                                        client_words, round_keys, stream_words)
from fedjax_abc._engine._round import Parts, client_round, ordered_sum
from fedjax_abc._engine._schedule import (AbstractSchedule, check_local_model,
                                          stateless_sampler)
from fedjax_abc._problems._samplers import FullParticipation

__all__ = ["Gossip", "GossipState", "consensus_error", "node_average", "round_matrix"]

ORDERS = ("atc", "cta")


class GossipState(NamedTuple):
    """Every node's model in R trials: ``nodes`` of shape (n, R, d); with gradient tracking
    the tracker y_{t-1} and the gradients g_{t-1} of the last round, (n, R, d) each (``()``
    without)."""

    nodes: Array
    tracker: Any = ()
    gradients: Any = ()


def node_average(nodes: Array) -> Array:
    """x_bar = (1/n) sum_i x_i of nodes (..., n, R, d): (..., R, d), summed in an order
    fixed by n alone (``ordered_sum``), so that a trial's x_bar does not depend on R."""
    n = nodes.shape[-3]
    return ordered_sum(jnp.moveaxis(nodes, -3, 0)) / n


def consensus_error(nodes: Array) -> Array:
    """(1/n) sum_i ||x_i - x_bar||^2 of nodes (n, R, d): (R,)."""
    n = nodes.shape[0]
    gap = nodes - node_average(nodes)[None]
    per_node = ordered_sum(jnp.moveaxis(gap * gap, -1, 0))  # (n, R), over d in a fixed order
    return ordered_sum(per_node) / n


class Gossip(AbstractSchedule):
    """Decentralised SGD over a graph: every node keeps its model, a round is local steps
    and one gossip step (see the module's docstring).

    Attributes:
      topology: who talks to whom (``fa.decentral.Ring()``, ``Torus(r, c)``,
        ``ErdosRenyi(p)``, ``Exponential()``, ``RandomMatching()``, ...).
      weights: the mixing weights rule (default Metropolis-Hastings).
      order: "atc" (adapt then combine, the default) or "cta" (combine then adapt).
      tracking: gradient tracking (one local step a round, adapt then combine).

    Example:
      >>> import jax, jax.numpy as jnp, fedjax_abc as fa
      >>> p = fa.problems.quadratics(jax.random.key(0), n=8, d=2)
      >>> res = fa.simulate(p, local_steps=2, stepsize=0.1, rounds=20, trials=3,
      ...                   key=jax.random.key(1), x0=jnp.ones(2),
      ...                   schedule=fa.decentral.Gossip(fa.decentral.Ring()))
      >>> res.metrics["consensus"].shape
      (3, 21)
    """

    topology: AbstractTopology
    weights: AbstractWeights
    order: str = eqx.field(static=True)
    tracking: bool = eqx.field(static=True)

    def __init__(self, topology: AbstractTopology, weights: Optional[AbstractWeights] = None,
                 order: str = "atc", tracking: bool = False):
        if not isinstance(topology, AbstractTopology):
            raise ValueError("topology must be a fedjax_abc.decentral topology (Ring(), "
                             f"Torus(rows, cols), ...), got {type(topology).__name__}")
        weights = MetropolisHastings() if weights is None else weights
        if not isinstance(weights, AbstractWeights):
            raise ValueError("weights must be a fedjax_abc.decentral weights rule "
                             f"(MetropolisHastings(), ...), got {type(weights).__name__}")
        if order not in ORDERS:
            raise ValueError(f"order ({order!r}) must be one of {ORDERS}")
        if not isinstance(tracking, bool):
            raise ValueError(f"tracking must be True or False, got {tracking!r}")
        if tracking and order != "atc":
            raise ValueError("gradient tracking is written adapt-then-combine: pass order='atc'")
        self.topology, self.weights, self.order = topology, weights, order
        self.tracking = tracking

    def check(self, *, problem, oracle, sampler, algorithm, transform, local_steps, aggregator,
              byzantine, generator, dtype) -> None:
        n = problem.num_clients
        self.topology.validate(n)
        self.weights.validate(self.topology, n)
        if transform is not None:
            raise ValueError("Gossip sends models between nodes, without message transforms: "
                             "pass transform=None")
        if needs_messages(aggregator, byzantine):
            raise ValueError("Gossip has no server: an aggregator or Byzantine clients do not "
                             "apply (leave them out)")
        if not stateless_sampler(sampler, n):
            raise ValueError(f"Gossip picks a round's active nodes with a stateless sampler, "
                             f"not {type(sampler).__name__}")
        if self.tracking and not (isinstance(local_steps, int) and local_steps == 1):
            raise ValueError(f"gradient tracking takes one local step a round, got "
                             f"local_steps={local_steps!r}")
        if self.tracking and sampler != FullParticipation():
            raise ValueError("gradient tracking steps every node each round: leave num_sampled "
                             f"and sampler out, not {type(sampler).__name__}")
        # each node's local work is a stateless client's, whose message is its local model
        check_local_model(algorithm, problem, oracle, local_steps, generator,
                          jax.ShapeDtypeStruct((problem.dim,), dtype), "Gossip")

    def init(self, parts, program, x0, trial_keys, stepsize):
        n = parts.problem.num_clients
        nodes = jnp.broadcast_to(x0[None], (n,) + x0.shape)
        if not self.tracking:
            return GossipState(nodes)
        return GossipState(nodes, jnp.zeros_like(nodes), jnp.zeros_like(nodes))

    def round_matrix(self, n: int, key, trial: int, t: int = 0,
                     generator: str = "threefry") -> np.ndarray:
        """The dense mixing matrix W (n, n) of round t of trial ``trial`` of a run with
        ``key``, as this schedule draws it (a trial's Erdos-Renyi graph, a round's
        matching), for theory and checks beside a run.

        Example:
          >>> import jax, fedjax_abc as fa
          >>> g = fa.decentral.Gossip(fa.decentral.ErdosRenyi(0.5))
          >>> W = g.round_matrix(6, jax.random.key(1), trial=0)
          >>> W.shape, bool(abs(W.sum(0) - 1).max() < 1e-12)
          ((6, 6), True)
        """
        keys = jnp.asarray(jax.random.key_data(jax.random.fold_in(key, trial)))[:, None]
        k = round_keys(keys, t, generator)
        graphs = self._trial_graphs(n, keys, generator)
        neighbours, per_trial = self._neighbours(n, jnp.asarray(t, jnp.int32), k, graphs,
                                                 generator)
        if per_trial:
            neighbours = jax.tree_util.tree_map(lambda a: a[0], neighbours)
        return np.asarray(dense(neighbours))

    def _trial_graphs(self, n: int, trial_keys: Array, generator: str):
        """Every trial's graph drawn once (its words of stream 10 under k_0), leaves with a
        leading trials axis; None for a topology that draws none."""
        count = self.topology.num_trial_words(n)
        if not count:
            return None
        words = stream_words(round_keys(trial_keys, 0, generator), TRIAL_GRAPH_STREAM, count,
                             generator)  # (count, R)
        return jax.vmap(lambda w: self.topology.init_state(n, w), in_axes=1)(words)

    def _neighbours(self, n: int, t, k: Array, graphs, generator: str):
        """Round t's mixing matrix: one :class:`Neighbours` for every trial, or (per_trial
        True) one per trial, leaves with a leading trials axis."""
        count = self.topology.num_words(n)
        if not count and graphs is None:
            return self.topology.neighbours(n, self.weights, t), False
        words = stream_words(k, GRAPH_STREAM, count, generator) if count else None  # (W, R)
        return jax.vmap(lambda w, g: self.topology.neighbours(n, self.weights, t, w, g),
                        in_axes=(None if words is None else 1, None if graphs is None else 0))(
            words, graphs), True

    def advance(self, parts, program, state, trial_keys, t0, stepsizes):
        problem, generator = parts.problem, program.generator
        n = problem.num_clients
        R = trial_keys.shape[1]
        local_parts = Parts(problem, parts.oracle, None, parts.algorithm, None, parts.local_steps)
        ids = jnp.arange(n, dtype=jnp.int32)
        graphs = self._trial_graphs(n, trial_keys, generator)

        def mixed(neighbours, per_trial, X):
            if per_trial:
                return jax.vmap(mix, in_axes=(0, 1), out_axes=1)(neighbours, X)
            return mix(neighbours, X)

        def local(X, k, alpha):
            def node(i, x_i):  # node i of every trial: x_i (R, d), k (2, R)
                def one(x, kr):
                    server = parts.algorithm.init(x)
                    return client_round(local_parts, generator, i, server, (), (), kr, alpha)[0]

                return jax.vmap(one, in_axes=(0, 1))(x_i, k)

            Y = jax.vmap(node)(ids, X)
            if parts.sampler == FullParticipation():  # every node steps: no mask to draw
                return Y
            words = stream_words(k, SAMPLER_STREAM, parts.sampler.num_words(n), generator)
            idx, w = parts.sampler.from_words_batched(words, n)  # (m, R) each
            active = jnp.zeros((n, R), jnp.int32).at[idx, jnp.arange(R)[None, :]].max(
                (w > 0).astype(jnp.int32))
            return jnp.where(active[..., None] > 0, Y, X)

        def gradients(X, k):  # every node's stochastic gradient at its x_i, (n, R, d)
            oracle, d = parts.oracle, X.shape[-1]
            shape = (1, d)

            def one(i, x, kr):
                words = client_words(kr, i[None], oracle.num_words(shape), generator)[0]
                noise = oracle.noise_from_words(words, shape, x.dtype)
                z = oracle.step_noise(noise, jnp.zeros((), jnp.int32), shape, x.dtype)
                return oracle.gradient(problem, problem.client(i), x, z)

            return jax.vmap(lambda i, x_i: jax.vmap(one, in_axes=(None, 0, 1))(i, x_i, k))(
                ids, X)

        def round_(carry, inputs):
            X, tracker, last = carry
            t, alpha = inputs
            k = round_keys(trial_keys, t, generator)
            neighbours, per_trial = self._neighbours(n, t, k, graphs, generator)
            if self.tracking:
                g = gradients(X, k)
                tracker = mixed(neighbours, per_trial, tracker) + (g - last)
                return (mixed(neighbours, per_trial, X - alpha * tracker), tracker, g), None
            if self.order == "cta":
                return (local(mixed(neighbours, per_trial, X), k, alpha), tracker, last), None
            return (mixed(neighbours, per_trial, local(X, k, alpha)), tracker, last), None

        ts = t0 + jnp.arange(stepsizes.shape[0], dtype=jnp.int32)
        (nodes, tracker, last), _ = jax.lax.scan(
            round_, (state.nodes, state.tracker, state.gradients), (ts, stepsizes))
        return GossipState(nodes, tracker, last)

    def model(self, state):
        return node_average(state.nodes)

    def record_names(self):
        return ("consensus",)

    def records(self, parts, program, state):
        return (consensus_error(state.nodes),)

    def clients(self, parts, program, state):
        problem = parts.problem
        models = jnp.moveaxis(state.nodes, 0, 1)  # (R, n, d)
        ids = jnp.arange(problem.num_clients, dtype=jnp.int32)

        def loss(x_r):
            return jax.vmap(lambda i, x: problem.local_value(problem.client(i), x))(ids, x_r)

        return models, jax.vmap(loss)(models)
