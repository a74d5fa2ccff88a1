"""Algorithm 1 (FedAvg with partial participation) as pure functions.

- :func:`local_run`: one client's Q local steps from x_t (Algorithm 1, lines 7-11; eq. 5),
  a ``lax.scan``.
- :func:`fedavg_round`: one round of one trial. In ``mask`` mode every client runs its
  virtual local trajectory x~_{i,t} (Section II-A), a ``vmap`` over all n; in ``gather``
  mode only the sampled ones run. The server averages the sampled local models (line 13).
- :func:`batched_round`: the same round for a batch of trials, the trials being the
  innermost ``vmap`` (see its docstring for why).
- :func:`run_rounds`: rounds t0, ..., t0 + K - 1 of a batch of trials, a ``lax.scan``.

Randomness (counter based). Round t of a trial has the key ``fold_in(trial_key, t)``;
from its data k_t, the Threefry-2x32 hash of the counter pair (s, j) gives words 2j and
2j + 1 of stream s. Stream 0 feeds the sampler; stream 1 is cut into consecutive pieces of
W words, piece i being client i's (W = what the oracle asks for Q steps, 1 word for up to
32 sign flips). A client's noise is a function of (trial key, t, i) alone: it does not
depend on the mode or on which other clients were sampled, so ``mask`` and ``gather``
modes make the same draws (their results agree bit for bit on the paper's problems; where
XLA orders a few floating-point operations differently in the two programs, to rounding),
and a round costs about n W hashes in ``mask`` mode, m W in ``gather`` mode (m sampler
slots; W / 2 each for clients of 8 words or more, hashed block by block).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.extend.random import threefry_2x32
from jaxtyping import Array

from ._threefry import fold_in_data, threefry2x32

__all__ = ["client_noise", "fedavg_round", "batched_round", "local_run", "round_key_data",
           "run_rounds", "stream_words", "client_words"]

MODES = ("mask", "gather")


def round_key_data(trial_key: Array, t) -> Array:
    """k_t: the uint32[2] key data of round t of a trial (that of ``fold_in(trial_key, t)``)."""
    return fold_in_data(jax.random.key_data(trial_key), t)


def _words(key_data: Array, stream, g: Array) -> Array:
    """Words g (a uint32 array of indices) of counter stream ``stream`` under key data k_t.

    Word g is half g mod 2 of the Threefry-2x32 hash of the counter pair (stream, g // 2).
    Each word hashes its own block, in one fused kernel with what consumes it: fine for a
    few words a client (XLA would hash a block once per word that reads it anyway).
    """
    y0, y1 = threefry2x32(key_data[0], key_data[1], jnp.uint32(stream), g >> 1)
    return jnp.where((g & 1) == 1, y1, y0)


def _block_words(key_data: Array, stream, first: Array, span: int) -> Array:
    """Words 2 first .. 2 (first + span) - 1 of a stream, block by block: shape (m, 2 span).

    JAX's own Threefry primitive runs as a loop on CPU, so its output is stored, not fused:
    each block is hashed once however many words read it. For clients with many words.
    """
    lo = (first[:, None] + jnp.arange(span, dtype=jnp.uint32)[None, :]).reshape(-1)
    out = threefry_2x32(key_data, jnp.concatenate([jnp.full_like(lo, stream), lo]))
    return jnp.stack([out[: lo.shape[0]], out[lo.shape[0]:]], axis=-1).reshape(-1, 2 * span)


_BLOCKWISE_MIN_WORDS = 8  # clients with this many words per round hash block by block


def stream_words(key_data: Array, stream, num_words: int) -> Array:
    """Words 0 .. num_words - 1 of counter stream ``stream`` under key data k_t."""
    return _words(key_data, stream, jnp.arange(num_words, dtype=jnp.uint32))


def client_words(key_data: Array, clients: Array, num_words: int) -> Array:
    """The round's random words of the given clients, shape (len(clients), W).

    Client i owns words i W .. i W + W - 1 of the client stream (stream 1): its words depend
    on (k_t, i) alone, whichever other clients are drawn.
    """
    W = num_words
    start = clients.astype(jnp.uint32) * W
    if W < _BLOCKWISE_MIN_WORDS:
        return _words(key_data, 1, start[:, None] + jnp.arange(W, dtype=jnp.uint32)[None, :])
    if W % 2 == 0:  # every client's words start a block
        return _block_words(key_data, 1, start // 2, W // 2)
    words = _block_words(key_data, 1, start // 2, W // 2 + 1)
    odd = (start % 2 == 1)[:, None]  # the client's first word is the second of a block
    return jnp.where(odd, words[:, 1: W + 1], words[:, :W])


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
