"""A straightforward JAX version of Algorithm 1: the reference point for the package.

One trial is a ``lax.scan`` over rounds; a round samples its S clients with
``jax.random.permutation(key, n)[:S]`` and runs the clients' local steps, a ``lax.scan``
over Q steps with one key per step (``jax.random.split(client_key, Q)``, each step's noise
drawn from its own key); ``vmap`` over clients and over trials; one ``jit``. (Splitting
the key inside the scan, two hashes per step instead of one, ran about 2x slower.)

Mode "all" runs all n virtual trajectories and averages the sampled ones (the ``mask``
formulation); mode "sampled" runs only the S sampled clients (the ``gather`` formulation).

Importing this module switches on JAX's float64 support so that ``dtype="float64"`` is
available; ``dtype="float32"`` casts every array to float32.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.baselines.problems import HuberOffsets, Quadratics, SoftplusHuber

jax.config.update("jax_enable_x64", True)

__all__ = ["jax_naive", "make_jax_naive"]

_DTYPES = {"float64": jnp.float64, "float32": jnp.float32}


def _params(problem, dtype):
    """Per-client parameters, every leaf with leading axis n."""
    if isinstance(problem, HuberOffsets):
        return (jnp.asarray(problem.offsets, dtype),)
    if isinstance(problem, SoftplusHuber):
        return jnp.asarray(problem.shifts, dtype), jnp.asarray(problem.is_huber)
    if isinstance(problem, Quadratics):
        return (jnp.asarray(problem.a, dtype), jnp.asarray(problem.c, dtype),
                jnp.asarray(problem.C, dtype), jnp.asarray(problem.D, dtype))
    raise TypeError(f"unknown problem {type(problem).__name__}")


def _signs(key, shape, dtype):
    return jnp.where(jax.random.bernoulli(key, 0.5, shape), 1.0, -1.0).astype(dtype)


def _oracle(kind, p, x, key):
    """g_i(x; xi) of one client for one step; p are the client's parameters."""
    d = x.shape[-1]
    if kind == "huber27":
        (off,) = p
        z = x - off
        a = jnp.abs(z)
        f = jnp.sum(jnp.where(a < 1, 0.5 * z * z, a - 0.5))
        return jnp.clip(z, -1, 1) + _signs(key, x.shape, x.dtype) * jnp.sqrt(f / d)
    if kind == "softplus_huber":
        shift, is_huber = p
        a = jnp.abs(x)
        f = jnp.where(is_huber, jnp.where(a < 1, 0.5 * x * x, a - 0.5), jax.nn.softplus(x - shift))
        g = jnp.where(is_huber, jnp.clip(x, -1, 1), jax.nn.sigmoid(x - shift))
        m = jnp.where(is_huber, jnp.sqrt(a), jnp.sqrt(f))
        return g + _signs(key, x.shape, x.dtype) * m
    if kind == "quadratics":
        a, c, C, D = p
        r = x - c
        f = 0.5 * jnp.sum(a * r * r)
        var = C * jnp.maximum(f, 0) + D
        return a * r + jax.random.normal(key, x.shape, x.dtype) * jnp.sqrt(var / d)
    raise ValueError(f"unknown problem kind {kind!r}")


@functools.lru_cache(maxsize=None)
def make_jax_naive(kind: str, n: int, num_sampled: int, local_steps: int, mode: str):
    """The jitted ``run(params, x0, alphas, keys) -> x_T`` for one configuration.

    x0: (trials, d); alphas: (T,); keys: (trials,) PRNG keys.
    """
    if mode not in ("all", "sampled"):
        raise ValueError(f"mode ({mode!r}) must be 'all' or 'sampled'")
    S, Q = num_sampled, local_steps

    def local_run(p, x, alpha, key):
        def step(x_l, k):
            return x_l - alpha * _oracle(kind, p, x_l, k), None

        x_q, _ = jax.lax.scan(step, x, jax.random.split(key, Q))  # one key per local step
        return x_q

    def one_round(params, carry, alpha):
        x, key = carry
        key, k_sample, k_noise = jax.random.split(key, 3)
        idx = jax.random.permutation(k_sample, n)[:S]
        if kind == "quadratics":  # (a, c, C, D): C and D are shared
            take = lambda p, i: (p[0][i], p[1][i], p[2], p[3])  # noqa: E731
            axes = (0, 0, None, None)
        else:
            take = lambda p, i: jax.tree_util.tree_map(lambda a: a[i], p)  # noqa: E731
            axes = 0
        run = jax.vmap(local_run, in_axes=(axes, None, None, 0))
        if mode == "all":
            local = run(params, x, alpha, jax.random.split(k_noise, n))[idx]
        else:
            local = run(take(params, idx), x, alpha, jax.random.split(k_noise, S))
        return (jnp.mean(local, axis=0), key), None

    def one_trial(params, x0, alphas, key):
        (x, _), _ = jax.lax.scan(lambda c, a: one_round(params, c, a), (x0, key), alphas)
        return x

    return jax.jit(jax.vmap(one_trial, in_axes=(None, 0, None, 0)))


def jax_naive(problem, *, num_sampled: int, local_steps: int, stepsize, rounds: int, x0,
              trials: int, key, mode: str = "all", dtype: str = "float64") -> np.ndarray:
    """Algorithm 1, straightforward JAX; returns x_T as a NumPy array, (trials, d).

    Args:
      problem: a :mod:`benchmarks.baselines.problems` instance.
      num_sampled: S; local_steps: Q; stepsize: alpha or T values; rounds: T.
      x0: (d,) or (trials, d); trials: R; key: a JAX PRNG key (split into one per trial).
      mode: "all" (n virtual trajectories) or "sampled" (the S sampled clients).
      dtype: "float64" or "float32".
    """
    n, d = problem.num_clients, problem.dim
    if not 1 <= num_sampled <= n:
        raise ValueError(f"num_sampled (S={num_sampled}) must be in [1, n={n}]")
    jdt = _DTYPES[dtype]
    run = make_jax_naive(problem.kind, n, num_sampled, local_steps, mode)
    alphas = jnp.asarray(np.broadcast_to(np.asarray(stepsize, np.float64), (rounds,)), jdt)
    x0 = jnp.asarray(np.broadcast_to(np.asarray(x0, np.float64).reshape(-1, d), (trials, d)), jdt)
    out = run(_params(problem, jdt), x0, alphas, jax.random.split(key, trials))
    return np.asarray(jax.block_until_ready(out))
