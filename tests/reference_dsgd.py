"""Decentralised SGD written out in NumPy: dense mixing matrices, a loop over trials,
rounds, nodes and local steps (Koloskova et al., ICML 2020, Algorithm 1).

The randomness is the simulator's counter streams, drawn through the public
``fa.client_noise`` (each node's oracle noise of a round) and the round's mixing matrix as
its topology writes it densely (``topology.matrix``, itself checked against NumPy in
``tests/test_decentral_topology.py``); every product and sum is NumPy's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import fedjax_abc as fa
from fedjax_abc._engine._random import (GRAPH_STREAM, TRIAL_GRAPH_STREAM, round_keys,
                                        stream_words)


def _gradient(a, c, x, noise, C, D, d):
    """A diagonal quadratic's oracle: grad f_i(x) + noise sqrt((C f_i(x) + D) / d)."""
    f = 0.5 * np.sum(a * (x - c) ** 2)
    return a * (x - c) + noise * np.sqrt((C * max(f, 0.0) + D) / d)


def dsgd(problem, topology, weights, *, rounds, local_steps, stepsize, x0, trials, key,
         order="atc"):
    """Every trial's node models after each round: (trials, rounds + 1, n, d)."""
    a, c = (np.asarray(v) for v in problem.params)
    oracle = problem.oracle
    C, D = float(oracle.C), float(oracle.D)
    n, d = a.shape
    Q = local_steps
    out = np.zeros((trials, rounds + 1, n, d))
    for r in range(trials):
        trial = np.asarray(jax.random.key_data(jax.random.fold_in(key, r)))
        state = None
        if topology.num_trial_words(n):
            k0 = round_keys(jnp.asarray(trial), 0)
            state = topology.init_state(n, stream_words(k0, TRIAL_GRAPH_STREAM,
                                                        topology.num_trial_words(n)))
        X = np.tile(np.asarray(x0, float), (n, 1))
        out[r, 0] = X
        for t in range(rounds):
            k = round_keys(jnp.asarray(trial), t)
            words = (stream_words(k, GRAPH_STREAM, topology.num_words(n))
                     if topology.num_words(n) else None)
            W = np.asarray(topology.matrix(n, weights, t, words, state))
            if order == "cta":
                X = W @ X
            Y = np.empty_like(X)
            for i in range(n):
                noise = np.asarray(fa.client_noise(oracle, k, i, (Q, d), jnp.float64))
                y = X[i].copy()
                for step in range(Q):
                    y = y - stepsize * _gradient(a[i], c[i], y, noise[step], C, D, d)
                Y[i] = y
            X = W @ Y if order == "atc" else Y
            out[r, t + 1] = X
    return out


def tracked(problem, topology, weights, *, rounds, stepsize, x0, trials, key):
    """D-SGD with gradient tracking (DIGing), adapt then combine: y_t = W y_{t-1} + g_t -
    g_{t-1}, x_{t+1} = W (x_t - alpha y_t), every node's g_t its oracle's gradient at x_t
    with the noise of a client's first local step. (trials, rounds + 1, n, d)."""
    a, c = (np.asarray(v) for v in problem.params)
    oracle = problem.oracle
    C, D = float(oracle.C), float(oracle.D)
    n, d = a.shape
    out = np.zeros((trials, rounds + 1, n, d))
    for r in range(trials):
        trial = np.asarray(jax.random.key_data(jax.random.fold_in(key, r)))
        X = np.tile(np.asarray(x0, float), (n, 1))
        y, last = np.zeros((n, d)), np.zeros((n, d))
        out[r, 0] = X
        for t in range(rounds):
            k = round_keys(jnp.asarray(trial), t)
            W = np.asarray(topology.matrix(n, weights, t))
            g = np.stack([_gradient(a[i], c[i], X[i],
                                    np.asarray(fa.client_noise(oracle, k, i, (1, d),
                                                               jnp.float64))[0], C, D, d)
                          for i in range(n)])
            y = W @ y + g - last
            last = g
            X = W @ (X - stepsize * y)
            out[r, t + 1] = X
    return out
