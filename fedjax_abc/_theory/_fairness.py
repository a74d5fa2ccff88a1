"""Fixed points of fair and personalised algorithms on quadratic clients, in closed form.

Every function here takes clients f_i(x) = a_i/2 ||x - b_i||^2 (a_i > 0, b_i in R^d; a_i
may also be a vector of per-coordinate curvatures where the coordinates separate), exact
gradients and full participation. The common brick is one client's Q local steps of
stepsize alpha from x, which contract towards b_i coordinate by coordinate:

    y_i - b_i = (1 - alpha a_i)^Q (x - b_i),   so   x - y_i = c_i (x - b_i),
    c_i = 1 - (1 - alpha a_i)^Q                                           (local map)

(c_i = alpha a_i for Q = 1: the update is alpha grad f_i(x)). The fixed points follow from
setting the server's update to zero; each is derived in its docstring. FedAvg's own,
sum_i c_i b_i / sum_i c_i, is :func:`fedjax_abc.theory.fedavg_fixed_point`.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import numpy as np

from fedjax_abc._theory._grid import check_int, check_nonneg, check_positive
from fedjax_abc._theory._personal import fedavg_fixed_point

__all__ = ["AFLMinimax", "IFCAFixedPoint", "afl_minimax", "body_head_fixed_point",
           "ifca_fixed_point", "qffl_two_clients"]


def _clients(a, b, n: Optional[int] = None) -> tuple[np.ndarray, np.ndarray]:
    """a (n,) or (n, d) > 0 and b (n, d) (a 1-D b is (n, 1)) as float arrays."""
    try:
        a = np.asarray(a, np.float64)
        b = np.asarray(b, np.float64)
    except (TypeError, ValueError):
        raise ValueError("a and b must be arrays of numbers") from None
    if b.ndim == 1:
        b = b[:, None]
    if b.ndim != 2 or b.shape[0] < 1:
        raise ValueError(f"b must have shape (n,) or (n, d), got {b.shape}")
    if a.shape not in ((b.shape[0],), b.shape):
        raise ValueError(f"a must have shape (n={b.shape[0]},) or b's {b.shape}, got {a.shape}")
    if n is not None and b.shape[0] != n:
        raise ValueError(f"these closed forms are for n={n} clients, got {b.shape[0]}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("a and b must be finite")
    if not np.all(a > 0):
        raise ValueError(f"every curvature a_i must be > 0, got min {a.min():g}")
    return a, b


def _contraction(a, local_steps: int, stepsize: Optional[float]) -> np.ndarray:
    """c_i = 1 - (1 - alpha a_i)^Q, the share of x - b_i that Q local steps remove; with
    ``stepsize=None`` (Q = 1 only) c_i = a_i, the common factor alpha left out (it cancels
    in every ratio below)."""
    Q = check_int("local_steps (Q)", local_steps, 1)
    if stepsize is None:
        if Q != 1:
            raise ValueError("give the stepsize (alpha) for Q > 1 local steps")
        return a
    return 1 - (1 - check_positive("stepsize (alpha)", stepsize) * a) ** Q


def _segment_point(b: np.ndarray, ratio: float) -> np.ndarray:
    """The point w = b_1 + s (b_2 - b_1) with (w - b_1) / (b_2 - w) = ratio, s = ratio /
    (1 + ratio) (ratio = inf: b_2)."""
    s = 1.0 if math.isinf(ratio) else ratio / (1 + ratio)
    return b[0] + s * (b[1] - b[0])


def qffl_two_clients(a, b, q, *, local_steps: int = 1,
                     stepsize: Optional[float] = None) -> np.ndarray:
    """q-FFL's fixed point for two clients f_i = a_i/2 ||x - b_i||^2 (a_i scalars).

    q-FedAvg (Algorithm 3 of Li et al., ICLR 2020) stops where the sum of the clients'
    Delta_k = L F_k(w)^q (w - w_bar_k) vanishes, i.e. sum_k F_k(w)^q c_k (w - b_k) = 0 (the
    local map of the module's docstring; with Q = 1, sum_k F_k^q grad F_k = 0, the
    stationary point of sum_k F_k^(q+1) / (q + 1)). The two vectors w - b_1 and w - b_2
    cancel with positive weights only on the segment between b_1 and b_2: w = b_1 + s D,
    D = b_2 - b_1, ||w - b_1|| = s ||D||, ||w - b_2|| = (1 - s) ||D||, and

        (a_1/2)^q s^(2q) c_1 s = (a_2/2)^q (1 - s)^(2q) c_2 (1 - s)
        =>  (w - b_1) / (b_2 - w) = s / (1 - s) = (a_2^q c_2 / (a_1^q c_1))^(1 / (2q + 1)).

    With Q = 1 (c_k proportional to a_k) the ratio is (a_2 / a_1)^((q + 1) / (2q + 1)):
    q = 0 gives a_2 / a_1, the minimiser of f_1 + f_2 (FedAvg's point); q -> infinity gives
    sqrt(a_2 / a_1), where F_1 = F_2: AFL's minimax point (:func:`afl_minimax`), for any Q
    (the exponent 1 / (2q + 1) removes c_2 / c_1 in the limit).

    Args:
      a: (a_1, a_2) > 0. b: (b_1, b_2), shape (2,) or (2, d).
      q: q >= 0, or ``math.inf`` for the limit.
      local_steps, stepsize: Q and alpha (see the module's docstring).

    Returns:
      w*, shape (d,).

    Example:
      >>> import fedjax_abc as fa
      >>> fa.theory.qffl_two_clients([1.0, 4.0], [0.0, 3.0], q=0.0).round(12)  # ratio 4
      array([2.4])
      >>> fa.theory.qffl_two_clients([1.0, 4.0], [0.0, 3.0], q=float("inf")).round(12)  # ratio 2
      array([2.])
    """
    a, b = _clients(a, b, 2)
    if a.ndim != 1:
        raise ValueError("qffl_two_clients needs scalar curvatures a_i (isotropic clients)")
    q = float(q) if isinstance(q, float) and math.isinf(q) and q > 0 else \
        check_nonneg("q", q)
    if math.isinf(q):
        ratio = math.sqrt(a[1] / a[0])
    else:
        c = _contraction(a, local_steps, stepsize)
        if not np.all(c > 0):
            raise ValueError("the local steps must move towards b_i (1 - (1 - alpha a_i)^Q > 0)")
        # in logs: (q log(a_2 / a_1) + log(c_2 / c_1)) / (2q + 1)
        ratio = math.exp((q * math.log(a[1] / a[0]) + math.log(c[1] / c[0])) / (2 * q + 1))
    return _segment_point(b, ratio)


class AFLMinimax(NamedTuple):
    """AFL's minimax point of two clients.

    Attributes:
      x: the minimax model, shape (d,).
      weights: lambda* (2,), the mixture weights at the saddle point (of the local-steps
        update given, see :func:`afl_minimax`).
      value: max_i f_i(x), the minimax value.
      interior: True where both clients are active (f_1(x) = f_2(x)); False where the
        minimax point is one client's minimiser.
    """

    x: np.ndarray
    weights: np.ndarray
    value: float
    interior: bool


def afl_minimax(a, b, floors=None, *, local_steps: int = 1,
                stepsize: Optional[float] = None) -> AFLMinimax:
    """AFL's minimax point min_x max_lambda sum_i lambda_i f_i(x) for two clients
    f_i(x) = a_i/2 ||x - b_i||^2 + e_i (a_i scalars, e_i = ``floors``, default 0).

    max over the simplex of sum_i lambda_i f_i(x) is max_i f_i(x) (Mohri, Sivek and Suresh,
    ICML 2019). Its minimiser x* has 0 in the convex hull of the gradients of the
    active losses: lambda_1 a_1 (x - b_1) + lambda_2 a_2 (x - b_2) = 0, so x* lies on the
    segment, x* = b_1 + s D, D = b_2 - b_1. Two cases:

    - one client's minimiser: if e_1 >= f_2(b_1) = a_2/2 ||D||^2 + e_2, client 1's own
      minimiser b_1 has the larger loss and is the minimax point (lambda* = (1, 0)); the
      same with the roles swapped. This happens only with floors: for pure quadratics
      (e_i = 0, b_1 != b_2) f_2(b_1) > 0 = f_1(b_1) and the point is interior.
    - interior: f_1(x*) = f_2(x*): a_1 s^2 - a_2 (1 - s)^2 = r, r = 2 (e_2 - e_1) / ||D||^2,
      whose root in (0, 1) is s = (a_2 + r) / (a_2 + sqrt(a_2^2 + (a_1 - a_2)(a_2 + r)))
      (for r = 0: (x* - b_1) / (b_2 - x*) = sqrt(a_2 / a_1), q-FFL's limit q -> infinity).

    lambda*: the server's step of :class:`~fedjax_abc.algorithms.AFL` stops where
    sum_i lambda_i c_i (x - b_i) = 0 (the local map of the module's docstring), so
    lambda*_1 c_1 s = lambda*_2 c_2 (1 - s): lambda*_1 = c_2 (1 - s) / (c_1 s + c_2 (1 - s)),
    with c_i proportional to a_i for Q = 1 (the saddle point of the paper's gradient
    version). x* does not depend on the local steps; lambda* does.

    Args:
      a: (a_1, a_2) > 0. b: (b_1, b_2), shape (2,) or (2, d). floors: (e_1, e_2), default 0.
      local_steps, stepsize: Q and alpha of AFL's local steps (see
        the module's docstring); they set lambda* only.

    Returns:
      :class:`AFLMinimax`.

    Example:
      >>> import fedjax_abc as fa
      >>> m = fa.theory.afl_minimax([1.0, 4.0], [0.0, 3.0])
      >>> m.x.tolist(), m.weights.round(6).tolist(), m.value, m.interior  # f_1 = f_2 = 2
      ([2.0], [0.666667, 0.333333], 2.0, True)
      >>> fa.theory.afl_minimax([1.0, 1.0], [0.0, 1.0], floors=[1.0, 0.0]).x.tolist()
      [0.0]
    """
    a, b = _clients(a, b, 2)
    if a.ndim != 1:
        raise ValueError("afl_minimax needs scalar curvatures a_i (isotropic clients)")
    e = np.zeros(2) if floors is None else np.asarray(floors, np.float64)
    if e.shape != (2,) or not np.all(np.isfinite(e)):
        raise ValueError(f"floors must be two finite numbers (e_1, e_2), got {e!r}")
    c = _contraction(a, local_steps, stepsize)
    D2 = float(np.sum((b[1] - b[0]) ** 2))
    cross = (e[0] - a[1] / 2 * D2 - e[1], e[1] - a[0] / 2 * D2 - e[0])  # e_1 - f_2(b_1), ...
    if cross[0] >= 0:
        return AFLMinimax(b[0].copy(), np.array([1.0, 0.0]), float(e[0]), False)
    if cross[1] >= 0:
        return AFLMinimax(b[1].copy(), np.array([0.0, 1.0]), float(e[1]), False)
    r = 2 * (e[1] - e[0]) / D2
    s = (a[1] + r) / (a[1] + math.sqrt(a[1] ** 2 + (a[0] - a[1]) * (a[1] + r)))
    x = b[0] + s * (b[1] - b[0])
    lam1 = c[1] * (1 - s) / (c[0] * s + c[1] * (1 - s))
    value = float(a[0] / 2 * s * s * D2 + e[0])
    return AFLMinimax(x, np.array([lam1, 1 - lam1]), value, True)


class IFCAFixedPoint(NamedTuple):
    """IFCA's fixed point for a given assignment of the clients to the clusters.

    Attributes:
      models: (k, d), each cluster's FedAvg fixed point over its members (NaN for a
        cluster without members).
      clusters: (n,), the assignment given.
      consistent: whether every client's lowest-loss cluster at these models is its own
        (ties to the lowest index, as :class:`~fedjax_abc.algorithms.IFCA` breaks them): only
        then is the assignment a fixed point of IFCA.
    """

    models: np.ndarray
    clusters: np.ndarray
    consistent: bool


def ifca_fixed_point(a, b, clusters, k: Optional[int] = None, *, stepsize: float,
                     local_steps: int = 1) -> IFCAFixedPoint:
    """IFCA's fixed point (Ghosh et al., NeurIPS 2020, Algorithm 2 with model averaging)
    where client i stays in cluster ``clusters[i]``.

    While the assignment does not change, each cluster model is FedAvg over the cluster's
    members, theta_j <- mean_{i in j} y_i, whose fixed point is
    theta_j* = sum_{i in j} c_i b_i / sum_{i in j} c_i, c_i = 1 - (1 - alpha a_i)^Q
    (:func:`fedjax_abc.theory.fedavg_fixed_point` of the members). The assignment stays
    where each client's loss is lowest at its own cluster's model,
    f_i(theta*_{clusters[i]}) < f_i(theta*_j) for j != clusters[i]: true of well-separated
    clusters (members' centres close together, far from the other clusters'), which
    ``consistent`` checks.

    Args:
      a, b: the clients' curvatures (n,) or (n, d) and centres (n, d).
      clusters: (n,) integers in [0, k).
      k: the number of clusters (default: max(clusters) + 1).
      stepsize, local_steps: alpha and Q of the local steps.

    Returns:
      :class:`IFCAFixedPoint`.

    Example:
      >>> import fedjax_abc as fa
      >>> fp = fa.theory.ifca_fixed_point([1.0, 1.0, 2.0], [[-5.0], [-3.0], [4.0]], [0, 0, 1],
      ...                                 stepsize=0.1)
      >>> fp.models.tolist(), fp.consistent
      ([[-4.0], [4.0]], True)
    """
    a, b = _clients(a, b)
    n, d = b.shape
    z = np.asarray(clusters)
    if z.shape != (n,) or not np.issubdtype(z.dtype, np.integer):
        raise ValueError(f"clusters must be n={n} integers, got {z!r}")
    k = int(z.max()) + 1 if k is None else check_int("k (clusters)", k, 1)
    if z.min() < 0 or z.max() >= k:
        raise ValueError(f"clusters must be in [0, k={k})")
    models = np.full((k, d), np.nan)
    for j in range(k):
        members = z == j
        if members.any():
            models[j] = fedavg_fixed_point(a[members], b[members], stepsize=stepsize,
                                           local_steps=local_steps)
    aa = a[:, None] if a.ndim == 1 else a
    losses = np.array([[np.sum(aa[i] / 2 * (m - b[i]) ** 2) if np.all(np.isfinite(m))
                        else np.inf for m in models] for i in range(n)])
    return IFCAFixedPoint(models, z.copy(), bool(np.all(np.argmin(losses, axis=1) == z)))


def body_head_fixed_point(a, b, head, *, stepsize: float, body_steps: int) -> np.ndarray:
    """The clients' own models at FedRep's and FedPer's fixed point: (n, d).

    For f_i(x) = a_i/2 ||x - b_i||^2 the coordinates separate, so a client's head
    coordinates and the shared body evolve independently. Client i's head takes its head
    steps on f_i alone from its previous value and contracts towards b_i's head, every
    round (with at least one head step and 0 < alpha a_i < 2): at the fixed point it is
    b_i's head. The body takes ``body_steps`` local steps from the server's body and is
    averaged: FedAvg on the body coordinates, whose fixed point is sum_i c_i b_i / sum_i c_i
    with c_i = 1 - (1 - alpha a_i)^body_steps (:func:`fedjax_abc.theory.fedavg_fixed_point`).
    FedPer trains both in each of its Q steps (body_steps = Q); FedRep takes tau_h head
    steps first, then body_steps = Q - tau_h.

    Args:
      a, b: the clients' curvatures (n,) or (n, d) and centres (n, d).
      head: (d,) booleans, True on the personal coordinates.
      stepsize: alpha.
      body_steps: the local steps that train the body (Q for FedPer, Q - tau_h for FedRep).

    Returns:
      Float[ndarray, "n d"]: client i's model, (b_i on the head, x*_body on the body).

    Example:
      >>> import fedjax_abc as fa
      >>> fa.theory.body_head_fixed_point([1.0, 3.0], [[0.0, 1.0], [4.0, 2.0]],
      ...                                 [False, True], stepsize=0.1, body_steps=1).round(12)
      array([[3., 1.],
             [3., 2.]])
    """
    a, b = _clients(a, b)
    h = np.asarray(head)
    if h.shape != (b.shape[1],) or h.dtype != np.bool_:
        raise ValueError(f"head must be d={b.shape[1]} booleans, got {h!r}")
    body = fedavg_fixed_point(a, b, stepsize=stepsize, local_steps=body_steps)
    return np.where(h[None, :], b, body[None, :])
