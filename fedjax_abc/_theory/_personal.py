"""Closed-form fixed points of personalised federated algorithms on quadratic clients.

The clients are f_i(x) = (a_i/2) ||x - b_i||^2, i = 1, ..., n, in R^d (a_i > 0; a_i may
also be a vector of d curvatures, f_i(x) = (1/2) sum_j a_ij (x_j - b_ij)^2, as
:func:`fedjax_abc.problems.quadratics` draws them: every formula below then holds
coordinate by coordinate). The runs take exact gradients, every client takes part in
every round with weight 1, the stepsize eta is constant and each round has Q local steps.

Every method's local step is then affine, and for all but APFL's personal part it is a
gradient step on a quadratic with the client's own centre b_i and an *effective
curvature* c_i:

    y <- y - eta c_i (y - b_i),   so after Q steps   y^Q - b_i = (1 - eta c_i)^Q (x_t - b_i).

The server's mean of the y_i^Q is again affine in x_t; its fixed point x = mean_i y_i^Q is

    x* = sum_i e_i b_i / sum_i e_i,    e_i = 1 - (1 - eta c_i)^Q

(:func:`quadratic_fixed_point`; a server step x + beta (mean - x), beta > 0, has the same
one). It attracts when every |1 - eta c_i| < 1 (the round's map then contracts by
mean_i (1 - e_i) < 1). The effective curvatures:

- FedAvg: c_i = a_i (:func:`fedavg_fixed_point`); Q = 1 gives x* = sum a_i b_i / sum a_i,
  the minimiser of f; Q > 1 weighs client i by 1 - (1 - eta a_i)^Q instead.
- pFedMe: c_i = a_i lam (1 - rho_i^K) / (a_i + lam) (:func:`pfedme_curvature`), the Moreau
  envelope's a_i lam / (a_i + lam) (:func:`moreau_curvature`) as K -> infinity.
- Per-FedAvg: c_i = a_i (1 - alpha a_i)^2 (HF) or a_i (1 - alpha a_i) (FO)
  (:func:`perfedavg_curvature`).

The personal models follow from the server's: Ditto's v_i* (:func:`ditto_personal`),
pFedMe's theta_i(x*) (:func:`pfedme_personal`), Per-FedAvg's one step from x*
(:func:`perfedavg_personal`), APFL's mixture (:func:`apfl_personal`), fine-tuning's K
steps (:func:`fine_tuned_personal`); each ``*_fixed_point`` gives a :class:`PersonalFixedPoint`.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from fedjax_abc._theory._grid import check_int, check_nonneg, check_positive

__all__ = [
    "PersonalFixedPoint",
    "apfl_fixed_point",
    "apfl_personal",
    "ditto_fixed_point",
    "ditto_personal",
    "fedavg_fixed_point",
    "fine_tuned_personal",
    "moreau_curvature",
    "perfedavg_curvature",
    "perfedavg_first_order_bias",
    "perfedavg_fixed_point",
    "perfedavg_personal",
    "pfedme_curvature",
    "pfedme_fixed_point",
    "pfedme_personal",
    "quadratic_fixed_point",
]


class PersonalFixedPoint(NamedTuple):
    """A personalised algorithm's fixed point on quadratic clients.

    Attributes:
      x: the server's model, shape (d,).
      personal: every client's personal model (what ``algorithm.personal`` returns, what
        ``SimResult.client_x`` records), shape (n, d).
      client: every client's state where it differs from ``personal`` (APFL's v_i), shape
        (n, d); None otherwise.
    """

    x: np.ndarray
    personal: np.ndarray
    client: Optional[np.ndarray] = None


# ------------------------------------------------------------------------------- checks


def _quadratics(a, b) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) as float64 arrays of shape (n, d): a (n,) broadcast over the coordinates."""
    b = np.asarray(b, dtype=np.float64)
    if b.ndim != 2 or b.shape[0] < 1 or b.shape[1] < 1:
        raise ValueError(f"b (the centres b_i) must have shape (n, d), got {b.shape}")
    a = np.asarray(a, dtype=np.float64)
    if a.shape == b.shape[:1]:
        a = a[:, None]
    if a.shape not in (b.shape, (b.shape[0], 1)):
        raise ValueError(f"a (the curvatures a_i) must have shape (n,) or (n, d) = "
                         f"{b.shape}, got {a.shape}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("a and b must be finite")
    if not np.all(a > 0):
        raise ValueError(f"every curvature a_i must be > 0, got min {a.min():g}")
    return np.broadcast_to(a, b.shape), b


def _curvatures(a) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    if not (np.all(np.isfinite(a)) and np.all(a > 0)):
        raise ValueError("every curvature a_i must be finite and > 0")
    return a


def _model(name: str, w, d: int) -> np.ndarray:
    w = np.asarray(w, dtype=np.float64)
    if w.shape != (d,) or not np.all(np.isfinite(w)):
        raise ValueError(f"{name} must be a finite vector of shape (d,) = ({d},), got {w.shape}")
    return w


# ------------------------------------------------------------------- the server's point


def quadratic_fixed_point(c, b, stepsize, local_steps) -> np.ndarray:
    """x* = sum_i e_i b_i / sum_i e_i, e_i = 1 - (1 - eta c_i)^Q: the fixed point of Q local
    gradient steps of size eta on the quadratics (c_i/2) ||x - b_i||^2 with the mean of the
    clients' y_i^Q as the next model (the module's docstring).

    Derivation: y_i^Q - b_i = (1 - eta c_i)^Q (x - b_i), so x = mean_i y_i^Q reads
    sum_i (1 - (1 - eta c_i)^Q) (x - b_i) = 0. Where the e_i sum to 0 (e.g. every
    eta c_i = 0) no point is singled out: a ValueError.

    Args:
      c: the effective curvatures c_i, shape (n,) or (n, d) (any sign).
      b: the centres b_i, shape (n, d).
      stepsize: eta > 0.
      local_steps: Q >= 1.

    Returns:
      x*, shape (d,).

    Example:
      >>> import fedjax_abc as fa
      >>> fa.theory.quadratic_fixed_point([1.0, 3.0], [[0.0], [1.0]], 0.5, local_steps=1)
      array([0.75])
    """
    b = np.asarray(b, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    if b.ndim != 2:
        raise ValueError(f"b (the centres b_i) must have shape (n, d), got {b.shape}")
    c = np.broadcast_to(c[:, None] if c.shape == b.shape[:1] else c, b.shape)
    eta = check_positive("stepsize (eta)", stepsize)
    e = 1 - (1 - eta * c) ** check_int("local_steps (Q)", local_steps, 1)
    total = e.sum(axis=0)
    if np.any(total == 0):
        raise ValueError("the weights 1 - (1 - eta c_i)^Q sum to 0: no fixed point is singled out")
    return (e * b).sum(axis=0) / total


def fedavg_fixed_point(a, b, stepsize, local_steps) -> np.ndarray:
    """FedAvg's fixed point with Q local steps: :func:`quadratic_fixed_point` with c_i = a_i,

        w* = sum_i (1 - (1 - eta a_i)^Q) b_i / sum_i (1 - (1 - eta a_i)^Q),

    the minimiser sum a_i b_i / sum a_i of f when Q = 1 (or every a_i equal), another point
    otherwise (client drift). Ditto's, APFL's and fine-tuning's global models are FedAvg's.

    Example:
      >>> import fedjax_abc as fa
      >>> fa.theory.fedavg_fixed_point([1.0, 3.0], [[0.0], [1.0]], 0.25, local_steps=2).round(6)
      array([0.681818])
    """
    a, b = _quadratics(a, b)
    return quadratic_fixed_point(a, b, stepsize, local_steps)


# ------------------------------------------------------------------------------- Ditto


def ditto_personal(a, b, lam, w) -> np.ndarray:
    """Ditto's personal models v_i* = (a_i b_i + lam w) / (a_i + lam), shape (n, d).

    Derivation: client i's personal steps are gradient steps on h_i(v) = f_i(v) +
    (lam/2) ||v - w||^2 (Ditto's eq. (2)), whose minimiser solves a_i (v - b_i) +
    lam (v - w) = 0; with the global model at its fixed point w (FedAvg's), every round's
    steps contract towards it by (1 - eta (a_i + lam))^Q, so v_i converges to it whatever Q.

    Args:
      a, b: the clients' curvatures (n,) or (n, d) and centres (n, d).
      lam: lambda >= 0.
      w: the global model, shape (d,).

    Example:
      >>> import fedjax_abc as fa
      >>> fa.theory.ditto_personal([1.0, 3.0], [[0.0], [1.0]], lam=1.0, w=[0.5])
      array([[0.25 ],
             [0.875]])
    """
    a, b = _quadratics(a, b)
    lam = check_nonneg("lam", lam)
    w = _model("w", w, b.shape[1])
    return (a * b + lam * w) / (a + lam)


def ditto_fixed_point(a, b, lam, stepsize, local_steps) -> PersonalFixedPoint:
    """Ditto's fixed point: FedAvg's w* (:func:`fedavg_fixed_point`) and
    v_i* = (a_i b_i + lam w*) / (a_i + lam) (:func:`ditto_personal`)."""
    w = fedavg_fixed_point(a, b, stepsize, local_steps)
    return PersonalFixedPoint(w, ditto_personal(a, b, lam, w))


# ------------------------------------------------------------------------------ pFedMe


def moreau_curvature(a, lam) -> np.ndarray:
    """The curvature a_i lam / (a_i + lam) of the Moreau envelope of f_i with weight lam.

    F_i(w) = min_theta f_i(theta) + (lam/2) ||theta - w||^2 is attained at theta = (a_i b_i
    + lam w) / (a_i + lam), where F_i(w) = (1/2) (a_i lam / (a_i + lam)) ||w - b_i||^2: pFedMe
    with an exact inner solution (K -> infinity) runs FedAvg on these envelopes.

    Example:
      >>> import fedjax_abc as fa
      >>> fa.theory.moreau_curvature([1.0, 3.0], 1.0)
      array([0.5 , 0.75])
    """
    a, lam = _curvatures(a), check_positive("lam", lam)
    return a * lam / (a + lam)


def pfedme_curvature(a, lam, inner_steps, inner_stepsize) -> np.ndarray:
    """pFedMe's effective curvature c_i = a_i lam (1 - rho_i^K) / (a_i + lam),
    rho_i = 1 - inner_stepsize (a_i + lam).

    Derivation: the inner problem h_i(theta) = f_i(theta) + (lam/2) ||theta - w||^2 has
    gradient (a_i + lam) theta - a_i b_i - lam w and minimiser theta* = (a_i b_i + lam w) /
    (a_i + lam); K gradient steps from theta = w leave theta_K - theta* = rho_i^K (w - theta*)
    = rho_i^K a_i (w - b_i) / (a_i + lam). So w - theta_K = (1 - rho_i^K) a_i (w - b_i) /
    (a_i + lam), and pFedMe's step w <- w - eta lam (w - theta_K) (its eq. (9)) is a gradient
    step on a quadratic of curvature c_i centred at b_i. ``inner_steps=None``: the exact
    inner solution, the Moreau envelope's a_i lam / (a_i + lam) (:func:`moreau_curvature`).

    Example:
      >>> import fedjax_abc as fa
      >>> fa.theory.pfedme_curvature([1.0], lam=1.0, inner_steps=1, inner_stepsize=0.25)
      array([0.25])
    """
    if inner_steps is None:
        return moreau_curvature(a, lam)
    K = check_int("inner_steps (K)", inner_steps, 1)
    rho = 1 - check_positive("inner_stepsize", inner_stepsize) * (np.asarray(a, np.float64) + lam)
    return moreau_curvature(a, lam) * (1 - rho ** K)


def pfedme_personal(a, b, lam, inner_steps, inner_stepsize, w) -> np.ndarray:
    """pFedMe's personal models theta_i(w) after K exact inner steps from theta = w:

        theta_i(w) = (a_i b_i + lam w) / (a_i + lam) + rho_i^K a_i (w - b_i) / (a_i + lam),

    rho_i = 1 - inner_stepsize (a_i + lam) (the derivation of :func:`pfedme_curvature`);
    ``inner_steps=None`` drops the second term (the exact proximal point). Shape (n, d).

    Example:
      >>> import fedjax_abc as fa
      >>> fa.theory.pfedme_personal([1.0], [[2.0]], lam=1.0, inner_steps=None,
      ...                           inner_stepsize=None, w=[0.0])
      array([[1.]])
    """
    a, b = _quadratics(a, b)
    lam = check_positive("lam", lam)
    w = _model("w", w, b.shape[1])
    theta = (a * b + lam * w) / (a + lam)
    if inner_steps is None:
        return theta
    K = check_int("inner_steps (K)", inner_steps, 1)
    rho = 1 - check_positive("inner_stepsize", inner_stepsize) * (a + lam)
    return theta + rho ** K * a * (w - b) / (a + lam)


def pfedme_fixed_point(a, b, lam, inner_steps, inner_stepsize, stepsize,
                       local_steps) -> PersonalFixedPoint:
    """pFedMe's fixed point: x* of :func:`quadratic_fixed_point` with pFedMe's curvatures
    (:func:`pfedme_curvature`; the server's beta > 0 does not move it) and the personal
    models theta_i(x*) (:func:`pfedme_personal`)."""
    a, b = _quadratics(a, b)
    x = quadratic_fixed_point(pfedme_curvature(a, lam, inner_steps, inner_stepsize), b,
                              stepsize, local_steps)
    return PersonalFixedPoint(x, pfedme_personal(a, b, lam, inner_steps, inner_stepsize, x))


# -------------------------------------------------------------------------- Per-FedAvg


def perfedavg_curvature(a, alpha, variant: str = "hf") -> np.ndarray:
    """Per-FedAvg's effective curvature: a_i (1 - alpha a_i)^2 ("hf") or a_i (1 - alpha a_i)
    ("fo").

    Derivation: with g(w) = a_i (w - b_i), w~ = w - alpha g(w) gives g(w~) = a_i (1 - alpha
    a_i) (w - b_i); the Hessian-free step multiplies it by (I - alpha H) = (1 - alpha a_i),
    exactly the gradient of F_i(w) = f_i(w - alpha grad f_i(w)) = (a_i/2) (1 - alpha a_i)^2
    ||w - b_i||^2 (the central difference is exact on a quadratic); the first-order step
    keeps g(w~) alone.

    Example:
      >>> import fedjax_abc as fa
      >>> fa.theory.perfedavg_curvature([2.0], alpha=0.25, variant="fo")
      array([1.])
    """
    if variant not in ("hf", "fo"):
        raise ValueError(f"variant must be one of ('hf', 'fo'), got {variant!r}")
    a = _curvatures(a)
    shrink = 1 - check_nonneg("alpha", alpha) * a
    return a * shrink ** (2 if variant == "hf" else 1)


def perfedavg_personal(a, b, alpha, w) -> np.ndarray:
    """Per-FedAvg's personal models, one exact gradient step from w:
    w - alpha a_i (w - b_i), shape (n, d)."""
    a, b = _quadratics(a, b)
    alpha = check_nonneg("alpha", alpha)
    w = _model("w", w, b.shape[1])
    return w - alpha * a * (w - b)


def perfedavg_fixed_point(a, b, alpha, stepsize, local_steps,
                          variant: str = "hf") -> PersonalFixedPoint:
    """Per-FedAvg's fixed point: x* of :func:`quadratic_fixed_point` with its curvatures
    (:func:`perfedavg_curvature`; with Q = 1 and "hf", the minimiser of the meta-objective
    (1/n) sum_i F_i) and the personal models x* - alpha a_i (x* - b_i)."""
    a, b = _quadratics(a, b)
    x = quadratic_fixed_point(perfedavg_curvature(a, alpha, variant), b, stepsize,
                              local_steps)
    return PersonalFixedPoint(x, perfedavg_personal(a, b, alpha, x))


def perfedavg_first_order_bias(a, b, alpha, stepsize, local_steps) -> np.ndarray:
    """The first-order bias x*_FO - x*_HF of Per-FedAvg, shape (d,): how far dropping the
    Hessian term moves the fixed point (0 when every a_i is equal or alpha = 0).

    Example:
      >>> import fedjax_abc as fa
      >>> bias = fa.theory.perfedavg_first_order_bias([1.0, 3.0], [[0.0], [1.0]], alpha=0.1,
      ...                                            stepsize=0.1, local_steps=1)
      >>> round(float(bias[0]), 6)  # 2.1 / 3 - 1.47 / 2.28
      0.055263
    """
    return (perfedavg_fixed_point(a, b, alpha, stepsize, local_steps, "fo").x
            - perfedavg_fixed_point(a, b, alpha, stepsize, local_steps, "hf").x)


# -------------------------------------------------------------------------------- APFL


def _mixing(alpha) -> float:
    alpha = check_positive("alpha", alpha)
    if alpha > 1:
        raise ValueError(f"alpha ({alpha}) must be in (0, 1]")
    return alpha


def apfl_personal(a, b, alpha, w, stepsize, local_steps) -> np.ndarray:
    """APFL's personal models alpha v_i* + (1 - alpha) w at its fixed point, for a fixed
    alpha in (0, 1] and a global model at its fixed point w (FedAvg's), shape (n, d):

        b_i + (w - b_i) / (1 + alpha) * (1 - alpha^2 (1 - p_i^Q) / (1 - s_i^Q)),

    p_i = 1 - eta a_i, s_i = 1 - eta alpha^2 a_i: b_i exactly when Q = 1 or alpha = 1.

    Derivation: in a round the local global model runs w_l - b_i = p_i^l (w - b_i) and the
    personal model v_{l+1} = v_l - eta alpha a_i r_l, r_l = alpha v_l + (1 - alpha) w_l - b_i
    the mixture's offset. Then r_{l+1} = s_i r_l - (1 - alpha) eta a_i p_i^l (w - b_i), so
    r_l = s_i^l r_0 - (1 - alpha) eta a_i (s_i^l - p_i^l) / (s_i - p_i) (w - b_i). v returns
    to itself after the round iff sum_{l<Q} r_l = 0; summing the geometric series and
    using 1 - s_i = eta alpha^2 a_i, 1 - p_i = eta a_i, s_i - p_i = eta a_i (1 - alpha^2)
    gives the offset r_0 above. The personal model at the round's start (what
    ``personal`` returns, with x_t = w) is b_i + r_0. With alpha = 0 v_i never moves.
    """
    a, b = _quadratics(a, b)
    alpha = _mixing(alpha)
    w = _model("w", w, b.shape[1])
    eta = check_positive("stepsize (eta)", stepsize)
    Q = check_int("local_steps (Q)", local_steps, 1)
    p, s = 1 - eta * a, 1 - eta * alpha ** 2 * a
    return b + (w - b) / (1 + alpha) * (1 - alpha ** 2 * (1 - p ** Q) / (1 - s ** Q))


def apfl_fixed_point(a, b, alpha, stepsize, local_steps) -> PersonalFixedPoint:
    """APFL's fixed point (fixed alpha in (0, 1]): FedAvg's w*, the personal models of
    :func:`apfl_personal` and the client states v_i* = (personal_i - (1 - alpha) w*) / alpha
    (with Q = 1: v_i* = (b_i - (1 - alpha) w*) / alpha)."""
    w = fedavg_fixed_point(a, b, stepsize, local_steps)
    personal = apfl_personal(a, b, alpha, w, stepsize, local_steps)
    return PersonalFixedPoint(w, personal, (personal - (1 - float(alpha)) * w) / float(alpha))


# ------------------------------------------------------------------------ fine-tuning


def fine_tuned_personal(a, b, w, steps, stepsize) -> np.ndarray:
    """K exact gradient steps of size gamma on f_i from w: b_i + (1 - gamma a_i)^K (w - b_i),
    shape (n, d) (``FineTuned(FedAvg(), K, gamma)`` at FedAvg's fixed point w)."""
    a, b = _quadratics(a, b)
    w = _model("w", w, b.shape[1])
    K = check_int("steps (K)", steps, 0)
    gamma = check_positive("stepsize (gamma)", stepsize)
    return b + (1 - gamma * a) ** K * (w - b)
