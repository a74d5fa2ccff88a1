"""Algorithm 1 (FedAvg with partial participation) as pure functions of one trial.

- :func:`local_run`: one client's Q local steps from x_t (Algorithm 1, lines 7-11; eq. 5),
  a ``lax.scan``.
- :func:`fedavg_round`: one round. In ``mask`` mode every client runs its virtual local
  trajectory x~_{i,t} (Section II-A), a ``vmap`` over all n; in ``gather`` mode only the
  sampled ones run. The server averages the sampled local models (line 13).
- :func:`run_rounds`: rounds t0, ..., t0 + K - 1 of one trial, a ``lax.scan``.

Randomness. The key of round t of a trial is ``fold_in(trial_key, t)``; it splits into a
sampling key and a noise key, and client i's noise key is ``fold_in(noise_key, i)``. A
client's noise therefore does not depend on the mode or on which others were sampled, and
``mask`` and ``gather`` modes give the same result.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array

__all__ = ["client_key", "fedavg_round", "local_run", "round_keys", "run_rounds"]

MODES = ("mask", "gather")


def round_keys(trial_key: Array, t) -> tuple[Array, Array]:
    """(sampling key, noise key) of round t of a trial."""
    sample_key, noise_key = jax.random.split(jax.random.fold_in(trial_key, t))
    return sample_key, noise_key


def client_key(noise_key: Array, i) -> Array:
    """The noise key of client i in a round."""
    return jax.random.fold_in(noise_key, i)


def local_run(problem, oracle, i, x: Array, stepsize, key: Array, local_steps: int) -> Array:
    """Q local stochastic gradient steps of client i from x (eq. 5).

    x^{l+1} = x^l - alpha_t g_i(x^l; xi^l), l = 0, ..., Q-1, with all Q steps' noise drawn
    at once by ``oracle.noise``.

    Args:
      problem: a :class:`~fedjax_abc.Problem`.
      oracle: the client's oracle.
      i: client index (may be traced).
      x: x_t, shape (d,).
      stepsize: alpha_t.
      key: the client's noise key for this round (:func:`client_key`).
      local_steps: Q (static).

    Returns:
      x^Q_{i,t}, shape (d,).
    """
    client = problem.client(i)
    noise = oracle.noise(key, (local_steps,) + x.shape, x.dtype)

    def step(x_l, z):
        return x_l - stepsize * oracle.gradient(problem, client, x_l, z), None

    x_q, _ = jax.lax.scan(step, x, noise)
    return x_q


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
    n = problem.num_clients
    sample_key, noise_key = round_keys(trial_key, t)
    idx, w = sampler(sample_key, n)
    w = w.astype(x.dtype)

    def run(i):
        return local_run(problem, oracle, i, x, stepsize, client_key(noise_key, i), local_steps)

    if mode == "mask":
        virtual = jax.vmap(run)(jnp.arange(n, dtype=jnp.int32))
        selected = virtual[idx]
    elif mode == "gather":
        selected = jax.vmap(run)(idx)
    else:
        raise ValueError(f"mode ({mode!r}) must be one of {MODES}")
    total = jnp.sum(w)
    mean = jnp.sum(w[:, None] * selected, axis=0) / jnp.where(total > 0, total, 1)
    return jnp.where(total > 0, mean, x)


def run_rounds(problem, oracle, sampler, x: Array, t0, stepsizes: Array, trial_key: Array,
               local_steps: int, mode: str) -> Array:
    """Rounds t0, ..., t0 + K - 1 of one trial with stepsizes alpha_{t0..t0+K-1}, shape (K,)."""

    def body(x_t, inputs):
        t, alpha = inputs
        return fedavg_round(problem, oracle, sampler, x_t, t, alpha, trial_key, local_steps, mode), None

    ts = t0 + jnp.arange(stepsizes.shape[0], dtype=jnp.int32)
    x, _ = jax.lax.scan(body, x, (ts, stepsizes))
    return x
