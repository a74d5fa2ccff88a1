"""Decentralised (gossip) averaging: topologies, mixing weights, one sparse mixing step.

In decentralised training every node keeps its own model, and a round of gossip replaces
the models X (n x d, a row a node) by W_t X with a doubly stochastic mixing matrix W_t
whose nonzeros follow the round's communication graph. Here a round's W_t is padded
neighbour lists (:class:`Neighbours`), and :func:`mix` computes W_t X at the cost of the
edges, O(n k_max d)::

    import jax, jax.numpy as jnp
    from fedjax_abc import decentral

    nb = decentral.Torus(4, 4).neighbours(16, decentral.MetropolisHastings())
    X = jax.random.normal(jax.random.key(0), (16, 3))
    X1 = decentral.mix(nb, X)                        # = W @ X, W = Torus(4, 4).matrix(16)

Everything is a pure function of arrays with its random numbers as uint32 words (never a
key inside): jittable and vmappable over trials.

- topologies (:class:`AbstractTopology`): :class:`Ring`, :class:`Torus`, :class:`Complete`,
  :class:`Star`, :class:`ErdosRenyi` (drawn once a trial, ``num_trial_words(n)`` =
  n (n - 1) / 2), :class:`Exponential` (the one-peer exponential graph, time-varying),
  :class:`RandomMatching` (a uniform matching a round, ``num_words(n)`` = n);
- weights (:class:`AbstractWeights`): :class:`MetropolisHastings`, :class:`UniformWeights`
  (the max-degree rule), :class:`Matrix` (a given W);
- the round's structure and weights: :class:`Graph`, :class:`Neighbours`; :func:`mix`,
  :func:`dense`, :func:`is_connected`.

:class:`Gossip` is the schedule that trains with them: ``fa.simulate(problem, ...,
schedule=decentral.Gossip(decentral.Ring()))`` runs decentralised SGD, every node's model
in the state, through the same driver as synchronous rounds (checkpoints, chunks,
devices, sweeps). :class:`Hierarchical` puts the clients under edge servers that a cloud
averages every E edge rounds.

The theory (second eigenvalue, spectral gap, consensus error and bound, the random
matching's contraction, the D-SGD bound of Koloskova et al., ICML 2020) is in
:mod:`fedjax_abc.theory`.
"""

from fedjax_abc._decentral._mixing import Graph, Neighbours, dense, is_connected, mix
from fedjax_abc._engine._gossip import Gossip
from fedjax_abc._engine._hierarchical import Hierarchical
from fedjax_abc._decentral._topology import (AbstractTopology, Complete, ErdosRenyi,
                                             Exponential, RandomMatching, Ring, Star, Torus)
from fedjax_abc._decentral._weights import (AbstractWeights, Matrix, MetropolisHastings,
                                            UniformWeights)

__all__ = [
    "AbstractTopology",
    "AbstractWeights",
    "Complete",
    "ErdosRenyi",
    "Exponential",
    "Gossip",
    "Graph",
    "Hierarchical",
    "Matrix",
    "MetropolisHastings",
    "Neighbours",
    "RandomMatching",
    "Ring",
    "Star",
    "Torus",
    "UniformWeights",
    "dense",
    "is_connected",
    "mix",
]
