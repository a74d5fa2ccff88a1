"""Algorithm 1 (FedAvg with partial participation) as pure functions of one trial.

- :func:`local_run`: one client's Q local steps from x_t (Algorithm 1, lines 7-11; eq. 5),
  a ``lax.scan``.
- :func:`fedavg_round`: one round. In ``mask`` mode every client runs its virtual local
  trajectory x~_{i,t} (Section II-A), a ``vmap`` over all n; in ``gather`` mode only the
  sampled ones run. The server averages the sampled local models (line 13).
- :func:`run_rounds`: rounds t0, ..., t0 + K - 1 of one trial, a ``lax.scan``.

Randomness (counter based). Round t of a trial has the key ``fold_in(trial_key, t)``;
from its data k_t, the Threefry-2x32 hash of the counter pair (s, j) gives words 2j and
2j + 1 of stream s. Stream 0 feeds the sampler; stream 1 is cut into consecutive pieces of
W words, piece i being client i's (W = what the oracle asks for Q steps, 1 word for up to
32 sign flips). A client's noise is a function of (trial key, t, i) alone: it does not
depend on the mode or on which other clients were sampled, so ``mask`` and ``gather``
modes give the same result, and a round costs about n W / 2 hashes in ``mask`` mode.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.extend.random import threefry_2x32
from jaxtyping import Array

__all__ = ["client_noise", "fedavg_round", "local_run", "round_key_data", "run_rounds",
           "stream_words", "client_words", "all_client_words"]

MODES = ("mask", "gather")


def round_key_data(trial_key: Array, t) -> Array:
    """k_t: the uint32[2] key data of round t of a trial."""
    return jax.random.key_data(jax.random.fold_in(trial_key, t))


def _hash(key_data: Array, hi: Array, lo: Array) -> Array:
    """Threefry-2x32 of the counter pairs (hi_j, lo_j): words 2j, 2j + 1 of the stream."""
    out = threefry_2x32(key_data, jnp.concatenate([hi, lo]))
    m = hi.shape[0]
    return jnp.stack([out[:m], out[m:]], axis=-1).reshape(-1)


def stream_words(key_data: Array, stream, num_words: int) -> Array:
    """Words 0 .. num_words - 1 of counter stream ``stream`` under key data k_t."""
    blocks = (num_words + 1) // 2
    if blocks == 0:
        return jnp.zeros((0,), jnp.uint32)
    hi = jnp.full((blocks,), stream, jnp.uint32)
    return _hash(key_data, hi, jnp.arange(blocks, dtype=jnp.uint32))[:num_words]


def client_words(key_data: Array, clients: Array, num_words: int) -> Array:
    """The round's random words of the given clients, shape (len(clients), W).

    Client i owns words i W .. i W + W - 1 of the client stream (stream 1), so two clients
    can share one 64-bit hash. For all n clients in order, the whole stream
    is hashed in one pass (:func:`all_client_words`); here each client hashes only the
    blocks holding its words. Both give the same words.
    """
    W, m = num_words, clients.shape[0]
    if W == 0:
        return jnp.zeros((m, 0), jnp.uint32)
    span = W // 2 + 1  # blocks that can hold W consecutive words
    first = (clients.astype(jnp.uint32) * W) // 2
    lo = (first[:, None] + jnp.arange(span, dtype=jnp.uint32)[None, :]).reshape(-1)
    words = _hash(key_data, jnp.ones_like(lo), lo).reshape(m, 2 * span)
    odd = ((clients * W) % 2 == 1)[:, None]  # client's first word is the second of a block
    return jnp.where(odd, words[:, 1: W + 1], words[:, :W])


def all_client_words(key_data: Array, num_words: int, num_clients: int) -> Array:
    """:func:`client_words` of all n clients, hashing the stream once: shape (n, W)."""
    W, n = num_words, num_clients
    if W == 0:
        return jnp.zeros((n, 0), jnp.uint32)
    blocks = (n * W + 1) // 2
    lo = jnp.arange(blocks, dtype=jnp.uint32)
    return _hash(key_data, jnp.ones_like(lo), lo)[: n * W].reshape(n, W)


def client_noise(oracle, key_data: Array, i, shape: tuple[int, ...], dtype):
    """Client i's noise for one round, as the simulator draws it (shape (Q, d) noise)."""
    clients = jnp.asarray(i, jnp.int32).reshape(1)
    words = client_words(key_data, clients, oracle.num_words(shape))[0]
    return oracle.noise_from_words(words, shape, dtype)


def local_run(problem, oracle, i, x: Array, stepsize, noise, local_steps: int | None = None) -> Array:
    """Q local stochastic gradient steps of client i from x (eq. 5).

    x^{l+1} = x^l - alpha_t g_i(x^l; xi^l), l = 0, ..., Q-1.

    Args:
      problem: a :class:`~fedjax_abc.Problem`.
      oracle: the client's oracle.
      i: client index (may be traced).
      x: x_t, shape (d,).
      stepsize: alpha_t.
      noise: the Q steps' noise: ``oracle.noise(key, (Q, d), dtype)`` (leaves with leading
        axis Q) or :func:`client_noise`.
      local_steps: Q; needed only when ``noise`` does not carry it as a leading axis
        (packed noise from :func:`client_noise`).

    Returns:
      x^Q_{i,t}, shape (d,).

    Example:
      >>> import jax, jax.numpy as jnp, fedjax_abc as fa
      >>> p = fa.problems.huber_offsets(offsets=[0.0, 4.0])
      >>> z = p.oracle.noise(jax.random.key(0), (3, 1), jnp.float64)
      >>> fa.local_run(p, fa.ExactOracle(), 1, jnp.array([0.0]), 0.5, z)  # 3 steps of size 1/2
      Array([1.5], dtype=float64)
    """
    client = problem.client(i)
    if local_steps is None:
        local_steps = jax.tree_util.tree_leaves(noise)[0].shape[0]
    shape = (local_steps,) + x.shape

    def step(x_l, l):
        z = oracle.step_noise(noise, l, shape, x.dtype)
        return x_l - stepsize * oracle.gradient(problem, client, x_l, z), None

    x_q, _ = jax.lax.scan(step, x, jnp.arange(shape[0]))
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
    key_data = round_key_data(trial_key, t)
    idx, w = sampler.from_words(stream_words(key_data, 0, sampler.num_words(n)), n)
    w = w.astype(x.dtype)

    shape = (local_steps,) + x.shape

    W = oracle.num_words(shape)

    def run(clients, words):
        noise = jax.vmap(lambda w: oracle.noise_from_words(w, shape, x.dtype))(words)
        return jax.vmap(lambda i, z: local_run(problem, oracle, i, x, stepsize, z, local_steps))(
            clients, noise)

    if mode == "mask":
        everyone = jnp.arange(n, dtype=jnp.int32)
        selected = run(everyone, all_client_words(key_data, W, n))[idx]
    elif mode == "gather":
        selected = run(idx, client_words(key_data, idx, W))
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
