"""Noise constants of an oracle: the ABC condition (eq. 4 / 8) and the relaxed growth condition (2).

Reference: "On Federated Averaging with Partial Participation under a General Variance
Condition", Section I (eq. 2, 4), Assumption 2 (eq. 8), Section IV-A (oracle 26: C = 1,
D = 1/2) and IV-B (C = 1, D = 0).

The variance E||g_i(x; xi) - grad f_i(x)||^2 is exact for an oracle that gives it in closed
form (its ``variance(problem, i, x)``: :class:`~fedjax_abc.RademacherOracle`: m_i(x)^2;
:class:`~fedjax_abc.GaussianOracle`: C (f_i - f_i*) + D; :class:`~fedjax_abc.ExactOracle`:
0; :class:`~fedjax_abc.MinibatchOracle`: the sampling variance of the mini-batch mean, from
the per-sample gradients) and a Monte Carlo mean with its standard error for any other
oracle (through ``oracle.noise`` and ``oracle.gradient``).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_abc._engine import Z95
from fedjax_abc._problems._oracles import AbstractOracle, has_exact_variance
from fedjax_abc._problems._problem import Problem, cast_floating
from fedjax_abc._theory._grid import (as_points, check_int, check_nonneg, local_values_and_grads,
                                     point_batch)
from fedjax_abc._theory._heterogeneity import min_sum_then_first

__all__ = [
    "ABCConstants",
    "ABCSlack",
    "OracleVariance",
    "RelaxedGrowth",
    "abc_constants",
    "abc_slack",
    "oracle_variance",
    "relaxed_growth_sigma_sq",
]


class OracleVariance(NamedTuple):
    """Oracle variance and local quantities at K points for the n clients.

    Attributes:
      variance: E||g_i(x_k; xi) - grad f_i(x_k)||^2, shape (K, n).
      stderr: its Monte Carlo standard error, shape (K, n) (zeros when exact).
      gap: f_i(x_k) - f_i*, shape (K, n).
      grad_norm_sq: ||grad f_i(x_k)||^2, shape (K, n).
      points: the points x_k, shape (K, d).
      exact: whether ``variance`` is exact (a package oracle) or Monte Carlo.
    """

    variance: np.ndarray
    stderr: np.ndarray
    gap: np.ndarray
    grad_norm_sq: np.ndarray
    points: np.ndarray
    exact: bool


@eqx.filter_jit
def _exact_variance(problem, oracle, points, batch):
    """The oracle's closed-form variance (its ``variance``) of every client at every point."""
    n = problem.num_clients

    def at(x):
        return jax.vmap(lambda i: oracle.variance(problem, i, x))(jnp.arange(n, dtype=jnp.int32))

    return jax.lax.map(at, points, batch_size=batch)


@eqx.filter_jit
def _mc_variance(problem, oracle, points, key, num_samples, batch):
    n = problem.num_clients
    d = points.shape[-1]

    def at(inputs):
        k, x = inputs

        def client(i):
            c = problem.client(i)
            g_true = problem.local_grad(c, x)
            shape = (num_samples, d)  # num_samples "steps" of one client at the same x
            z = oracle.noise(jax.random.fold_in(jax.random.fold_in(key, k), i), shape, x.dtype)
            steps = jnp.arange(num_samples, dtype=jnp.int32)
            g = jax.vmap(lambda l: oracle.gradient(
                problem, c, x, oracle.step_noise(z, l, shape, x.dtype)))(steps)
            sq = jnp.sum((g - g_true) ** 2, axis=-1)
            return jnp.mean(sq), jnp.std(sq, ddof=1) / jnp.sqrt(num_samples)

        return jax.vmap(client)(jnp.arange(n, dtype=jnp.int32))

    ks = jnp.arange(points.shape[0], dtype=jnp.int32)
    return jax.lax.map(at, (ks, points), batch_size=batch)


def oracle_variance(problem: Problem, oracle: Optional[AbstractOracle] = None, *, domain=None,
                    num_points: int = 2001, key: Optional[jax.Array] = None,
                    num_samples: int = 4096, method: str = "auto") -> OracleVariance:
    """The oracle variance E||g_i(x; xi) - grad f_i(x)||^2 of every client at every point.

    Args:
      problem: a :class:`~fedjax_abc.Problem`.
      oracle: default ``problem.oracle``.
      domain: (lo, hi) for a 1-D problem, or explicit points of shape (K, d).
      num_points: grid size K for an interval.
      key: PRNG key of the Monte Carlo estimate (required when it is used); point k and
        client i use ``fold_in(fold_in(key, k), i)``.
      num_samples: Monte Carlo draws per point and client (>= 2).
      method: "auto" (exact for the package's oracles, Monte Carlo otherwise), "exact" or
        "monte_carlo".

    Returns:
      An :class:`OracleVariance`.

    Example:
      >>> import fedjax_abc as fa
      >>> v = fa.theory.oracle_variance(fa.problems.softplus_huber(), domain=(-2.0, 2.0),
      ...                              num_points=5)
      >>> [round(float(a), 6) for a in v.variance[:, 0]]  # oracle (26), client 1: |x|
      [2.0, 1.0, 0.0, 1.0, 2.0]

    Reference: Assumption 2, eq. (8); oracle (26).
    """
    oracle = problem.oracle if oracle is None else oracle
    if not isinstance(oracle, AbstractOracle):
        raise ValueError(f"oracle must be a fedjax_abc.AbstractOracle, got {type(oracle).__name__}"
                         " (give the domain as domain=...)")
    if domain is None:
        raise ValueError("domain is required: (lo, hi) for a 1-D problem or points (K, d)")
    if method not in ("auto", "exact", "monte_carlo"):
        raise ValueError(f"method ({method!r}) must be 'auto', 'exact' or 'monte_carlo'")
    known = has_exact_variance(oracle)
    if method == "exact" and not known:
        raise ValueError(f"no exact variance for {type(oracle).__name__}; use method='monte_carlo'")
    exact = known and method != "monte_carlo"
    points = as_points(domain, num_points, problem.dim)
    values, grads = local_values_and_grads(problem, points)
    gap = values - np.asarray(problem.local_minima, np.float64)[None, :]
    problem64 = problem.astype(jnp.float64)
    oracle64 = cast_floating(oracle, jnp.float64)
    pts = jnp.asarray(points, jnp.float64)
    if exact:  # points at a time: a mini-batch oracle's forms 128 per-sample gradients each
        batch = max(1, point_batch(problem, 1024 * 128) // 128)
        var = np.asarray(_exact_variance(problem64, oracle64, pts, batch), np.float64)
        se = np.zeros_like(var)
    else:
        if key is None:
            raise ValueError("key is required for the Monte Carlo variance, e.g. jax.random.key(0)")
        m = check_int("num_samples", num_samples, 2)
        var, se = _mc_variance(problem64, oracle64, pts, key, m, point_batch(problem, 64))
        var, se = np.asarray(var, np.float64), np.asarray(se, np.float64)
    return OracleVariance(var, se, gap, np.sum(grads * grads, axis=-1), points, bool(exact))


class ABCConstants(NamedTuple):
    """ABC constants (C, D) of an oracle on a domain: var_i(x) <= C (f_i(x) - f_i*) + D.

    Attributes:
      C, D: the constants (see :func:`abc_constants` for which ones).
      C_upper95, D_upper95: the same rule applied to variance + 1.96 standard errors (equal
        to C, D when the variance is exact).
      exact: whether the variance was exact.
      max_stderr: largest Monte Carlo standard error (0 when exact).
      num_points: number of points.
    """

    C: float
    D: float
    C_upper95: float
    D_upper95: float
    exact: bool
    max_stderr: float
    num_points: int


def _abc_rule(var, gap, C, weights):
    var, gap = var.ravel(), np.maximum(gap.ravel(), 0.0)
    if C is not None:
        return C, max(0.0, float(np.max(var - C * gap)))
    d, c = min_sum_then_first(var, gap, (weights[1], weights[0]), tie_break=1)  # (u, v) = (D, C)
    return float(c), float(d)


def abc_constants(problem: Problem, oracle: Optional[AbstractOracle] = None, *, domain=None,
                  num_points: int = 2001, C: Optional[float] = None, weights=(1.0, 1.0),
                  key: Optional[jax.Array] = None, num_samples: int = 4096,
                  method: str = "auto") -> ABCConstants:
    """The ABC constants of eq. (4)/(8) that hold at every point of a domain, for all clients.

    The feasible (C, D) form a convex set: every C >= 0 is feasible on a bounded domain with
    D(C) = max_{i,x} [var_i(x) - C (f_i(x) - f_i*)]. The rule:

    - ``C`` given: the smallest D for that C, D(C) (clipped at 0);
    - otherwise: the (C, D) minimising w_C C + w_D D (default C + D), a linear program solved
      by ``scipy.optimize.linprog``; ties go to the smallest C. On a domain large enough
      that the growth of the variance shows, this recovers the constants stated in the
      paper: C = 1, D = 1/2 for oracle (26) and C = 1, D = 0 for Section IV-B's oracle.

    Args:
      problem: a :class:`~fedjax_abc.Problem`.
      oracle: default ``problem.oracle``.
      domain: (lo, hi) for a 1-D problem, or explicit points of shape (K, d).
      num_points: grid size K for an interval.
      C: fix C >= 0 and return the smallest D.
      weights: (w_C, w_D) >= 0 of the objective when C is not given.
      key, num_samples, method: as in :func:`oracle_variance` (Monte Carlo oracles).

    Returns:
      An :class:`ABCConstants`.

    Example:
      >>> import fedjax_abc as fa
      >>> c = fa.theory.abc_constants(fa.problems.softplus_huber(), domain=(-50.0, 50.0))
      >>> round(c.C, 6), round(c.D, 6)
      (1.0, 0.5)

    Reference: eq. (4), Assumption 2 (eq. 8); Section IV-A (26) and IV-B.
    """
    if C is not None:
        C = check_nonneg("C", C)
    w = (check_nonneg("weights[0]", weights[0]), check_nonneg("weights[1]", weights[1]))
    if w[1] <= 0:
        raise ValueError(f"weights {tuple(weights)}: the weight of D must be > 0")
    v = oracle_variance(problem, oracle, domain=domain, num_points=num_points, key=key,
                        num_samples=num_samples, method=method)
    c, d = _abc_rule(v.variance, v.gap, C, w)
    if v.exact:
        cu, du = c, d
    else:
        cu, du = _abc_rule(v.variance + Z95 * v.stderr, v.gap, C, w)
    return ABCConstants(c, d, cu, du, v.exact, float(np.max(v.stderr)), int(v.points.shape[0]))


class ABCSlack(NamedTuple):
    """Whether given (C, D) satisfy (4) on a domain.

    Attributes:
      min_slack: min over points and clients of C (f_i - f_i*) + D - var_i (>= 0: holds).
      min_slack_upper95: the same with var + 1.96 standard errors (equal when exact).
      argmin_point, argmin_client: where the minimum is attained.
      holds: ``min_slack >= -1e-10 * max(1, max variance)``.
      exact: whether the variance was exact.
    """

    min_slack: float
    min_slack_upper95: float
    argmin_point: np.ndarray
    argmin_client: int
    holds: bool
    exact: bool


def abc_slack(problem: Problem, C: float, D: float, oracle: Optional[AbstractOracle] = None, *,
              domain=None, num_points: int = 2001, key: Optional[jax.Array] = None,
              num_samples: int = 4096, method: str = "auto") -> ABCSlack:
    """The worst slack of the ABC bound C (f_i(x) - f_i*) + D - E||g_i - grad f_i||^2.

    Args:
      problem: a :class:`~fedjax_abc.Problem`.
      C, D: the constants to check (>= 0).
      oracle, domain, num_points, key, num_samples, method: as in :func:`oracle_variance`.

    Returns:
      An :class:`ABCSlack`.

    Example:
      >>> import fedjax_abc as fa
      >>> fa.theory.abc_slack(fa.problems.softplus_huber(), 1.0, 0.5, domain=(-50.0, 50.0)).holds
      True

    Reference: eq. (4) / (8).
    """
    C, D = check_nonneg("C", C), check_nonneg("D", D)
    v = oracle_variance(problem, oracle, domain=domain, num_points=num_points, key=key,
                        num_samples=num_samples, method=method)
    slack = C * v.gap + D - v.variance
    k, i = np.unravel_index(int(np.argmin(slack)), slack.shape)
    upper = float(np.min(slack - Z95 * v.stderr))
    tol = 1e-10 * max(1.0, float(np.max(v.variance)))
    return ABCSlack(float(slack[k, i]), upper, v.points[k].copy(), int(i),
                    bool(slack[k, i] >= -tol), v.exact)


class RelaxedGrowth(NamedTuple):
    """The smallest sigma^2 for which (2) holds on a domain, for a given eta^2.

    Attributes:
      sigma_sq: max(0, max_{i,x} var_i(x) - eta^2 ||grad f_i(x)||^2).
      eta_sq: the eta^2 used.
      argmax_point, argmax_client: where the maximum is attained.
      exact: whether the variance was exact.
    """

    sigma_sq: float
    eta_sq: float
    argmax_point: np.ndarray
    argmax_client: int
    exact: bool


def relaxed_growth_sigma_sq(problem: Problem, eta_sq: float, domain, num_points: int = 2001, *,
                            oracle: Optional[AbstractOracle] = None,
                            key: Optional[jax.Array] = None, num_samples: int = 4096,
                            method: str = "auto") -> RelaxedGrowth:
    """The smallest sigma^2 with E||g_i - grad f_i||^2 <= sigma^2 + eta^2 ||grad f_i||^2 (eq. 2).

    The condition is imposed at every point of the domain and for every client.

    For oracle (26) the Huber client has variance |x| and ||grad f_1|| <= 1, so on [-R, R]
    sigma^2 >= R - eta^2 for every eta: it grows without bound with the domain, which is why
    (2) fails there while the ABC condition holds.

    Args:
      problem: a :class:`~fedjax_abc.Problem`.
      eta_sq: eta^2 >= 0.
      domain: (lo, hi) for a 1-D problem, or explicit points of shape (K, d).
      num_points: grid size K for an interval.
      oracle, key, num_samples, method: as in :func:`oracle_variance`.

    Returns:
      A :class:`RelaxedGrowth`.

    Example:
      >>> import fedjax_abc as fa
      >>> p = fa.problems.softplus_huber()
      >>> [round(fa.theory.relaxed_growth_sigma_sq(p, 1.0, (-R, R), 201).sigma_sq, 3)
      ...  for R in (10.0, 100.0)]
      [9.0, 99.0]

    Reference: eq. (2); Section IV-A ("the relaxed growth condition fails").
    """
    eta_sq = check_nonneg("eta_sq", eta_sq)
    v = oracle_variance(problem, oracle, domain=domain, num_points=num_points, key=key,
                        num_samples=num_samples, method=method)
    excess = v.variance - eta_sq * v.grad_norm_sq
    k, i = np.unravel_index(int(np.argmax(excess)), excess.shape)
    return RelaxedGrowth(max(0.0, float(excess[k, i])), eta_sq, v.points[k].copy(), int(i),
                         v.exact)
