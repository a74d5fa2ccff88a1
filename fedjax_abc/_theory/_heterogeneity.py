"""Heterogeneity: sigma_f* (eq. 11), sampling factor I_S (eq. 10), BGD (eq. 3), Lemma 1 (eq. 12).

Reference: "On Federated Averaging with Partial Participation under a General Variance
Condition", Section II-C and Section IV-B (Table II: the optimized BGD sum zeta^2 + psi^2).

"For all x" is checked on a stated domain (see ``as_points``): an interval on an equispaced
grid for d = 1, or explicit points. Gradients are exact (closed form or autodiff) in float64.
"""

from __future__ import annotations

import types
from typing import NamedTuple

import numpy as np

from fedjax_abc._problems._problem import Problem
from fedjax_abc._theory._grid import as_points, check_int, check_positive, local_values_and_grads

__all__ = [
    "BGDSum",
    "InfimaCheck",
    "Lemma1Slack",
    "bgd_sum",
    "gradient_dissimilarity",
    "infima_check",
    "lemma1_slack",
    "sampling_factor",
    "sigma_f_star",
]


def sigma_f_star(problem: Problem) -> float:
    """sigma_f* = f* - (1/n) sum_i f_i*, the heterogeneity measure of eq. (11).

    Read from the float64 f* and f_i* the problem carries (closed forms or exact 1-D
    minimisation, see ``fedjax_abc.problems``); :func:`infima_check` verifies them on a grid.

    Args:
      problem: a :class:`~fedjax_abc.Problem`.

    Returns:
      sigma_f* as a float (>= 0 up to rounding).

    Example:
      >>> import jax, fedjax_abc as fa
      >>> p = fa.problems.huber_offsets(offsets=[0.0, 0.0, 4.0])
      >>> round(fa.theory.sigma_f_star(p), 6)  # f_i* = 0, x* = 1/2: (1/8 + 1/8 + 3) / 3
      1.083333

    Reference: eq. (11).
    """
    return float(np.float64(problem.f_star) - np.mean(np.asarray(problem.local_minima, np.float64)))


def sampling_factor(n: int, S: int) -> float:
    """I_S = (n - S) / (n - 1), the client sampling factor of eq. (10).

    Args:
      n: number of clients, an integer >= 2.
      S: clients sampled per round, an integer in [1, n].

    Returns:
      I_S in [0, 1]: 1 for S = 1, 0 for full participation S = n.

    Example:
      >>> import fedjax_abc as fa
      >>> fa.theory.sampling_factor(40, 4), fa.theory.sampling_factor(40, 40)
      (0.9230769230769231, 0.0)

    Reference: eq. (10); Lemma 3 (eq. 14).
    """
    n = check_int("number of clients (n)", n, 2)
    if isinstance(S, bool) or not isinstance(S, (int, np.integer)) or not 1 <= S <= n:
        raise ValueError(f"num_sampled (S={S!r}) must be an integer in [1, n={n}]")
    return (n - int(S)) / (n - 1)


def gradient_dissimilarity(problem: Problem, points) -> tuple[np.ndarray, np.ndarray]:
    """(1/n) sum_i ||grad f_i(x) - grad f(x)||^2 and ||grad f(x)||^2 at each point.

    The left-hand side of (3) and of (12), and the norm multiplying psi^2 in (3).

    Args:
      problem: a :class:`~fedjax_abc.Problem`.
      points: (K, d) points (see ``fedjax_abc._theory._grid.as_points``).

    Returns:
      (dissimilarity, grad_norm_sq), float64 arrays of shape (K,).
    """
    _, grads = local_values_and_grads(problem, points)
    mean = grads.mean(axis=1)
    dissim = np.mean(np.sum((grads - mean[:, None, :]) ** 2, axis=-1), axis=1)
    return dissim, np.sum(mean * mean, axis=-1)


class BGDSum(NamedTuple):
    """The optimized BGD constants of eq. (3) on a domain (Table II).

    Attributes:
      zeta_sq, psi_sq: zeta^2, psi^2 >= 0; when several pairs minimise zeta^2 + psi^2 (the
        binding points all have ||grad f|| = 1), the one with the smallest zeta^2.
      total: zeta^2 + psi^2, the optimized BGD sum (unique).
      max_dissimilarity: max over the points of the left-hand side of (3); a lower bound on
        ``total`` whenever ||grad f|| <= 1 on the domain, and equal to it then.
      argmax_point: a point attaining ``max_dissimilarity``, shape (d,).
      num_points: how many points (3) was imposed at.
    """

    zeta_sq: float
    psi_sq: float
    total: float
    max_dissimilarity: float
    argmax_point: np.ndarray
    num_points: int


_LP_OPTIONS = types.MappingProxyType({"primal_feasibility_tolerance": 1e-10,
                                      "dual_feasibility_tolerance": 1e-10})


def _solve_lp(cost, a_ub, b_ub):
    from scipy import optimize  # imported when used: a second of start-up otherwise
    res = optimize.linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=[(0, None), (0, None)],
                           method="highs", options=dict(_LP_OPTIONS))
    if res.status != 0:
        raise RuntimeError(f"linprog failed: {res.message}")
    return np.maximum(np.asarray(res.x, np.float64), 0.0)


def _upper_hull(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices of the vertices of the upper convex hull of the points (x_k, y_k).

    An affine function u + v x lies above every point iff it lies above these vertices, so
    the linear programs below need only them (an exact reduction; Andrew's monotone chain).
    """
    order = np.lexsort((y, x))
    last = np.append(x[order][1:] != x[order][:-1], True)  # highest y for each distinct x
    order = order[last]
    hull: list[int] = []
    for k in order:
        while len(hull) >= 2:
            i, j = hull[-2], hull[-1]
            if (x[j] - x[i]) * (y[k] - y[i]) - (y[j] - y[i]) * (x[k] - x[i]) >= 0:
                hull.pop()
            else:
                break
        hull.append(int(k))
    return np.asarray(hull, dtype=np.int64)


def min_sum_then_first(lhs: np.ndarray, coef: np.ndarray, weights=(1.0, 1.0),
                       tie_break: int = 0) -> np.ndarray:
    """Smallest w.(u, v) over u, v >= 0 with u + v coef_k >= lhs_k for all k.

    Two ``scipy.optimize.linprog`` (HiGHS) solves: the optimal value, then, among the (u, v)
    within 1e-12 relative of it, the one with the smallest u (``tie_break=0``) or v (1);
    u is then set to the exact smallest feasible value for that v. Constraints with
    lhs_k <= 0 hold for all u, v >= 0 and are dropped, and only the upper convex hull of the
    points (coef_k, lhs_k) is passed to the solver (an exact reduction).

    Returns:
      (u, v) as a float64 array of shape (2,).
    """
    keep = lhs > 0
    if not np.any(keep):
        return np.zeros(2)
    hull = _upper_hull(coef[keep], lhs[keep])
    a_ub = -np.stack([np.ones(hull.size), coef[keep][hull]], axis=1)
    b_ub = -lhs[keep][hull]
    w = np.asarray(weights, np.float64)
    first = _solve_lp(w, a_ub, b_ub)
    best = float(w @ first)
    a2 = np.vstack([a_ub, w[None, :]])
    b2 = np.append(b_ub, best + 1e-12 * max(1.0, abs(best)))
    try:
        u, v = _solve_lp(np.eye(2)[tie_break], a2, b2)
    except RuntimeError:
        u, v = first
    # Polish: the exact smallest u for this v (feasible to the last bit, not to LP tolerance).
    u = max(0.0, float(np.max(lhs[keep] - v * coef[keep])))
    return np.array([u, v])


def bgd_sum(problem: Problem, domain, num_points: int = 100_001) -> BGDSum:
    """The smallest zeta^2 + psi^2 for which the BGD condition (3) holds at every grid point.

    (3): (1/n) sum_i ||grad f_i(x) - grad f(x)||^2 <= zeta^2 + psi^2 ||grad f(x)||^2. Imposed
    at the K points of the domain it is a linear program in (zeta^2, psi^2) >= 0, solved by
    ``scipy.optimize.linprog``. The answer depends on the domain; state it. For problem
    (27) the left-hand side vanishes outside [min d_i - 1, max d_i + 1] (all clients clipped
    to the same side), so any domain covering the offsets with a margin >= 1 gives the same
    value, and since ||grad f|| <= 1 the optimum equals the largest dissimilarity.

    Args:
      problem: a :class:`~fedjax_abc.Problem`.
      domain: (lo, hi) for a 1-D problem, or explicit points of shape (K, d).
      num_points: grid size K for an interval.

    Returns:
      A :class:`BGDSum`.

    Example:
      >>> import jax, fedjax_abc as fa
      >>> p = fa.problems.huber_offsets(offsets=[0.0, 0.0, 4.0, 4.0])
      >>> res = fa.theory.bgd_sum(p, domain=(-2.0, 6.0), num_points=8001)
      >>> round(res.total, 6)  # at x = 2 two gradients are -1 and two are +1
      1.0

    Reference: eq. (3); Section IV-B, Table II.
    """
    points = as_points(domain, num_points, problem.dim)
    dissim, gns = gradient_dissimilarity(problem, points)
    zeta_sq, psi_sq = min_sum_then_first(dissim, gns, tie_break=0)
    k = int(np.argmax(dissim))
    return BGDSum(float(zeta_sq), float(psi_sq), float(zeta_sq + psi_sq), float(dissim[k]),
                  points[k].copy(), int(points.shape[0]))


class Lemma1Slack(NamedTuple):
    """Lemma 1 (eq. 12) checked on a domain.

    Attributes:
      min_slack: min over the points of 2L(f(x) - f*) + 2L sigma_f* - (LHS of 12); Lemma 1
        says it is >= 0 when every f_i is L-smooth.
      argmin_point: where the minimum is attained, shape (d,).
      holds: ``min_slack >= -1e-10 * max(1, max rhs)`` (float64 rounding allowance).
      L: the smoothness constant used.
      lhs, rhs: both sides of (12) at every point, shape (K,).
      points: the points, shape (K, d).
    """

    min_slack: float
    argmin_point: np.ndarray
    holds: bool
    L: float
    lhs: np.ndarray
    rhs: np.ndarray
    points: np.ndarray


def lemma1_slack(problem: Problem, L: float, domain, num_points: int = 100_001) -> Lemma1Slack:
    """The slack of Lemma 1: 2L[f(x) - f*] + 2L sigma_f* - (1/n) sum_i ||grad f_i - grad f||^2.

    Args:
      problem: a :class:`~fedjax_abc.Problem` whose clients are L-smooth.
      L: the smoothness constant (> 0), e.g. 1 for (25) and (27), 9/4 for Theorem 1.
      domain: (lo, hi) for a 1-D problem, or explicit points of shape (K, d).
      num_points: grid size K for an interval.

    Returns:
      A :class:`Lemma1Slack`; its worst (smallest) slack must be >= 0.

    Example:
      >>> import jax, fedjax_abc as fa
      >>> p = fa.problems.huber_offsets(jax.random.key(0), n=10, d_max=20.0)
      >>> fa.theory.lemma1_slack(p, 1.0, domain=(-5.0, 25.0), num_points=3001).holds
      True

    Reference: Lemma 1, eq. (12).
    """
    L = check_positive("L", L)
    points = as_points(domain, num_points, problem.dim)
    values, grads = local_values_and_grads(problem, points)
    mean = grads.mean(axis=1)
    lhs = np.mean(np.sum((grads - mean[:, None, :]) ** 2, axis=-1), axis=1)
    gap = values.mean(axis=1) - float(problem.f_star)
    rhs = 2.0 * L * gap + 2.0 * L * sigma_f_star(problem)
    slack = rhs - lhs
    k = int(np.argmin(slack))
    tol = 1e-10 * max(1.0, float(np.max(np.abs(rhs))))
    return Lemma1Slack(float(slack[k]), points[k].copy(), bool(slack[k] >= -tol), L, lhs, rhs,
                       points)


class InfimaCheck(NamedTuple):
    """Consistency of a problem's f*, x*, f_i* with its objectives on a domain.

    Attributes:
      f_at_x_star_minus_f_star: f(x*) - f* (0 up to rounding).
      min_global_gap: min over the points of f(x) - f* (>= 0 up to rounding).
      min_local_gaps: per client, min over the points of f_i(x) - f_i*, shape (n,)
        (>= 0 up to rounding; 0 when the domain contains the minimiser).
      consistent: all three within 1e-9 * max(1, |f*|) of their claims.
    """

    f_at_x_star_minus_f_star: float
    min_global_gap: float
    min_local_gaps: np.ndarray
    consistent: bool


def infima_check(problem: Problem, domain, num_points: int = 100_001) -> InfimaCheck:
    """Checks the stored f*, x*, f_i* (eq. 11's ingredients) against a grid of the domain.

    Args:
      problem: a :class:`~fedjax_abc.Problem`.
      domain: (lo, hi) for a 1-D problem, or explicit points of shape (K, d).
      num_points: grid size K for an interval.

    Returns:
      An :class:`InfimaCheck`.

    Example:
      >>> import fedjax_abc as fa
      >>> fa.theory.infima_check(fa.problems.softplus_huber(), (-30.0, 30.0), 6001).consistent
      True

    Reference: eq. (11) and Assumption 1 (f_i* = inf f_i).
    """
    points = as_points(domain, num_points, problem.dim)
    values, _ = local_values_and_grads(problem, points)
    f_star = float(problem.f_star)
    x_star = np.asarray(problem.x_star, np.float64)[None, :]
    at_star = float(local_values_and_grads(problem, x_star)[0].mean()) - f_star
    min_global = float(values.mean(axis=1).min()) - f_star
    min_local = values.min(axis=0) - np.asarray(problem.local_minima, np.float64)
    tol = 1e-9 * max(1.0, abs(f_star))
    ok = abs(at_star) <= tol and min_global >= -tol and bool(np.all(min_local >= -tol))
    return InfimaCheck(at_star, min_global, min_local, bool(ok))
