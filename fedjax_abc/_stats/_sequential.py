"""Precision-targeted runs: add trials until a 95% interval is short enough, with a stopping
rule whose coverage survives the optional stopping.

Looking at a fixed-n interval after every batch and stopping once it is short enough
("naive") selects the moments when the sample spread happens to be small: the interval at
the stop covers less often than its nominal level (measured in ``tests/test_stats.py``).
A confidence sequence is a sequence of intervals that covers the mean at *every* n at once
with probability >= 1 - alpha, so any stopping rule keeps its coverage.

The rule here is Robbins' normal mixture. For a sum S_n = sum_i (x_i - mu) of variance
v = n sigma^2, the mixture over lambda ~ N(0, 1 / rho) of exp(lambda S_n - lambda^2 v / 2)
is the martingale sqrt(rho / (v + rho)) exp(S_n^2 / (2 (v + rho))); Ville's inequality
bounds its crossing of 1 / alpha, which gives the two-sided boundary

    |S_n| < sqrt((v + rho) (log((v + rho) / rho) + 2 log(1 / alpha)))   for all n,

and so, with rho = m sigma^2 (m in trials), the half-width of the mean at n trials

    sigma / n * sqrt((n + m) (log(1 + n / m) + 2 log(1 / alpha))).

m sets where the boundary is tightest: at n_opt trials when n_opt / m = r solves
r - log(1 + r) = 2 log(1 / alpha) (r = 8.2 at alpha = 0.05). sigma is unknown and the
sample standard deviation is plugged in: the sequence is then asymptotically valid (its
coverage tends to the nominal level as the first look grows), not exactly so; with strongly
skewed metrics and first looks at a few dozen trials it can fall below it.

References: H. Robbins, "Statistical methods related to the law of the iterated logarithm",
Annals of Mathematical Statistics 41 (1970) 1397-1409; S. R. Howard, A. Ramdas,
J. McAuliffe and J. Sekhon, "Time-uniform, nonparametric, nonasymptotic confidence
sequences", Annals of Statistics 49 (2021) 1055-1080 (the two-sided normal-mixture
boundary); I. Waudby-Smith, D. Arbour, R. Sinha, E. H. Kennedy and A. Ramdas, "Time-uniform
central limit theory and asymptotic confidence sequences", Annals of Statistics (2024)
(the plug-in variance).
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Callable, NamedTuple, Optional, Union

import numpy as np

from fedjax_abc._engine import SimResult
from fedjax_abc._stats._intervals import Interval, check_level, normal_quantile
from fedjax_abc._stats._paired import check_paired, trial_values

__all__ = ["BudgetWarning", "Look", "RULES", "TargetedRun", "confidence_sequence_half_width",
           "mixture_ratio", "run_until", "sequential_half_width"]

RULES = ("confidence-sequence", "naive")


class BudgetWarning(RuntimeWarning):
    """A precision-targeted run ran out of trials or seconds before reaching its target."""


def mixture_ratio(alpha: float) -> float:
    """r = n_opt / m at which the normal-mixture half-width is smallest: the root of
    r - log(1 + r) = 2 log(1 / alpha) (Newton's method; r = 8.19 at alpha = 0.05)."""
    c = 2.0 * math.log(1.0 / alpha)
    r = c + math.log1p(c)
    for _ in range(60):
        step = (r - math.log1p(r) - c) / (1.0 - 1.0 / (1.0 + r))
        r -= step
        if abs(step) < 1e-14 * r:
            break
    return r


def confidence_sequence_half_width(trials, sd, *, alpha: float = 0.05, tuned_for: float):
    """The normal-mixture confidence sequence's half-width of a mean at n trials:

    sd / n * sqrt((n + m) (log(1 + n / m) + 2 log(1 / alpha))), m = tuned_for / r(alpha)

    (:func:`mixture_ratio`), tightest at n = ``tuned_for``. Arrays broadcast.

    Example:
      >>> import fedjax_abc as fa
      >>> w = fa.stats.confidence_sequence_half_width(1000, 1.0, tuned_for=1000)
      >>> round(float(w) * 1000 ** 0.5, 2)   # 1.96 for a fixed-n interval
      3.04

    Reference: Robbins (1970); Howard, Ramdas, McAuliffe and Sekhon (2021), the two-sided
    normal-mixture boundary.
    """
    n = np.asarray(trials, dtype=np.float64)
    m = float(tuned_for) / mixture_ratio(alpha)
    return np.asarray(sd, dtype=np.float64) / n * np.sqrt(
        (n + m) * (np.log1p(n / m) + 2.0 * math.log(1.0 / alpha)))


def sequential_half_width(trials, sd, *, level: float = 0.95,
                          rule: str = "confidence-sequence", tuned_for: float = 1024.0):
    """The half-width a stopping rule reads at n trials of sample standard deviation sd:
    the confidence sequence's (:func:`confidence_sequence_half_width`) or, for
    ``rule="naive"``, the fixed-n normal interval's z_{1 - a/2} sd / sqrt(n), which
    under-covers when used to decide when to stop. Arrays broadcast."""
    if rule not in RULES:
        raise ValueError(f"rule ({rule!r}) must be one of {RULES}")
    alpha = 1.0 - check_level(level)
    if rule == "naive":
        return normal_quantile(1.0 - alpha / 2.0) * np.asarray(sd, np.float64) / np.sqrt(
            np.asarray(trials, np.float64))
    return confidence_sequence_half_width(trials, sd, alpha=alpha, tuned_for=tuned_for)


class Look(NamedTuple):
    """One look of :func:`run_until`: the trials so far, the mean and the rule's half-width."""

    trials: int
    mean: float
    half_width: float


class TargetedRun(NamedTuple):
    """What :func:`run_until` returns.

    Attributes:
      result: the run's :class:`~fedjax_abc.SimResult`, equal bit for bit to
        ``sim.run(..., trials=trials)``.
      baseline: the baseline's result for a paired difference, else None.
      estimate: the metric's mean (or the paired difference's) with the stopping rule's
        interval at the stop (``method`` is the rule's name).
      reached: whether the half-width reached the target.
      target: the half-width asked for.
      trials: the trials run.
      excluded: trials left out of the estimate (non-finite in either run).
      looks: every look, in order.
      seconds: the wall-clock time taken.
    """

    result: SimResult
    baseline: Optional[SimResult]
    estimate: Interval
    reached: bool
    target: float
    trials: int
    excluded: int
    looks: tuple[Look, ...]
    seconds: float


def _positive_int(name: str, value, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} ({value!r}) must be an integer >= {low}")
    return int(value)


def _next_total(n: int, batch: int, growth: float, max_trials: int) -> int:
    """The trials at the next look: n grown by ``growth``, in whole batches, at least one."""
    more = max(batch, batch * math.ceil((growth - 1.0) * n / batch))
    return min(max_trials, n + more)


def run_until(sim, *, key, x0, stepsize: Union[float, Callable, np.ndarray], half_width: float,
              metric: str = "gap", record: int = -1, baseline=None, baseline_stepsize=None,
              level: float = 0.95, rule: str = "confidence-sequence", batch: int = 64,
              growth: float = 1.5, max_trials: int = 16384, max_seconds: float = math.inf,
              tuned_for: Optional[int] = None) -> TargetedRun:
    """Runs trials in growing batches until the interval of a metric's mean (or of a paired
    difference against a baseline) is shorter than a target, or a budget runs out.

    Trials run in calls of ``sim.run(..., trials=batch, first_trial=n)``: one compiled
    program, trial r's numbers those of any run of the same key (the last call is shorter
    where ``max_trials`` is not a whole number of batches). The parts are joined with
    :meth:`~fedjax_abc.SimResult.concatenate`, so that the result equals a fixed-size run
    of the final count bit for bit. After each step (one batch, then steps growing by
    ``growth``) the rule's half-width is computed from the trials so far; the run stops
    when it is at most ``half_width``.

    Args:
      sim: a :class:`~fedjax_abc.Simulation`.
      key, x0, stepsize: as :meth:`~fedjax_abc.Simulation.run` (x0 one starting point).
      half_width: the target half-width of the interval, in the metric's units.
      metric, record: what is estimated (see :func:`~fedjax_abc.stats.trial_values`): its
        mean over trials, or with ``baseline`` the mean of sim's minus the baseline's.
      baseline: a second :class:`~fedjax_abc.Simulation`, run on the same trials (same key,
        x0 and first trials): the estimate is then the paired difference.
      baseline_stepsize: the baseline's stepsize (default: ``stepsize``).
      level: the interval's coverage.
      rule: "confidence-sequence" (the normal-mixture confidence sequence above, valid
        under this optional stopping with the plug-in caveat) or "naive" (stop when the
        fixed-n normal interval is short enough: for demonstration only, it under-covers).
      batch: trials per call (>= 2); the first look is after one batch.
      growth: each step adds about (growth - 1) x the trials so far, in whole batches (at
        least one): the looks are geometric, and the run overshoots the count it needed
        by at most that factor.
      max_trials, max_seconds: the budget; a :class:`BudgetWarning` says what was reached
        when it ends first.
      tuned_for: the trial count at which the confidence sequence is tightest (default:
        the geometric mean of ``batch`` and ``max_trials``; at a tenth of it the sequence
        is about 26% wider than one tuned there, at ten times it about 7%).

    Returns:
      :class:`TargetedRun`.

    Example:
      >>> import jax, fedjax_abc as fa
      >>> p = fa.problems.huber_offsets(jax.random.key(0), n=10, d_max=20.0)
      >>> sim = fa.Simulation(p, num_sampled=2, local_steps=5, rounds=50)
      >>> out = fa.stats.run_until(sim, key=jax.random.key(1), x0=p.x_star + 1.0,
      ...                          stepsize=1e-2, half_width=0.02, batch=16)
      >>> out.reached, out.estimate.half_width <= 0.02, out.trials % 16
      (True, True, 0)

    Reference: Robbins (1970); Howard, Ramdas, McAuliffe and Sekhon (2021); Waudby-Smith
    et al. (2024).
    """
    start = time.perf_counter()
    level = check_level(level)
    if rule not in RULES:
        raise ValueError(f"rule ({rule!r}) must be one of {RULES}")
    if isinstance(half_width, bool) or not isinstance(half_width, (int, float, np.floating)) \
            or not half_width > 0 or not math.isfinite(half_width):
        raise ValueError(f"half_width ({half_width!r}) must be a finite number > 0")
    batch = _positive_int("batch", batch, 2)
    max_trials = _positive_int("max_trials", max_trials, batch)
    if isinstance(growth, bool) or not isinstance(growth, (int, float)) or not growth >= 1.0:
        raise ValueError(f"growth ({growth!r}) must be a number >= 1")
    if isinstance(max_seconds, bool) or not isinstance(max_seconds, (int, float)) or \
            not max_seconds > 0:
        raise ValueError(f"max_seconds ({max_seconds!r}) must be a number > 0")
    if np.ndim(x0) > 1:
        raise ValueError(f"x0 must be one starting point of shape (d,), got shape {np.shape(x0)}")
    tuned = math.sqrt(batch * max_trials) if tuned_for is None else float(
        _positive_int("tuned_for", tuned_for))
    base_step = stepsize if baseline_stepsize is None else baseline_stepsize

    parts, base_parts, chunks = [], [], []
    n, looks, reason = 0, [], ""
    target = batch
    while True:
        while n < target:
            size = min(batch, max_trials - n)
            part = sim.run(key=key, x0=x0, stepsize=stepsize, trials=size, first_trial=n)
            values = np.where(part.diverged, np.nan, trial_values(part, metric, record))
            parts.append(part)
            if baseline is not None:
                other = baseline.run(key=key, x0=x0, stepsize=base_step, trials=size,
                                     first_trial=n)
                check_paired(part, other, record)
                base_parts.append(other)
                values = values - np.where(other.diverged, np.nan,
                                           trial_values(other, metric, record))
            chunks.append(values)
            n += size
            if time.perf_counter() - start >= max_seconds:
                break
        values = np.concatenate(chunks)
        kept = values[np.isfinite(values)]
        if kept.size >= 2:
            mean, sd = float(kept.mean()), float(kept.std(ddof=1))
            width = float(sequential_half_width(kept.size, sd, level=level, rule=rule,
                                                tuned_for=tuned))
        else:
            mean, sd, width = (float(kept.mean()) if kept.size else math.nan), math.nan, math.inf
        looks.append(Look(n, mean, width))
        if width <= half_width:
            break
        if n >= max_trials:
            reason = f"max_trials={max_trials}"
            break
        if time.perf_counter() - start >= max_seconds:
            reason = f"max_seconds={max_seconds:g}"
            break
        target = _next_total(n, batch, growth, max_trials)

    reached = width <= half_width
    what = "the paired difference" if baseline is not None else f"the mean {metric}"
    if not reached:
        warnings.warn(f"run_until: the budget ({reason}) ended at {n} trials with {what} "
                      f"{mean:.4g} +- {width:.3g} ({rule}, {level:.0%}), above the target "
                      f"half-width {half_width:.3g}", BudgetWarning, stacklevel=2)
    result = SimResult.concatenate(parts)
    base = SimResult.concatenate(base_parts) if baseline is not None else None
    se = sd / math.sqrt(kept.size) if kept.size >= 2 else math.nan
    estimate = Interval(mean, se, mean - width, mean + width, int(kept.size), level, rule)
    return TargetedRun(result, base, estimate, bool(reached), float(half_width), n,
                       int(values.size - kept.size), tuple(looks), time.perf_counter() - start)
