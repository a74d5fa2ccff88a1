"""Shared plumbing of the theory modules: domains, exact float64 evaluation, validation.

A *domain* is where a "for all x" of the paper (eq. 3, 4, 12) is checked numerically:
either ``(lo, hi)`` for a 1-D problem, evaluated on ``num_points`` equispaced points, or an
explicit array of points of shape (K, d) for any d (two numbers are always an interval; give
two explicit 1-D points with shape (2, 1)). Local values f_i(x) and exact gradients
grad f_i(x) (closed form or autodiff, never finite differences) are computed in float64,
``vmap``-ed over the points in batches.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_abc._problems._problem import Problem

__all__ = [
    "as_points",
    "check_int",
    "check_nonneg",
    "check_positive",
    "local_values_and_grads",
    "point_batch",
]

_BATCH = 4096  # points per vmapped batch: bounds memory at batch x n x d


def check_int(name: str, value, low: int = 1, high=None) -> int:
    """``value`` as an int in [low, high], else a ValueError that names it."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if high is None and value < low:
        raise ValueError(f"{name} ({value}) must be >= {low}")
    if high is not None and not low <= value <= high:
        raise ValueError(f"{name} ({value}) must be in [{low}, {high}]")
    return value


def _as_float(name: str, value) -> float:
    if isinstance(value, (str, bytes, bool)):  # float("0.6") would read a string
        raise ValueError(f"{name} must be a number, got {value!r}")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(out):
        raise ValueError(f"{name} ({out}) must be finite")
    return out


def check_positive(name: str, value) -> float:
    """``value`` as a finite float > 0, else a ValueError."""
    out = _as_float(name, value)
    if not out > 0:
        raise ValueError(f"{name} ({out}) must be > 0")
    return out


def check_nonneg(name: str, value) -> float:
    """``value`` as a finite float >= 0, else a ValueError."""
    out = _as_float(name, value)
    if not out >= 0:
        raise ValueError(f"{name} ({out}) must be >= 0")
    return out


def as_points(domain, num_points: int, dim: int) -> np.ndarray:
    """The evaluation points of a domain, float64 array of shape (K, d).

    Args:
      domain: ``(lo, hi)`` with lo < hi (only for d = 1), or points of shape (K, d)
        (or (K,) when d = 1).
      num_points: K for an interval (>= 2); ignored for explicit points.
      dim: the problem's dimension d.

    Returns:
      A (K, d) float64 array of finite points.
    """
    arr = np.asarray(domain, dtype=np.float64)
    if arr.shape == (2,) and dim == 1:
        lo, hi = float(arr[0]), float(arr[1])
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"domain {tuple(domain)} must be a finite interval lo < hi")
        k = check_int("num_points", num_points, 2)
        return np.linspace(lo, hi, k).reshape(k, 1)
    if arr.ndim == 1 and dim == 1:
        arr = arr.reshape(-1, 1)
    if arr.ndim != 2 or arr.shape[1] != dim or arr.shape[0] < 1:
        raise ValueError(
            f"domain must be (lo, hi) for a 1-D problem or points of shape (K, d={dim}), "
            f"got shape {np.shape(domain)}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("domain points must be finite")
    return arr


def point_batch(problem: Problem, limit: int = _BATCH) -> int:
    """Points per vmapped batch: ``limit``, fewer for problems with large parameters (data).

    An evaluation at one point touches every element of the per-client parameters (a
    learning problem's data: n x M x p numbers); a batch holds about 2^24 of them at most.
    """
    size = sum(int(np.prod(np.shape(a))) for a in jax.tree_util.tree_leaves(problem.params))
    return int(max(1, min(limit, 2**24 // max(size, 1))))


@eqx.filter_jit
def _values_and_grads(problem: Problem, points, batch):
    def at(x):
        return problem.local_values(x), problem.local_grads(x)

    return jax.lax.map(at, points, batch_size=batch)


def local_values_and_grads(problem: Problem, points: np.ndarray):
    """(f_i(x_k), grad f_i(x_k)) in float64 at every point: shapes (K, n) and (K, n, d)."""
    problem64 = problem.astype(jnp.float64)
    values, grads = _values_and_grads(problem64, jnp.asarray(points, jnp.float64),
                                      point_batch(problem))
    return np.asarray(values, np.float64), np.asarray(grads, np.float64)
