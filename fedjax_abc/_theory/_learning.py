"""The paper's constants on learning problems: L (Assumption 1) and points from a run.

- :func:`smoothness_bound`: L_i in closed form for softmax and logistic regression,
  w_i (c lambda_max(X~_i^T X~_i) / m_i + l2) with X~ = [X, 1], c = 1/2 (softmax: the
  Hessian of the cross-entropy in the logits, diag(p) - p p^T, has eigenvalues <= 1/2) or
  1/4 (logistic: sigma (1 - sigma) <= 1/4). An upper bound on the smoothness of every f_i
  everywhere.
- :func:`smoothness_estimate`: the largest |eigenvalue| of the Hessian of each f_i at given
  points, by power iteration on Hessian-vector products (any model, the MLP included): a
  lower estimate of L (the sup over all x is not searched).
- :func:`run_points`: a run's iterates at fractions of its horizon (start, middle, end),
  for ``lemma_diagnostics``;
- :func:`trajectory_points`: points x_t of a :class:`~fedjax_abc.SimResult`, for
  ``abc_constants(problem, oracle, domain=points)`` (the ABC constants along the run's
  trajectories) and for :func:`smoothness_estimate`.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_abc._problems._models import AbstractModel, ClientData, model_of
from fedjax_abc._problems._problem import Problem
from fedjax_abc._theory._grid import as_points, check_int, point_batch

__all__ = ["Smoothness", "run_points", "smoothness_bound", "smoothness_estimate", "trajectory_points"]


class Smoothness(NamedTuple):
    """Smoothness constants of the clients' f_i.

    Attributes:
      L: max_i L_i, the L of Assumption 1.
      per_client: L_i, shape (n,).
      method: "closed-form bound" or "power iteration at K points".
    """

    L: float
    per_client: np.ndarray
    method: str


def smoothness_bound(problem: Problem) -> Smoothness:
    """L_i = w_i (c lambda_max(X~_i^T X~_i / m_i) + l2), c = 1/2 (softmax) or 1/4 (logistic).

    Args:
      problem: a softmax or logistic regression problem (``fedjax_abc.problems``).

    Returns:
      A :class:`Smoothness` (an upper bound, valid at every x).

    Example:
      >>> import numpy as np, fedjax_abc as fa
      >>> X = [np.array([[1.0], [0.0]]), np.array([[2.0], [2.0]])]
      >>> p = fa.problems.logistic_regression(X, [np.array([0, 1]), np.array([1, 0])], l2=0.1)
      >>> [round(float(v), 4) for v in fa.theory.smoothness_bound(p).per_client]  # eig/4 + 0.1
      [0.4273, 1.35]
    """
    data = problem.params
    model = model_of(problem.loss)
    c = model.curvature if isinstance(model, AbstractModel) else None
    if not isinstance(data, ClientData) or c is None:
        raise ValueError("smoothness_bound needs a model whose loss curvature is bounded from "
                         "the data (softmax or logistic regression); use smoothness_estimate "
                         "for other models")
    X = np.asarray(data.features, np.float64)
    counts = np.asarray(data.count)
    Ls = []
    for i in range(X.shape[0]):
        Xt = np.concatenate([X[i, : counts[i]], np.ones((counts[i], 1))], axis=1)
        top = np.linalg.eigvalsh(Xt.T @ Xt / counts[i])[-1]
        Ls.append(float(data.weight[i]) * (c * top + float(data.l2[i])))
    Ls = np.array(Ls)
    return Smoothness(float(Ls.max()), Ls, "closed-form bound")


@eqx.filter_jit
def _power(problem, points, v0, iterations, batch):
    n = problem.num_clients

    def at(x):
        def client(i, v):
            c = problem.client(i)

            def hvp(u):
                return jax.jvp(lambda z: problem.local_grad(c, z), (x,), (u,))[1]

            def step(u, _):
                hu = hvp(u)
                return hu / jnp.maximum(jnp.linalg.norm(hu), 1e-300), None

            u, _ = jax.lax.scan(step, v / jnp.linalg.norm(v), None, length=iterations)
            return jnp.linalg.norm(hvp(u))  # |lambda| of the dominant eigenvector

        return jax.vmap(client)(jnp.arange(n, dtype=jnp.int32), v0)

    return jax.lax.map(at, points, batch_size=batch)


def smoothness_estimate(problem: Problem, points, *, iterations: int = 50,
                        key: Optional[jax.Array] = None) -> Smoothness:
    """max over the points of |lambda|_max(Hess f_i(x)) for every client, by power iteration.

    Args:
      problem: any problem whose loss JAX can differentiate twice.
      points: (K, d) points (e.g. :func:`trajectory_points`).
      iterations: power iterations per point and client.
      key: draws the starting vectors (default ``jax.random.key(0)``).

    Returns:
      A :class:`Smoothness`: a lower estimate of each L_i (the Hessian is examined at the
      points only, and power iteration approaches the top eigenvalue from below).

    Example:
      >>> import jax, jax.numpy as jnp, fedjax_abc as fa
      >>> p = fa.problems.quadratics(jax.random.key(0), n=2, d=3)
      >>> s = fa.theory.smoothness_estimate(p, jnp.zeros((1, 3)))
      >>> bool(abs(s.L - float(jnp.max(p.params[0]))) < 1e-6)
      True
    """
    points = as_points(points, 2, problem.dim)
    iterations = check_int("iterations", iterations)
    key = jax.random.key(0) if key is None else key
    v0 = jax.random.normal(key, (problem.num_clients, problem.dim), jnp.float64)
    batch = max(1, point_batch(problem) // 8)
    lam = _power(problem.astype(jnp.float64), jnp.asarray(points, jnp.float64), v0, iterations,
                 batch)
    per = np.asarray(lam, np.float64).max(axis=0)
    return Smoothness(float(per.max()), per, f"power iteration at {points.shape[0]} points")


def trajectory_points(result, num_points: int = 64, *, skip_first: bool = False) -> np.ndarray:
    """Up to ``num_points`` iterates x_t of a run, spread evenly over its trials and records.

    Args:
      result: a :class:`~fedjax_abc.SimResult` with ``x`` recorded (``record_x=True``).
      num_points: how many points at most.
      skip_first: leave out the records at t = 0 (x_0, the same for every trial).

    Returns:
      (K, d) float64 points, K <= num_points, distinct rows in (trial, record) order.
    """
    if result.x is None:
        raise ValueError("the run kept no iterates: simulate with record_x=True")
    xs = np.asarray(result.x, np.float64)
    if skip_first:
        xs = xs[:, 1:]
    flat = xs.reshape(-1, xs.shape[-1])
    num_points = check_int("num_points", num_points)
    take = np.unique(np.linspace(0, flat.shape[0] - 1, min(num_points, flat.shape[0])).astype(int))
    return flat[take]


def run_points(result, fractions=(0.0, 0.5, 1.0), trials=(0,)) -> tuple[np.ndarray, np.ndarray]:
    """Recorded iterates x_t of a run, at fractions of its horizon, for :func:`lemma_diagnostics`.

    Args:
      result: a :class:`~fedjax_abc.SimResult` with ``x`` recorded (``record_x=True``).
      fractions: where in [0, 1] along the recorded rounds (0: x_0, 1: the last record);
        each goes to the nearest record.
      trials: which trials.

    Returns:
      (points, rounds): points of shape (len(trials) * len(fractions), d) in (trial,
      fraction) order, and the round t of each, shape (K,).

    Example:
      >>> import jax, fedjax_abc as fa
      >>> p = fa.problems.huber_offsets(offsets=[0.0, 4.0])
      >>> res = fa.simulate(p, num_sampled=1, local_steps=2, stepsize=0.1, rounds=10, x0=[6.0],
      ...                   key=jax.random.key(0))
      >>> pts, t = fa.theory.run_points(res)
      >>> pts.shape, t.tolist()
      ((3, 1), [0, 5, 10])
    """
    if result.x is None:
        raise ValueError("the run kept no iterates: simulate with record_x=True")
    xs = np.asarray(result.x, np.float64)  # (R, records, d)
    fr = np.asarray(fractions, np.float64).ravel()
    if fr.size == 0 or np.any((fr < 0) | (fr > 1)):
        raise ValueError(f"fractions must lie in [0, 1], got {list(fr)}")
    tr = [check_int("trial", t, 0, xs.shape[0] - 1)
          for t in trials]
    idx = np.rint(fr * (xs.shape[1] - 1)).astype(int)
    rounds = np.asarray(result.rounds)[idx]
    return xs[tr][:, idx].reshape(-1, xs.shape[-1]), np.tile(rounds, len(tr))

