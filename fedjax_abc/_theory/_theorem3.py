"""Theorem 3: stepsizes alpha_t <= 1/(8 Q (L + C)) with sum alpha_t = inf, sum alpha_t^2 < inf.

Reference: "On Federated Averaging with Partial Participation under a General Variance
Condition", Theorem 3 (Section III) and Lemma 8 (the stepsize limit), Appendix H.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Optional

import jax.numpy as jnp
import numpy as np

from fedjax_abc._engine import stepsize_array
from fedjax_abc._theory._grid import check_int, check_nonneg, check_positive

__all__ = [
    "Theorem3ScheduleCheck",
    "check_theorem3_schedule",
    "diminishing_stepsize",
    "theorem3_stepsize_limit",
]


def theorem3_stepsize_limit(L, C, Q) -> float:
    """1 / (8 Q (L + C)), the largest stepsize Lemma 8 and Theorem 3 allow in any round.

    Args:
      L: smoothness (> 0). C: ABC constant (>= 0). Q: local steps (>= 1).

    Returns:
      The limit as a float.

    Example:
      >>> import fedjax_abc as fa
      >>> fa.theory.theorem3_stepsize_limit(1.0, 1.0, 10)
      0.00625

    Reference: Lemma 8; Theorem 3.
    """
    return 1.0 / (8.0 * check_int("local_steps (Q)", Q) * (check_positive("L", L)
                                                             + check_nonneg("C", C)))


def diminishing_stepsize(alpha0, p) -> Callable:
    """The schedule alpha_t = alpha0 / (t + 1)^p, p in (1/2, 1], for Theorem 3.

    sum_t alpha_t = inf (p <= 1) and sum_t alpha_t^2 < inf (p > 1/2). A jax-traceable
    ``t -> alpha_t``, usable as ``fa.simulate(..., stepsize=schedule)``.

    Args:
      alpha0: alpha_0 > 0 (Theorem 3 needs alpha0 <= 1/(8 Q (L + C))).
      p: the decay exponent, 1/2 < p <= 1.

    Returns:
      The schedule.

    Example:
      >>> import fedjax_abc as fa
      >>> sched = fa.theory.diminishing_stepsize(0.01, 1.0)
      >>> float(sched(0)), float(sched(3))
      (0.01, 0.0025)

    Reference: Theorem 3.
    """
    alpha0 = check_positive("alpha0", alpha0)
    p = check_positive("p", p)
    if not 0.5 < p <= 1.0:
        raise ValueError(f"p ({p}) must be in (1/2, 1] for Theorem 3")

    def schedule(t):
        return alpha0 * (jnp.asarray(t, dtype=float) + 1.0) ** (-p)

    return schedule


class Theorem3ScheduleCheck(NamedTuple):
    """A schedule checked over a finite horizon against Theorem 3.

    Attributes:
      holds: every alpha_t <= limit for t < horizon.
      limit: 1 / (8 Q (L + C)).
      max_stepsize: max_t alpha_t.
      first_violation: first t with alpha_t > limit, or -1.
      sum_stepsize, sum_stepsize_sq: partial sums of alpha_t and alpha_t^2 up to the horizon.
      tail_exponent: -slope of log alpha_t against log(t + 1) over the second half of the
        horizon (p for alpha0/(t+1)^p); NaN for horizon < 8.
      tail_exponent_ok: ``sum_diverges and sum_sq_converges`` (both decided True): the
        finite-horizon proxy for sum alpha_t = inf and sum alpha_t^2 < inf, which no finite
        horizon can prove.
      horizon: number of rounds checked.
      sum_diverges, sum_sq_converges: the schedule's tail, log alpha_t, is fitted as
        a - p log(t + 1) - k log log(t + 3) (least squares; exact for
        alpha0 / ((t + 1)^p log(t + 3)^k)); sum alpha_t diverges iff p < 1, or p = 1 and
        k <= 1; sum alpha_t^2 converges iff p > 1/2, or p = 1/2 and k > 1/2. Each is True
        or False where the fitted values decide it, None where they cannot (see
        ``decided``). For a callable schedule the tail is its values on the farthest of the
        windows :data:`TAILS` (t = 1e8 .. 1e16 up to 1e280 .. 1e288) where all of them are
        finite normal positive floats; for a number, the first window; else the second half
        of the given array. A shift such as alpha_0 c / (t + c) bends the fit by a relative
        c / t, so every c from 1 to about 1e270 is classified as 1/t (c / t at most 1e-10 on
        the last window); beyond that float64 holds no t far enough past c: up to about
        1e290 the sums are left undecided, and past it the schedule is constant on every
        window float64 reaches and is rejected as a constant would be. So
        alpha_0 c / (t + c) for those c and alpha_0 / ((t + 1) log(t + 3)) pass, although a
        power-law fit over a short horizon (``tail_exponent``) gives an exponent below or
        above 1, and 1/(t log^2 t) fails. A schedule computed in float32 (JAX without
        ``jax_enable_x64``) overflows past t = 3e38 and is fitted on the first window.
      tail_rounds: (first, last) t of the tail fitted.
      tail_p, tail_k: the fitted p and k (NaN where no tail was fitted).
      resolution: (of p, of k): how far apart two exponents must be for the schedule's
        values on the tail to tell them apart: RESOLUTION_Z standard errors of the
        least-squares fit (its residuals, at least float64 rounding of log alpha_t) plus
        the change of the estimate between the whole tail and its second half (the bend an
        unfitted term leaves), at least :data:`FINEST` (1e-9 for p, 1e-6 for k). On the
        last window of a float64 schedule it is that floor: t^-1.0001 and t^-0.9999,
        t^-0.5001 and t^-0.4999 are told apart; on a float32 schedule's first window about
        1e-7 for p.
        An exponent within its resolution of 1 (or 1/2) is read as exactly 1 (1/2), as a
        schedule written with that exponent comes out, provided the resolution is at most
        :data:`EXACT_RESOLUTION`; a coarser one leaves the sum undecided, and a resolution
        of p above :data:`SETTLED` (an exponent still moving across the tail) leaves both
        undecided.
      decided: whether both sums are decided; False means "undecidable from the schedule's
        values at this resolution" (an exponent within a resolution coarser than
        :data:`EXACT_RESOLUTION` of a boundary, or not settled: a short array, a shift that
        still bends the tail, as alpha_0 c / (t + c) with c beyond about 1e270), and
        ``tail_exponent_ok`` is then False.
    """

    holds: bool
    limit: float
    max_stepsize: float
    first_violation: int
    sum_stepsize: float
    sum_stepsize_sq: float
    tail_exponent: float
    tail_exponent_ok: bool
    horizon: int
    sum_diverges: Optional[bool] = False
    sum_sq_converges: Optional[bool] = False
    tail_rounds: tuple = (0, 0)
    tail_p: float = math.nan
    tail_k: float = math.nan
    resolution: tuple = (math.nan, math.nan)
    decided: bool = False


# The windows, eight decades each, where a callable schedule's tail may be fitted.
TAILS = tuple(np.logspace(a, a + 8, 81) for a in (8, 32, 64, 128, 200, 280))
TAIL = TAILS[0]
# Standard errors of the tail fit that make up an exponent's resolution, and the finest
# resolution of p and of k (rounding in a schedule's own arithmetic is not independent
# from point to point, so the fit's standard errors understate it).
RESOLUTION_Z = 6.0
FINEST = (1e-9, 1e-6)
# The coarsest resolution at which an exponent within it of 1 (or 1/2) is read as exactly
# 1 (1/2); a coarser one leaves the sum undecided.
EXACT_RESOLUTION = 1e-5
# A tail whose fitted p is not settled to this (its resolution) decides neither sum: its
# local exponent still moves across the window (a shift c beyond float64's reach, a short
# array), so its limit is not in the values.
SETTLED = 1e-2


def _far_values(schedule) -> Optional[tuple[np.ndarray, np.ndarray]]:
    """(t, alpha_t) on the farthest window of :data:`TAILS` where every alpha_t is a
    finite normal positive float, or None where there is none."""
    for t in reversed(TAILS):
        with np.errstate(all="ignore"):
            values = np.asarray(schedule(jnp.asarray(t)), dtype=np.float64)
        if values.shape == t.shape and np.all(np.isfinite(values)) and \
                np.all(values > np.finfo(np.float64).tiny):
            return t, values
    return None


def _tail(schedule, alphas: np.ndarray):
    """(t, alpha_t) of the tail that classifies the schedule (see Theorem3ScheduleCheck)."""
    if callable(schedule):
        far = _far_values(schedule)
        if far is not None:
            return far
    elif np.ndim(schedule) == 0:
        return TAIL, np.full(TAIL.shape, float(schedule))
    t = np.arange(alphas.size // 2, alphas.size, dtype=np.float64)
    return t, alphas[alphas.size // 2:]


def _fit(t: np.ndarray, alphas: np.ndarray) -> tuple[float, float, float, float]:
    """(p, k, standard error of p, of k) of log alpha_t = a - p log(t + 1) - k log log(t + 3)
    by least squares; the residuals' scale is at least float64's rounding of log alpha_t."""
    X = np.stack([np.ones(t.size), -np.log(t + 1.0), -np.log(np.log(t + 3.0))], 1)
    y = np.log(alphas)
    coef = np.linalg.lstsq(X, y, rcond=None)[0]
    r = y - X @ coef
    scale = max(math.sqrt(float(r @ r) / max(t.size - 3, 1)),
                4 * np.finfo(np.float64).eps * float(np.max(np.abs(y))))
    with np.errstate(all="ignore"):
        cov = np.linalg.pinv(X.T @ X) * scale**2
    return float(coef[1]), float(coef[2]), math.sqrt(max(cov[1, 1], 0.0)), \
        math.sqrt(max(cov[2, 2], 0.0))


def _side(value: float, edge: float, resolution: float) -> Optional[int]:
    """-1 or 1 where ``value`` lies below or above ``edge`` beyond ``resolution``; 0 where
    it is read as ``edge`` itself (within a resolution of at most EXACT_RESOLUTION); None
    where it cannot be told apart from ``edge`` at a coarser one."""
    if value < edge - resolution:
        return -1
    if value > edge + resolution:
        return 1
    return 0 if resolution <= EXACT_RESOLUTION else None


def _classify(t: np.ndarray, alphas: np.ndarray):
    """(sum alpha_t diverges, sum alpha_t^2 converges, p, k, (resolution of p, of k)):
    each sum True, False, or None where the fit cannot decide it."""
    p, k, se_p, se_k = _fit(t, alphas)
    half = t.size // 2
    if t.size - half >= 8:
        p2, k2, _, _ = _fit(t[half:], alphas[half:])
        drift_p, drift_k = abs(p2 - p), abs(k2 - k)
    else:
        drift_p = drift_k = math.inf
    res = (max(RESOLUTION_Z * se_p + drift_p, FINEST[0]),
           max(RESOLUTION_Z * se_k + drift_k, FINEST[1]))
    if not res[0] <= SETTLED:
        return None, None, p, k, res

    def decide(edge_p, edge_k, below, at_k):  # below: the verdict for p < edge_p
        side = _side(p, edge_p, res[0])
        if side is None:
            return None
        if side:
            return below if side < 0 else not below
        kside = _side(k, edge_k, res[1])
        return None if kside is None else at_k(kside)

    # sum alpha_t = inf: p < 1, or p = 1 and k <= 1
    diverges = decide(1.0, 1.0, True, lambda s: s <= 0)
    # sum alpha_t^2 < inf: p > 1/2, or p = 1/2 and k > 1/2
    converges = decide(0.5, 0.5, False, lambda s: s > 0)
    return diverges, converges, p, k, res


def check_theorem3_schedule(schedule, L, C, Q, horizon) -> Theorem3ScheduleCheck:
    """Checks alpha_t <= 1/(8 Q (L + C)) for t < horizon, and the decay of the schedule.

    Args:
      schedule: ``t -> alpha_t`` (e.g. :func:`diminishing_stepsize`), a number or an array
        of ``horizon`` values (as ``fa.simulate`` accepts).
      L, C, Q: smoothness, ABC constant, local steps.
      horizon: number of rounds (>= 1).

    Returns:
      A :class:`Theorem3ScheduleCheck`.

    Example:
      >>> import fedjax_abc as fa
      >>> s = fa.theory.diminishing_stepsize(0.00625, 0.75)
      >>> c = fa.theory.check_theorem3_schedule(s, 1.0, 1.0, 10, 1000)
      >>> c.holds, round(c.tail_exponent, 6)
      (True, 0.75)

    Reference: Theorem 3 (and Lemma 8).
    """
    limit = theorem3_stepsize_limit(L, C, Q)
    horizon = check_int("horizon", horizon)
    alphas = stepsize_array(schedule, horizon)
    bad = alphas > limit * (1 + 1e-12)
    first = int(np.argmax(bad)) if bad.any() else -1
    exponent = p = k = math.nan
    diverges = converges = None
    res = (math.nan, math.nan)
    tail = (0, 0)
    if horizon >= 8 and np.all(alphas > 0):
        t = np.arange(horizon // 2, horizon)
        exponent = -float(np.polyfit(np.log(t + 1.0), np.log(alphas[t]), 1)[0])
        tt, values = _tail(schedule, alphas)
        diverges, converges, p, k, res = _classify(tt, values)
        tail = (float(tt[0]), float(tt[-1]))
    decided = diverges is not None and converges is not None
    return Theorem3ScheduleCheck(not bad.any(), limit, float(alphas.max()), first,
                                 float(alphas.sum()), float(np.sum(alphas**2)), exponent,
                                 bool(diverges is True and converges is True), horizon,
                                 diverges, converges, tail, p, k, res, decided)
