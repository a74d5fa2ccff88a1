"""One round of Algorithm 1 for a batch of trials, and a scan over rounds.

- :func:`fedavg_round`: one round of one trial. In ``mask`` mode every client runs its
  virtual local trajectory x~_{i,t} (Section II-A), a ``vmap`` over all n; in ``gather``
  mode only the sampled ones run. The server averages the sampled local models (line 13).
- :func:`batched_round`: the same round for a batch of trials, the trials being the
  innermost ``vmap`` (see its docstring for why).
- :func:`run_rounds`: rounds t0, ..., t0 + K - 1 of a batch of trials, a ``lax.scan``.

The randomness comes from :mod:`fedjax_abc._engine._random`: ``mask`` and ``gather`` make
the same draws, so their results agree bit for bit on the paper's problems (where XLA
orders a few floating-point operations differently in the two programs, to rounding).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array

from fedjax_abc._algorithms._fedavg import local_run
from fedjax_abc._engine._random import client_words, round_key_data, stream_words
from fedjax_abc._engine._threefry import fold_in_data

__all__ = ["batched_round", "fedavg_round", "run_rounds"]

MODES = ("mask", "gather")


def fedavg_round(problem, oracle, sampler, x: Array, t, stepsize, trial_key: Array,
                 local_steps: int, mode: str = "mask") -> Array:
    """One round of Algorithm 1 for one trial: x_t -> x_{t+1}.

    Args:
      problem, oracle, sampler: the problem, its oracle and the client sampler.
      x: x_t, shape (d,).
      t: round index (may be traced).
      stepsize: alpha_t.
      trial_key: the trial's key.
      local_steps: Q (static).
      mode: "mask" (all n virtual trajectories) or "gather" (only the sampled clients).

    Returns:
      x_{t+1} = sum_j w_j x^Q_{idx_j,t} / sum_j w_j over the sampler's slots; x_t if the
      round has no participant.
    """
    k_t = round_key_data(trial_key, t)
    return batched_round(problem, oracle, sampler, x[None], k_t[:, None], stepsize, local_steps,
                         mode)[0]


def batched_round(problem, oracle, sampler, x: Array, key_data: Array, stepsize,
                  local_steps: int, mode: str) -> Array:
    """:func:`fedavg_round` of a batch of R trials: x (R, d) and their k_t (2, R) -> (R, d).

    The trials are the innermost ``vmap`` and the last axis of every per-trial array: a
    client's (or slot's) local models of all trials lie side by side in memory, shape (n or
    m, R, d), its random words too, shape (n or m, R, W), so the hashing and the local steps
    of ``gather`` mode run over long contiguous rows even when m is small.
    """
    if mode not in MODES:
        raise ValueError(f"mode ({mode!r}) must be one of {MODES}")
    n = problem.num_clients
    num_sampler_words = sampler.num_words(n)
    idx, w = jax.vmap(lambda k: sampler.from_words(stream_words(k, 0, num_sampler_words), n),
                      in_axes=1, out_axes=1)(key_data)  # (m, R) each
    shape = (local_steps,) + x.shape[1:]
    W = oracle.num_words(shape)

    def local(i, x_r, k):  # client i of one trial with round key data k
        noise = oracle.noise_from_words(client_words(k, i[None], W)[0], shape, x.dtype)
        return local_run(problem, oracle, i, x_r, stepsize, noise, local_steps)

    R = x.shape[0]
    if mode == "mask":  # every client, for every trial (the same client data for all trials)
        local_models = jax.vmap(jax.vmap(local, in_axes=(None, 0, 1)), in_axes=(0, None, None))(
            jnp.arange(n, dtype=jnp.int32), x, key_data)  # (n, R, d)
        local_models = local_models[idx, jnp.arange(R)[None, :]]  # the sampled: (m, R, d)
    else:  # the sampled clients only, slot by slot
        local_models = jax.vmap(jax.vmap(local, in_axes=(0, 0, 1)), in_axes=(0, None, None))(
            idx, x, key_data)  # (m, R, d)
    w = w.astype(x.dtype)  # (m, R)
    total = _slot_sum(w)
    mean = _slot_sum(w[:, :, None] * local_models) / jnp.where(total > 0, total, 1)[:, None]
    return jnp.where(total[:, None] > 0, mean, x)


def _slot_sum(a: Array) -> Array:
    """Sum over the leading (slot) axis in an order fixed by the number of slots alone.

    Up to 64 slots they are added one by one in slot order, beyond that pairwise. A
    reduction left to XLA may be ordered differently in ``mask`` and ``gather`` programs,
    which would break their bit-for-bit agreement.
    """
    if a.shape[0] <= 64:
        total = a[0]
        for j in range(1, a.shape[0]):
            total = total + a[j]
        return total
    while a.shape[0] > 1:
        half = a.shape[0] // 2
        a = jnp.concatenate([a[:half] + a[half: 2 * half], a[2 * half:]])
    return a[0]


def run_rounds(problem, oracle, sampler, x: Array, trial_key_data: Array, t0, stepsizes: Array,
               local_steps: int, mode: str) -> Array:
    """Rounds t0, ..., t0 + K - 1 of R trials with stepsizes alpha_{t0..t0+K-1}, shape (K,).

    x: (R, d); trial_key_data: (2, R), the key data of each trial's key (a column each).
    """
    def keys(t):
        return fold_in_data(trial_key_data, t)

    # k_{t+1} travels in the loop state: read from memory, it is hashed once per round,
    # where computed in place XLA would hash it again inside every fusion that uses it.
    def body(carry, inputs):
        x_t, k_t = carry
        t, alpha = inputs
        x_next = batched_round(problem, oracle, sampler, x_t, k_t, alpha, local_steps, mode)
        return (x_next, keys(t + 1)), None

    ts = t0 + jnp.arange(stepsizes.shape[0], dtype=jnp.int32)
    (x, _), _ = jax.lax.scan(body, (x, keys(t0)), (ts, stepsizes))
    return x
