"""Theorem 1: two smooth, lower bounded clients for which no (zeta, psi) satisfies BGD (3).

f_{1,2}(x) = r(x) +/- u(x), u = (r/2) sin(sqrt r), r(x) = sqrt(1 + x^2) (the square roots lost
in the extracted text are the ones the proof's own U'(R) and r(x_k) = (2 k pi)^2 require; see
``fedjax_abc.problems.bgd_counterexample``). The quantities of the theorem and its proof:
the smoothness bound L = 9/4, sigma_f* <= 1/2, and along x_k = sqrt((2 k pi)^4 - 1) the BGD
left-hand side |u'(x_k)|^2 >= (k pi)^2 / 8, which diverges.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_abc._problems._problem import Problem
from fedjax_abc._theory._grid import as_points, check_int
from fedjax_abc._theory._heterogeneity import gradient_dissimilarity, sigma_f_star

__all__ = ["Theorem1Values", "theorem1_values", "theorem1_x_k"]

L_THEOREM1 = 9.0 / 4.0


class Theorem1Values(NamedTuple):
    """The numbers of Theorem 1 and its proof.

    Attributes:
      L_bound: 9/4, the smoothness constant the theorem states.
      max_abs_second_derivative: max over both clients of |f_i''(x)| on the domain (dense
        grid of jax second derivatives, refined by bounded Brent search); <= L_bound.
      argmax_second_derivative: where it is attained.
      sigma_f_star: f* - (f_1* + f_2*)/2 (eq. 11); the theorem says <= 1/2.
      f1_star, f2_star: the local infima the problem carries.
      ks: the k of the sequence x_k.
      x_k: sqrt((2 k pi)^4 - 1), shape (len(ks),).
      bgd_lhs: (1/2) sum_i |f_i'(x_k) - f'(x_k)|^2 = |u'(x_k)|^2 from exact jax gradients.
      bgd_lhs_closed_form: (k pi / 2)^2 (1 - (2 k pi)^-4) = [U'(r(x_k)) r'(x_k)]^2.
      lower_bound: (k pi)^2 / 8, the proof's lower bound on ``bgd_lhs``.
    """

    L_bound: float
    max_abs_second_derivative: float
    argmax_second_derivative: float
    sigma_f_star: float
    f1_star: float
    f2_star: float
    ks: tuple
    x_k: np.ndarray
    bgd_lhs: np.ndarray
    bgd_lhs_closed_form: np.ndarray
    lower_bound: np.ndarray


def theorem1_x_k(k) -> np.ndarray:
    """x_k = sqrt((2 k pi)^4 - 1): r(x_k) = (2 k pi)^2 and the BGD left-hand side is >= (k pi)^2/8.

    Args:
      k: an integer >= 1 or an array of them.

    Returns:
      x_k as float64 (array of the shape of k).

    Example:
      >>> import fedjax_abc as fa
      >>> round(float(fa.theory.theorem1_x_k(1)), 4)
      39.4658

    Reference: proof of Theorem 1.
    """
    k = np.asarray(k, np.float64)
    return np.sqrt((2.0 * k * np.pi) ** 4 - 1.0)


def _second_derivatives(problem: Problem):
    def f(sign, x):
        return problem.loss(sign, jnp.reshape(x, (1,)))

    d2 = jax.grad(jax.grad(f, argnums=1), argnums=1)
    return jax.jit(jax.vmap(jax.vmap(d2, in_axes=(None, 0)), in_axes=(0, None))), jax.jit(d2)


def theorem1_values(ks: Sequence[int] = (1, 2, 3, 4, 5), domain=(-1.0e4, 1.0e4),
                    num_points: int = 400_001, problem: Optional[Problem] = None) -> Theorem1Values:
    """Theorem 1's constants, checked numerically.

    Args:
      ks: the k >= 1 of the points x_k (x_k is about (2 k pi)^2: x_5 ~ 987).
      domain: (lo, hi) on which max |f_i''| is searched (it should contain the x_k).
      num_points: grid size for the second derivatives.
      problem: default ``fedjax_abc.problems.bgd_counterexample()``.

    Returns:
      A :class:`Theorem1Values`.

    Example:
      >>> import fedjax_abc as fa
      >>> v = fa.theory.theorem1_values(ks=(1, 2), domain=(-100.0, 100.0), num_points=20001)
      >>> v.max_abs_second_derivative <= v.L_bound, v.sigma_f_star <= 0.5
      (True, True)
      >>> bool(all(v.bgd_lhs >= v.lower_bound))
      True

    Reference: Theorem 1 and its proof (Section II-C).
    """
    from scipy import optimize  # imported when used: a second of start-up otherwise
    ks = tuple(check_int("k", k, 1) for k in ks)
    if not ks:
        raise ValueError("ks must name at least one k >= 1")
    if problem is None:
        from fedjax_abc.problems import bgd_counterexample

        problem = bgd_counterexample()
    if problem.num_clients != 2 or problem.dim != 1:
        raise ValueError("theorem1_values needs Theorem 1's problem (n = 2, d = 1)")
    problem = problem.astype(jnp.float64)
    xs = as_points(domain, num_points, 1)[:, 0]
    grid_fn, point_fn = _second_derivatives(problem)
    signs = problem.params
    d2 = np.abs(np.asarray(grid_fn(signs, jnp.asarray(xs))))  # (2, K)
    best, best_x = -math.inf, math.nan
    h = xs[1] - xs[0]
    for i in range(2):
        for j in np.argsort(d2[i])[-8:]:
            a, b = max(xs[0], xs[j] - h), min(xs[-1], xs[j] + h)
            res = optimize.minimize_scalar(
                lambda x, s=signs[i]: -abs(float(point_fn(s, jnp.asarray(x, jnp.float64)))),
                bounds=(a, b), method="bounded", options={"xatol": 1e-12 * max(1.0, abs(xs[j]))})
            for x, v in ((float(res.x), -float(res.fun)), (float(xs[j]), float(d2[i, j]))):
                if v > best:
                    best, best_x = v, x
    karr = np.asarray(ks, np.float64)
    x_k = theorem1_x_k(karr)
    lhs, _ = gradient_dissimilarity(problem, x_k[:, None])
    closed = (karr * np.pi / 2.0) ** 2 * (1.0 - (2.0 * karr * np.pi) ** -4)
    minima = np.asarray(problem.local_minima, np.float64)
    return Theorem1Values(L_THEOREM1, best, best_x, sigma_f_star(problem), float(minima[0]),
                          float(minima[1]), ks, x_k, lhs, closed, (karr * np.pi) ** 2 / 8.0)
