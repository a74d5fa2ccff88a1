"""Algorithm 1 on problem (27) compiled with Numba: the fastest CPU baseline we could write.

- :func:`numba_sampled`: only the S sampled clients run their Q local steps (the work of
  the ``gather`` formulation).
- :func:`numba_all`: all n clients run, the S sampled ones are averaged (the work of the
  ``mask`` formulation).

Design (both kernels): trials are split in blocks of ``block`` (128 by default) and the
blocks are spread over threads with ``prange``; inside a block the trial index is the
innermost loop and every per-trial quantity is a contiguous array of length ``block``, so
LLVM vectorises the local step (no ``fastmath``: float64 and float32 keep IEEE semantics).
The dtype of ``x0`` selects a float64 or a float32 specialisation (all arithmetic in that
dtype).

Randomness has no sequential state: every random word is a SplitMix64 hash of
(seed, trial, round, slot), where slot c < n is client c's noise word (its Q local steps
take bits 0..Q-1; a new word every 64 steps) and slot n + j is the j-th draw of Floyd's
algorithm, which samples S of n clients without replacement, uniformly (Assumption 3).
The oracle is the package's: g_i(x; eps) = clip(x - d_i, -1, 1) + eps sqrt(f_i(x)), eps = +/-1
with probability 1/2 (f_i* = 0, d = 1). The two kernels draw the same words, so with the
same seed they compute the same trajectories (up to the order of the S-term average).
The streams differ from ``fedjax_abc``'s: the two agree in distribution, not path by path
(``tests/test_baseline_numba.py``).

Numba compiles each dtype on its first call (``cache=False``: a fresh process pays it, as
the package pays XLA's); :func:`set_threads` sets the number of threads.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

from benchmarks.baselines.problems import HuberOffsets

__all__ = ["numba_all", "numba_sampled", "set_threads"]

BLOCK = 128
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def set_threads(threads: int) -> None:
    """Runs the kernels on ``threads`` threads (at most ``numba.config.NUMBA_NUM_THREADS``)."""
    numba.set_num_threads(threads)


@numba.njit(inline="always")
def _mix(z):
    """The SplitMix64 finaliser of a uint64."""
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@numba.njit(inline="always")
def _word(seed_key, counter):
    """Random uint64 number ``counter`` of the stream ``seed_key``."""
    return _mix(seed_key + (counter + np.uint64(1)) * _GOLDEN)


@numba.njit(inline="always")
def _counter(trial, t, slot, rounds, slots):
    """The index of (trial, round t, slot) in a trial-major enumeration."""
    trial_round = np.uint64(trial) * np.uint64(rounds) + np.uint64(t)
    return trial_round * np.uint64(slots) + np.uint64(slot)


@numba.njit(inline="always")
def _sample_block(idx, dup, draw, seed_key, lo, m, t, n, S, rounds, slots):
    """Floyd's algorithm for each of the block's m trials: idx[:S, :m] gets S distinct
    clients out of n, every S-subset equally likely (the j-th draw is uniform on
    {0..n-S+j} by a 32x32-bit multiply-shift, bias below 2^-26 for n < 64)."""
    for j in range(S):
        top = n - S + j  # draw uniform in [0, top]; if taken, take top itself
        span = np.uint64(top + 1)
        for r in range(m):
            w = _word(seed_key, _counter(lo + r, t, n + j, rounds, slots))
            draw[r] = np.int64(((w >> np.uint64(32)) * span) >> np.uint64(32))
            dup[r] = False
        for k in range(j):
            for r in range(m):
                dup[r] |= idx[k, r] == draw[r]
        for r in range(m):
            idx[j, r] = top if dup[r] else draw[r]


@numba.njit(inline="always")
def _local_run(y, off, words, seed_key, lo, m, t, client_of, alpha, Q, rounds, slots, half,
               one):
    """Q local steps of eq. (27)'s sign oracle for the block's m trials, in place in y;
    client_of[r] is trial r's client (its offset in off[r])."""
    for q in range(Q):
        if q % 64 == 0:  # a new noise word every 64 steps
            for r in range(m):
                c = _counter(lo + r, t, client_of[r], rounds, slots)
                words[r] = _word(seed_key + np.uint64(q // 64) * _M2, c)
        sh = np.uint64(q % 64)
        for r in range(m):
            z = y[r] - off[r]
            a = abs(z)
            f = half * z * z if a < one else a - half
            g = z if a < one else (one if z > 0 else -one)
            s = np.sqrt(f)
            noise = s if (words[r] >> sh) & np.uint64(1) else -s
            y[r] = y[r] - alpha * (g + noise)


@numba.njit(inline="always")
def _sample_or_all(idx, dup, draw, seed_key, lo, m, t, n, S, rounds, slots):
    if S < n:
        _sample_block(idx, dup, draw, seed_key, lo, m, t, n, S, rounds, slots)
    else:
        for j in range(S):
            for r in range(m):
                idx[j, r] = j


@numba.njit(parallel=True)
def _sampled_kernel(x0, offsets, alphas, consts, S, Q, seed_key, block):
    """x_T of every trial, running only the S sampled clients; consts = (1/2, 1, S) in the
    dtype of x0."""
    R, n, T = x0.shape[0], offsets.shape[0], alphas.shape[0]
    half, one, s_float = consts[0], consts[1], consts[2]
    slots = n + S
    out = np.empty_like(x0)
    for b in prange((R + block - 1) // block):
        lo = b * block
        m = min(block, R - lo)
        x = x0[lo:lo + m].copy()
        y, acc, off = np.empty_like(x), np.empty_like(x), np.empty_like(x)
        words = np.empty(m, dtype=np.uint64)
        idx = np.empty((S, m), dtype=np.int64)
        draw = np.empty(m, dtype=np.int64)
        dup = np.empty(m, dtype=np.bool_)
        for t in range(T):
            _sample_or_all(idx, dup, draw, seed_key, lo, m, t, n, S, T, slots)
            acc[:] = 0
            for j in range(S):
                client_of = idx[j]
                for r in range(m):
                    off[r] = offsets[client_of[r]]
                    y[r] = x[r]
                _local_run(y, off, words, seed_key, lo, m, t, client_of, alphas[t], Q, T, slots,
                           half, one)
                for r in range(m):
                    acc[r] += y[r]
            for r in range(m):
                x[r] = acc[r] / s_float
        out[lo:lo + m] = x
    return out


@numba.njit(parallel=True)
def _all_kernel(x0, offsets, alphas, consts, S, Q, seed_key, block):
    """x_T of every trial, running all n clients and averaging the S sampled ones (a 0/1
    mask); consts = (1/2, 1, S) in the dtype of x0."""
    R, n, T = x0.shape[0], offsets.shape[0], alphas.shape[0]
    half, one, s_float = consts[0], consts[1], consts[2]
    slots = n + S
    out = np.empty_like(x0)
    for b in prange((R + block - 1) // block):
        lo = b * block
        m = min(block, R - lo)
        x = x0[lo:lo + m].copy()
        y, acc, off = np.empty_like(x), np.empty_like(x), np.empty_like(x)
        mask = np.empty((n, m), dtype=x0.dtype)
        words = np.empty(m, dtype=np.uint64)
        idx = np.empty((S, m), dtype=np.int64)
        draw = np.empty(m, dtype=np.int64)
        dup = np.empty(m, dtype=np.bool_)
        client_of = np.empty(m, dtype=np.int64)
        for t in range(T):
            _sample_or_all(idx, dup, draw, seed_key, lo, m, t, n, S, T, slots)
            mask[:, :] = 0
            for j in range(S):
                for r in range(m):
                    mask[idx[j, r], r] = one
            acc[:] = 0
            for c in range(n):
                for r in range(m):
                    off[r] = offsets[c]
                    y[r] = x[r]
                    client_of[r] = c
                _local_run(y, off, words, seed_key, lo, m, t, client_of, alphas[t], Q, T, slots,
                           half, one)
                for r in range(m):
                    acc[r] += mask[c, r] * y[r]
            for r in range(m):
                x[r] = acc[r] / s_float
        out[lo:lo + m] = x
    return out


def _run(kernel, problem, num_sampled, local_steps, stepsize, rounds, x0, trials, seed, dtype,
         block):
    if not isinstance(problem, HuberOffsets) or problem.dim != 1:
        raise TypeError("the Numba baseline implements problem (27) in one dimension "
                        f"(HuberOffsets with d = 1), got {problem!r}")
    n = problem.num_clients
    if not 1 <= num_sampled <= n:
        raise ValueError(f"num_sampled (S={num_sampled}) must be in [1, n={n}]")
    if local_steps < 1 or rounds < 0 or trials < 1:
        raise ValueError(f"local_steps (Q={local_steps}) and trials ({trials}) must be >= 1 and "
                         f"rounds (T={rounds}) >= 0")
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64, got {dtype}")
    x = np.ascontiguousarray(np.broadcast_to(np.asarray(x0, dtype=dtype).reshape(-1), (trials,)))
    alphas = np.ascontiguousarray(np.broadcast_to(np.asarray(stepsize, dtype=dtype), (rounds,)))
    offsets = np.ascontiguousarray(problem.offsets[:, 0], dtype=dtype)
    consts = np.array([0.5, 1.0, num_sampled], dtype=dtype)
    seed_key = np.uint64(_mix(np.uint64((int(seed) * int(_GOLDEN) + int(_M1)) % 2**64)))
    out = kernel(x, offsets, alphas, consts, num_sampled, local_steps, seed_key, block)
    return out[:, None]


def numba_sampled(problem, *, num_sampled: int, local_steps: int, stepsize, rounds: int, x0,
                  trials: int, seed: int = 0, dtype="float64", block: int = BLOCK) -> np.ndarray:
    """Algorithm 1 computing only the S sampled clients; returns x_T, shape (trials, 1).

    Args:
      problem: a :class:`~benchmarks.baselines.HuberOffsets` with d = 1 (problem (27)).
      num_sampled: S; local_steps: Q; stepsize: alpha or T values; rounds: T.
      x0: a scalar, (1,) or (trials,) / (trials, 1); trials: R; seed: any integer.
      dtype: "float64" or "float32" (all arithmetic in it); block: trials per task.
    """
    return _run(_sampled_kernel, problem, num_sampled, local_steps, stepsize, rounds, x0,
                trials, seed, dtype, block)


def numba_all(problem, *, num_sampled: int, local_steps: int, stepsize, rounds: int, x0,
              trials: int, seed: int = 0, dtype="float64", block: int = BLOCK) -> np.ndarray:
    """Algorithm 1 computing all n virtual trajectories each round (arguments as
    :func:`numba_sampled`); returns x_T, shape (trials, 1)."""
    return _run(_all_kernel, problem, num_sampled, local_steps, stepsize, rounds, x0, trials,
                seed, dtype, block)
