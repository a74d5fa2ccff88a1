"""Theory against simulation: Theorem 2's bound (21) and Theorem 3's convergence, by Monte Carlo.

Both checks run :func:`fedjax_abc.simulate` and return a JSON-serialisable dict of plain
floats, ints, bools, strings and lists, with stable documented keys (a reproduction script
consumes them). The ABC constants (C, D) and L are the caller's claims for the problem;
check them with ``abc_constants`` / ``lemma1_slack`` first.
"""

from __future__ import annotations

import math
import time
from typing import Optional

import jax
import numpy as np

from fedjax_abc._problems._problem import Problem
from fedjax_abc._engine import summarize
from fedjax_abc._engine import simulate
from fedjax_abc._theory._bounds import (bound_terms, limit_terms, theorem2_leading_terms,
                                       theorem2_stepsize, validated_params)
from fedjax_abc._theory._theorem3 import (check_theorem3_schedule, diminishing_stepsize,
                                         theorem3_stepsize_limit)
from fedjax_abc._theory._grid import check_int
from fedjax_abc._theory._heterogeneity import sigma_f_star as _sigma

__all__ = ["theorem2_check", "theorem3_check"]


def _x0(problem: Problem, x0) -> np.ndarray:
    if x0 is None:
        return np.asarray(problem.x_star, np.float64) + 10.0
    x0 = np.asarray(x0, np.float64).reshape(-1)
    if x0.shape != (problem.dim,) or not np.all(np.isfinite(x0)):
        raise ValueError(f"x0 must be {problem.dim} finite numbers, got {x0}")
    return x0


def _gap(problem: Problem, x0: np.ndarray) -> float:
    return float(problem.astype(np.float64).gap(jax.numpy.asarray(x0, np.float64)))


def _slope(t: np.ndarray, y: np.ndarray) -> float:
    ok = (t > 0) & (y > 0) & np.isfinite(y)
    if ok.sum() < 2:
        return math.nan
    return float(np.polyfit(np.log(t[ok]), np.log(y[ok]), 1)[0])


def late_windows(values: np.ndarray, rounds: np.ndarray) -> dict:
    """Whether the runs have left their transient: E||grad f||^2 over two late windows.

    ``values`` are the trials' records (trials x records, t = ``rounds``); each trial's
    average over t in [T/2, 3T/4) and [3T/4, T) (T the last record, excluded) gives m_1 and
    m_2 (means over trials). Returns "late_mean" (the mean over t in [T/2, T)) with its
    standard error across trials, and "late_slope" = log(m_2 / m_1) / log(t_2 / t_1) (the
    windows' mean rounds t_1, t_2) with a delta-method standard error from the paired
    per-trial averages: near 0 once the iterates are stationary, clearly below 0 while
    E||grad f||^2 still falls. NaN where a window has no record or fewer than 2 trials.
    """
    T = float(rounds[-1])
    w1 = (rounds >= T / 2) & (rounds < 3 * T / 4)
    w2 = (rounds >= 3 * T / 4) & (rounds < T)
    nan = {"late_mean": math.nan, "late_stderr": math.nan, "late_slope": math.nan,
           "late_slope_stderr": math.nan}
    m = values.shape[0]
    if not (w1.any() and w2.any()) or m < 2:
        return nan
    a, b = values[:, w1].mean(1), values[:, w2].mean(1)
    both = values[:, w1 | w2].mean(1)
    m1, m2 = float(a.mean()), float(b.mean())
    if not (m1 > 0 and m2 > 0):
        return nan
    span = math.log(float(rounds[w2].mean()) / float(rounds[w1].mean()))
    cov = np.cov(np.stack([a, b]), ddof=1) / m  # of the two means
    var = cov[0, 0] / m1 ** 2 + cov[1, 1] / m2 ** 2 - 2 * cov[0, 1] / (m1 * m2)
    return {"late_mean": float(both.mean()), "late_stderr": float(both.std(ddof=1) / math.sqrt(m)),
            "late_slope": math.log(m2 / m1) / span,
            "late_slope_stderr": math.sqrt(max(float(var), 0.0)) / span}


def _finite_trials(res, name: str) -> np.ndarray:
    """``res.<name>`` without the diverged trials (ValueError if every trial diverged)."""
    value = getattr(res, name)
    if not res.num_diverged:
        return value
    if res.num_diverged == res.trials:
        raise ValueError(f"{res.divergence()}: no finite trial to check; take a smaller stepsize")
    return value[~res.diverged]


def _divergence(res) -> dict:
    k = res.num_diverged
    return {"diverged_trials": k,
            "diverged_from_round": int(res.diverged_at[res.diverged].min()) if k else None}


def theorem2_check(problem: Problem, *, L: float, C: float, D: float, num_sampled: int,
                   local_steps: int, rounds: int, trials: int, key: jax.Array, x0=None,
                   record_every: Optional[int] = 1, mode: str = "mask",
                   trial_chunk: Optional[int] = None, dtype: str = "float64",
                   progress=False, checkpoint=None) -> dict:
    """Runs FedAvg at Theorem 2's stepsize (22) and compares min_t E||grad f(x_t)||^2 with (21).

    E||grad f(x_t)||^2 is the mean over trials at each recorded round t < T; the reported
    ``observed`` is the smallest of these means, with the standard error and normal 95%
    interval of the mean at that round. With ``record_every`` k > 1 only t = 0, k, 2k, ...
    are seen: the minimum over them is >= the minimum over all t, so "holds" stays a valid
    (conservative) verdict. The minimum of many noisy means is biased low (selection);
    "holds_upper95" compares the bound with the upper end of the interval at the argmin
    round instead. The bound is loose by large factors in practice ("ratio"), far beyond
    either effect.

    Args:
      problem: a :class:`~fedjax_abc.Problem`.
      L, C, D: smoothness and ABC constants valid for the problem and its oracle.
      num_sampled: S. local_steps: Q. rounds: T. trials: independent runs.
      key: PRNG key of the simulation.
      x0: initial point; default x* + 10 in each coordinate (Section IV-B's start).
        f(x0) > f* is required.
      record_every: k, a divisor of T (default 1: every round); None: as in
        :func:`fedjax_abc.simulate` (about 1000 records, the last interval shorter where
        no divisor of T fits).
      mode, trial_chunk, dtype, progress, checkpoint: passed to :func:`fedjax_abc.simulate`.

    Returns:
      A dict with the keys
        "check" ("theorem2"), "problem", "n", "num_sampled", "local_steps", "rounds",
        "trials", "record_every", "x0" (list), "L", "C", "D", "sigma_f_star", "delta_f",
        "sampling_factor", "stepsize" (22), "stepsize_limit" (20), "bound" (21),
        "bound_terms" {"initial_gap", "noise", "sampling", "drift"},
        "leading_terms" {"noise", "sampling", "drift", "stability", "stability_cubic",
        "total"} (24), "observed", "observed_stderr", "observed_ci95" [low, high],
        "argmin_round", "late_mean", "late_stderr", "late_slope", "late_slope_stderr"
        (:func:`late_windows`: has the run left its transient?), "holds" (bound >= observed), "holds_upper95" (bound >= the upper
        end of the interval), "ratio" (bound / observed; None if observed == 0),
        "final_grad_norm_sq" (mean at t = T), "diverged_trials", "diverged_from_round"
        (trials whose iterate or records became non-finite, left out of every mean, and the
        earliest round; None if none), "seconds".

    Example:
      >>> import jax, fedjax_abc as fa
      >>> p = fa.problems.huber_offsets(jax.random.key(0), n=10, d_max=20.0)
      >>> r = fa.theory.theorem2_check(p, L=1.0, C=1.0, D=0.0, num_sampled=2, local_steps=5,
      ...                              rounds=50, trials=16, key=jax.random.key(1))
      >>> r["holds"], r["ratio"] > 1
      (True, True)

    Reference: Theorem 2, eq. (20)-(24).
    """
    start = time.perf_counter()
    n = problem.num_clients
    x0 = _x0(problem, x0)
    delta = _gap(problem, x0)
    if not delta > 0:
        raise ValueError(f"f(x0) - f* ({delta}) must be > 0 for the stepsize (22)")
    sigma = max(0.0, _sigma(problem))
    p = validated_params(L, C, D, sigma, delta, n, num_sampled, local_steps, rounds)
    k = None if record_every is None else check_int("record_every", record_every)
    alpha = theorem2_stepsize(p.L, p.C, p.D, sigma, delta, n, p.S, p.Q, p.T)
    terms = bound_terms(alpha, p)
    bound = float(sum(terms.values()))
    res = simulate(problem, num_sampled=p.S, local_steps=p.Q, stepsize=alpha, rounds=p.T,
                   x0=x0, trials=check_int("trials", trials), key=key, record_every=k,
                   mode=mode, trial_chunk=trial_chunk, record_x=False, dtype=dtype,
                   progress=progress, checkpoint=checkpoint)
    gns = _finite_trials(res, "grad_norm_sq")
    summ = summarize(gns[:, :-1], axis=0)  # rounds t < T
    j = int(np.argmin(summ.mean))
    observed, se = float(summ.mean[j]), float(summ.stderr[j])
    ci = [float(summ.ci_low[j]), float(summ.ci_high[j])]
    lead = theorem2_leading_terms(p.L, p.C, p.D, sigma, delta, n, p.S, p.Q, p.T)
    return {
        "check": "theorem2",
        "problem": problem.name,
        "n": n,
        "num_sampled": p.S,
        "local_steps": p.Q,
        "rounds": p.T,
        "trials": int(trials),
        "record_every": int(res.config["record_every"]),
        "x0": [float(v) for v in x0],
        "L": p.L,
        "C": p.C,
        "D": p.D,
        "sigma_f_star": sigma,
        "delta_f": delta,
        "sampling_factor": p.I,
        "stepsize": alpha,
        "stepsize_limit": min(limit_terms(p)),
        "bound": bound,
        "bound_terms": {name: float(v) for name, v in terms.items()},
        "leading_terms": {name: float(v) for name, v in lead._asdict().items()},
        "observed": observed,
        "observed_stderr": se if math.isfinite(se) else None,
        "observed_ci95": ci if all(math.isfinite(c) for c in ci) else None,
        "argmin_round": int(res.rounds[j]),
        **{k: (v if math.isfinite(v) else None)
           for k, v in late_windows(gns, np.asarray(res.rounds, float)).items()},
        "holds": bool(bound >= observed),
        "holds_upper95": bool(math.isfinite(ci[1]) and bound >= ci[1]),
        "ratio": bound / observed if observed > 0 else None,
        "final_grad_norm_sq": float(gns[:, -1].mean()),
        **_divergence(res),
        "seconds": time.perf_counter() - start,
    }


def theorem3_check(problem: Problem, *, L: float, C: float, num_sampled: int, local_steps: int,
                   rounds: int, trials: int, key: jax.Array, alpha0: Optional[float], p: float,
                   x0=None, record_every: Optional[int] = None, mode: str = "mask",
                   trial_chunk: Optional[int] = None, strict: bool = True,
                   dtype: str = "float64", progress=False, checkpoint=None) -> dict:
    """Runs FedAvg under alpha_t = alpha0/(t+1)^p and reports the decay of ||grad f(x_t)||.

    Theorem 3: E||grad f(x_t)|| -> 0 and ||grad f(x_t)|| -> 0 almost surely. A finite run
    shows the decay of the mean (over trials) and of the max (a proxy for "every path").

    Args:
      problem: a :class:`~fedjax_abc.Problem`.
      L, C: smoothness and ABC constant C valid for the problem.
      num_sampled: S. local_steps: Q. rounds: T. trials: independent runs.
      key: PRNG key of the simulation.
      alpha0: alpha_0; None means the largest allowed, 1/(8 Q (L + C)).
      p: decay exponent in (1/2, 1].
      x0: initial point; default x* + 10 in each coordinate.
      record_every: k (divides T); default as in :func:`fedjax_abc.simulate`.
      mode, trial_chunk, dtype, progress, checkpoint: passed to :func:`fedjax_abc.simulate`.
      strict: raise ValueError if alpha0 violates alpha_t <= 1/(8 Q (L + C)).

    Returns:
      A dict with the keys
        "check" ("theorem3"), "problem", "n", "num_sampled", "local_steps", "rounds",
        "trials", "record_every", "x0" (list), "L", "C", "alpha0", "p", "stepsize_limit",
        "schedule_holds", "recorded_rounds" (list), "max_grad_norm" (list, max over trials
        of ||grad f(x_t)||), "mean_grad_norm" (list), "mean_grad_norm_stderr" (list),
        "initial_max_grad_norm", "final_max_grad_norm", "final_mean_grad_norm",
        "final_mean_grad_norm_stderr", "decay_slope_mean", "decay_slope_max" (log-log
        slopes over the recorded t >= T/10, NaN as None), "diverged_trials",
        "diverged_from_round" (as in :func:`theorem2_check`; left out), "seconds".

    Example:
      >>> import jax, fedjax_abc as fa
      >>> p = fa.problems.huber_offsets(offsets=[0.0, 0.0, 0.3, 0.5, 0.9])
      >>> r = fa.theory.theorem3_check(p, L=1.0, C=1.0, num_sampled=2, local_steps=5,
      ...                              rounds=500, trials=8, key=jax.random.key(1),
      ...                              alpha0=None, p=0.6, x0=p.x_star + 1.0)
      >>> r["final_max_grad_norm"] < 0.5 * r["initial_max_grad_norm"]
      True

    Reference: Theorem 3.
    """
    start = time.perf_counter()
    Q = check_int("local_steps (Q)", local_steps)
    T = check_int("rounds (T)", rounds)
    limit = theorem3_stepsize_limit(L, C, Q)
    alpha0 = limit if alpha0 is None else float(alpha0)
    schedule = diminishing_stepsize(alpha0, p)
    sched = check_theorem3_schedule(schedule, L, C, Q, T)
    if strict and not sched.holds:
        raise ValueError(f"alpha0 ({alpha0:g}) exceeds 1/(8Q(L+C)) = {limit:g} (Theorem 3); "
                         "pass strict=False to run anyway")
    x0 = _x0(problem, x0)
    res = simulate(problem, num_sampled=num_sampled, local_steps=Q, stepsize=schedule,
                   rounds=T, x0=x0, trials=check_int("trials", trials), key=key,
                   record_every=record_every, mode=mode, trial_chunk=trial_chunk,
                   record_x=False, dtype=dtype, progress=progress, checkpoint=checkpoint)
    norms = np.sqrt(np.maximum(_finite_trials(res, "grad_norm_sq"), 0.0))
    summ = summarize(norms, axis=0)
    mx = norms.max(axis=0)
    t = np.asarray(res.rounds, np.float64)
    tail = t >= T / 10.0

    def clean(v):
        return None if not math.isfinite(v) else float(v)

    return {
        "check": "theorem3",
        "problem": problem.name,
        "n": problem.num_clients,
        "num_sampled": int(num_sampled),
        "local_steps": Q,
        "rounds": T,
        "trials": int(trials),
        "record_every": int(res.config["record_every"]),
        "x0": [float(v) for v in x0],
        "L": float(L),
        "C": float(C),
        "alpha0": alpha0,
        "p": float(p),
        "stepsize_limit": limit,
        "schedule_holds": sched.holds,
        "recorded_rounds": [int(v) for v in res.rounds],
        "max_grad_norm": [float(v) for v in mx],
        "mean_grad_norm": [float(v) for v in summ.mean],
        "mean_grad_norm_stderr": [clean(v) for v in summ.stderr],
        "initial_max_grad_norm": float(mx[0]),
        "final_max_grad_norm": float(mx[-1]),
        "final_mean_grad_norm": float(summ.mean[-1]),
        "final_mean_grad_norm_stderr": clean(summ.stderr[-1]),
        "decay_slope_mean": clean(_slope(t[tail], summ.mean[tail])),
        "decay_slope_max": clean(_slope(t[tail], mx[tail])),
        **_divergence(res),
        "seconds": time.perf_counter() - start,
    }
