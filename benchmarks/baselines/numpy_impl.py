"""Algorithm 1 in plain NumPy, float64: vectorised over trials and clients, Python loops
over rounds and local steps.

- :func:`numpy_all`: every round all n clients run their virtual local trajectories
  (Section II-A of the paper), then the S sampled ones are averaged; the work of the
  ``mask`` formulation.
- :func:`numpy_sampled`: only the S sampled clients run; the work of the ``gather``
  formulation.

The S-subset of each trial is the S smallest of n uniforms (``argpartition``): every
S-subset is equally likely (Assumption 3). Randomness comes from one
``numpy.random.Generator`` (PCG64); the streams differ from ``fedjax_abc``'s, so the two
agree in distribution, not path by path.
"""

from __future__ import annotations

import numpy as np

from benchmarks.baselines.problems import HuberOffsets, Quadratics, SoftplusHuber

__all__ = ["numpy_all", "numpy_sampled", "sample_subsets"]


def sample_subsets(rng: np.random.Generator, trials: int, n: int, S: int) -> np.ndarray:
    """(trials, S) client indices, S distinct uniformly random clients per trial."""
    if S == n:
        return np.broadcast_to(np.arange(n), (trials, n))
    return np.argpartition(rng.random((trials, n)), S - 1, axis=1)[:, :S]


def _signs(rng: np.random.Generator, shape) -> np.ndarray:
    """Independent +/- 1 with probability 1/2 each, float64."""
    return rng.integers(0, 2, size=shape, dtype=np.int8) * 2.0 - 1.0


def _client_params(problem, idx):
    """The clients' parameters broadcastable against (trials, m, d); idx None: all n."""
    def pick(a):
        return a[None] if idx is None else a[idx]

    if isinstance(problem, HuberOffsets):
        return (pick(problem.offsets),)
    if isinstance(problem, SoftplusHuber):
        return pick(problem.shifts), pick(problem.is_huber)
    if isinstance(problem, Quadratics):
        return pick(problem.a), pick(problem.c)
    raise TypeError(f"unknown problem {type(problem).__name__}")


def _oracle(problem, params, X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """g_i(x; xi) for every (trial, client) row of X, shape (trials, m, d)."""
    d = X.shape[-1]
    if isinstance(problem, HuberOffsets):
        (off,) = params
        z = X - off
        a = np.abs(z)
        f = np.where(a < 1.0, 0.5 * z * z, a - 0.5).sum(axis=-1, keepdims=True)
        g = np.clip(z, -1.0, 1.0)
        return g + _signs(rng, X.shape) * (np.sqrt(f) / np.sqrt(d))
    if isinstance(problem, SoftplusHuber):
        shift, is_huber = params
        z = X - shift
        a = np.abs(X)
        f_soft = np.logaddexp(0.0, z)
        f = np.where(is_huber, np.where(a < 1.0, 0.5 * X * X, a - 0.5), f_soft)
        g = np.where(is_huber, np.clip(X, -1.0, 1.0), 0.5 * (1.0 + np.tanh(0.5 * z)))
        m = np.where(is_huber, np.sqrt(a), np.sqrt(f))
        return g + _signs(rng, X.shape) * m
    if isinstance(problem, Quadratics):
        a, c = params
        r = X - c
        f = 0.5 * np.sum(a * r * r, axis=-1, keepdims=True)
        var = problem.C * np.maximum(f, 0.0) + problem.D  # f_i* = 0
        return a * r + rng.standard_normal(X.shape) * np.sqrt(var / d)
    raise TypeError(f"unknown problem {type(problem).__name__}")


def _prepare(problem, num_sampled, local_steps, stepsize, rounds, x0, trials):
    n, d = problem.num_clients, problem.dim
    if not 1 <= num_sampled <= n:
        raise ValueError(f"num_sampled (S={num_sampled}) must be in [1, n={n}]")
    alphas = np.broadcast_to(np.asarray(stepsize, dtype=np.float64), (rounds,))
    x = np.array(np.broadcast_to(np.asarray(x0, dtype=np.float64).reshape(-1, d), (trials, d)))
    return n, d, alphas, x


def numpy_all(problem, *, num_sampled: int, local_steps: int, stepsize, rounds: int, x0,
              trials: int, seed: int = 0) -> np.ndarray:
    """Algorithm 1 computing all n virtual trajectories each round; returns x_T, (trials, d).

    Args:
      problem: a :mod:`benchmarks.baselines.problems` instance.
      num_sampled: S; local_steps: Q; stepsize: alpha or T values; rounds: T.
      x0: (d,) or (trials, d); trials: R; seed: the generator's seed.
    """
    n, d, alphas, x = _prepare(problem, num_sampled, local_steps, stepsize, rounds, x0, trials)
    rng = np.random.default_rng(seed)
    params = _client_params(problem, None)
    for t in range(rounds):
        idx = sample_subsets(rng, trials, n, num_sampled)
        X = np.repeat(x[:, None, :], n, axis=1)  # (R, n, d)
        for _ in range(local_steps):
            X -= alphas[t] * _oracle(problem, params, X, rng)
        x = np.take_along_axis(X, idx[:, :, None], axis=1).mean(axis=1)
    return x


def numpy_sampled(problem, *, num_sampled: int, local_steps: int, stepsize, rounds: int, x0,
                  trials: int, seed: int = 0) -> np.ndarray:
    """Algorithm 1 computing only the S sampled clients; returns x_T, (trials, d)."""
    n, d, alphas, x = _prepare(problem, num_sampled, local_steps, stepsize, rounds, x0, trials)
    rng = np.random.default_rng(seed)
    for t in range(rounds):
        idx = sample_subsets(rng, trials, n, num_sampled)
        params = _client_params(problem, idx)  # (R, S, d)
        X = np.repeat(x[:, None, :], num_sampled, axis=1)
        for _ in range(local_steps):
            X -= alphas[t] * _oracle(problem, params, X, rng)
        x = X.mean(axis=1)
    return x
