"""Float64 minimisation helpers used when a problem is built (plain NumPy/SciPy, not traced).

Exact 1-D minimisation for convex objectives (bisection on a monotone derivative down to
adjacent floats) and a robust global search (grid plus bounded Brent, or multi-start
L-BFGS-B for d > 1) for the rest.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

__all__ = ["convex_root_1d", "descend", "global_minimum"]


def convex_root_1d(fprime: Callable[[float], float], lo: float, hi: float) -> float:
    """A zero of a nondecreasing 1-D derivative on [lo, hi], to adjacent float64s.

    Args:
      fprime: nondecreasing derivative with fprime(lo) <= 0 <= fprime(hi).
      lo, hi: a bracket.

    Returns:
      x with fprime changing sign within one ulp of x (the minimiser of the convex function).
    """
    if fprime(lo) > 0 or fprime(hi) < 0:
        raise ValueError(f"[{lo}, {hi}] does not bracket a minimiser of the convex function")
    for _ in range(2000):
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        if fprime(mid) < 0:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def global_minimum(f: Callable[[np.ndarray], float], dim: int, lo: float, hi: float,
                   grid: int = 20001, starts: int = 64, seed: int = 0):
    """Global minimum of f on the box [lo, hi]^dim.

    d = 1: evaluate on a grid of ``grid`` points, then refine each of the best few cells by
    bounded Brent minimisation with xtol near float64 resolution. d > 1: L-BFGS-B from
    ``starts`` points (a fixed-seed uniform design plus the box centre).

    Returns:
      (x, f(x)) with x of shape (dim,).
    """
    from scipy import optimize  # imported when used: a second of start-up otherwise
    if dim == 1:
        xs = np.linspace(lo, hi, grid)
        vals = np.array([f(np.array([x])) for x in xs])
        h = xs[1] - xs[0]
        best = (None, np.inf)
        for j in np.argsort(vals)[:8]:
            a, b = max(lo, xs[j] - h), min(hi, xs[j] + h)
            res = optimize.minimize_scalar(lambda x: f(np.array([x])), bounds=(a, b),
                                           method="bounded", options={"xatol": 1e-13 * max(1.0, abs(xs[j]))})
            cand = [(res.x, res.fun), (xs[j], vals[j])]
            for x, v in cand:
                if v < best[1]:
                    best = (float(x), float(v))
        return np.array([best[0]]), best[1]
    rng = np.random.default_rng(seed)
    x0s = np.vstack([np.full(dim, 0.5 * (lo + hi)), rng.uniform(lo, hi, (starts - 1, dim))])
    best = (None, np.inf)
    for x0 in x0s:
        res = optimize.minimize(f, x0, method="L-BFGS-B", bounds=[(lo, hi)] * dim,
                                options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 10000})
        if res.fun < best[1]:
            best = (np.asarray(res.x, float), float(res.fun))
    return best


def descend(value_and_grad: Callable[[np.ndarray], tuple[float, np.ndarray]], x0: np.ndarray,
            maxiter: int = 200):
    """A local descent from x0 (L-BFGS-B, no bounds): a point with f no higher than f(x0).

    Used to test a claimed infimum: if f falls below it near x0, the claim is wrong.

    Args:
      value_and_grad: ``x -> (f(x), grad f(x))``, or ``x -> f(x)`` for finite differences
        (told apart by what it returns at x0).
      x0: the start, shape (d,).
      maxiter: iteration cap (a descent that runs off to -inf stops here).

    Returns:
      (x, f(x)) with x of shape (d,); (x0, inf) if the descent produced nothing finite.
    """
    from scipy import optimize  # imported when used: a second of start-up otherwise
    x0 = np.asarray(x0, dtype=float)
    probe = value_and_grad(x0)
    jac = isinstance(probe, tuple)
    res = optimize.minimize(value_and_grad, x0, jac=jac, method="L-BFGS-B",
                            options={"maxiter": maxiter, "ftol": 1e-15, "gtol": 1e-12})
    x = np.asarray(res.x, dtype=float)
    fx = float(res.fun)
    if not (np.isfinite(fx) and np.all(np.isfinite(x))):
        return x0, np.inf
    return x, fx
