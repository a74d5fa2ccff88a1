"""Paired differences of a recorded metric between runs that share their trials.

Two runs with the same key, trials, first trial and rounds draw the same client samples and
the same oracle noise in trial r (common random numbers): their per-trial difference
d_r = a_r - b_r has a variance var(a) + var(b) - 2 cov(a, b), often far below the sum that
two independent runs' means would carry. The paired estimate is the mean of d over trials
with its interval (:func:`~fedjax_abc.stats.mean_interval`).

Reference: Law, *Simulation Modeling and Analysis* (5th ed., 2015), Sections 10.2 (paired-t
confidence interval) and 11.2 (common random numbers).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from fedjax_abc._engine import SimResult
from fedjax_abc._stats._intervals import (check_level, check_method, critical_value,
                                          finite_values, p_value)

__all__ = ["Difference", "check_paired", "paired_difference", "paired_values", "trial_values"]

SCALARS = ("gap", "grad_norm_sq")  # the fields with one number per trial and record
# what two runs must share for trial r of one to be trial r of the other (config name,
# its value where a config leaves it out)
SHARED = (("key", None), ("trials", None), ("first_trial", 0), ("rounds", None),
          ("generator", "threefry"))


class Difference(NamedTuple):
    """A paired difference a - b over trials: its mean, standard error, interval and p-value.

    Attributes:
      mean: the mean over trials of a_r - b_r.
      stderr: their sample standard deviation over sqrt(trials).
      ci_low, ci_high: the two-sided interval at ``level``.
      p_value: two-sided, of a zero mean difference (normal or t as ``method``).
      trials: the pairs used.
      excluded: the pairs left out (a trial that diverged in either run).
      level: the interval's nominal coverage.
      method: "normal" or "t".
    """

    mean: float
    stderr: float
    ci_low: float
    ci_high: float
    p_value: float
    trials: int
    excluded: int = 0
    level: float = 0.95
    method: str = "normal"

    @property
    def half_width(self) -> float:
        """Half the interval's width."""
        return (self.ci_high - self.ci_low) / 2

    @property
    def sd(self) -> float:
        """The standard deviation of the per-trial differences, stderr sqrt(trials)."""
        return self.stderr * math.sqrt(self.trials)

    def __str__(self) -> str:
        return (f"{self.mean:+.4g} +- {self.half_width:.2g} ({self.level:.0%}, {self.method}, "
                f"paired over {self.trials} trials; p = {self.p_value:.2g})")


def trial_values(result: SimResult, metric: str = "gap", record: int = -1) -> np.ndarray:
    """One number per trial: ``metric`` ("gap", "grad_norm_sq" or a recorded metric's name)
    at record index ``record`` (-1: the last record, t = T).

    Returns:
      Float[ndarray, "trials"] (diverged trials as they are, possibly non-finite).

    Example:
      >>> import jax, fedjax_abc as fa
      >>> p = fa.problems.quadratics(jax.random.key(0), n=4, d=2)
      >>> r = fa.simulate(p, local_steps=2, stepsize=0.1, rounds=4, trials=3,
      ...                 key=jax.random.key(1), x0=jax.numpy.ones(2))
      >>> fa.stats.trial_values(r, "gap", 0).shape
      (3,)
    """
    if not isinstance(result, SimResult):
        raise TypeError(f"result must be a SimResult, got a {type(result).__name__}")
    if metric in result.metrics:
        table = result.metrics[metric]
    elif metric in SCALARS:
        table = getattr(result, metric)
    else:
        known = ", ".join(map(repr, SCALARS + tuple(result.metrics)))
        raise ValueError(f"metric ({metric!r}) must be one of {known}")
    records = table.shape[1]
    if isinstance(record, bool) or not isinstance(record, (int, np.integer)) or \
            not -records <= record < records:
        raise ValueError(f"record ({record!r}) must be a record index in [{-records}, {records})")
    return np.asarray(table[:, record], dtype=np.float64)


def check_paired(a: SimResult, b: SimResult, record: int = -1) -> None:
    """A one-line ValueError unless trial r of ``a`` and trial r of ``b`` share their random
    numbers: the same key, trials, first_trial, rounds and generator in their configs, and
    the same recorded rounds where ``record`` is not the last."""
    for name, r in (("a", a), ("b", b)):
        if not isinstance(r, SimResult):
            raise TypeError(f"{name} must be a SimResult, got a {type(r).__name__}")
    differ = [f"{name} ({a.config.get(name, d)!r} and {b.config.get(name, d)!r})"
              for name, d in SHARED if a.config.get(name, d) != b.config.get(name, d)]
    last = record == -1 and a.rounds[-1] == b.rounds[-1]  # t = T in both
    if not last and not np.array_equal(a.rounds, b.rounds):
        differ.append(f"recorded rounds ({len(a.rounds)} and {len(b.rounds)} records)")
    if differ:
        raise ValueError("a paired difference needs runs of the same trials (key, trials, "
                         "first_trial, rounds, generator); these differ in " + ", ".join(differ))


def paired_values(a: SimResult, b: SimResult, metric: str = "gap",
                  record: int = -1) -> np.ndarray:
    """d_r = a_r - b_r for every trial r of two runs of the same trials (see
    :func:`check_paired`), NaN where either run diverged.

    Returns:
      Float[ndarray, "trials"].

    Example:
      >>> import jax, numpy as np, fedjax_abc as fa
      >>> p = fa.problems.huber_offsets(jax.random.key(0), n=10, d_max=20.0)
      >>> kw = dict(num_sampled=2, local_steps=5, stepsize=1e-2, rounds=50, trials=8,
      ...           x0=p.x_star + 1.0, key=jax.random.key(1))
      >>> a = fa.simulate(p, **kw)
      >>> b = fa.simulate(p, algorithm=fa.algorithms.FedProx(mu=0.1), **kw)
      >>> bool(np.array_equal(fa.stats.paired_values(a, b), a.gap[:, -1] - b.gap[:, -1]))
      True
    """
    check_paired(a, b, record)
    va, vb = trial_values(a, metric, record), trial_values(b, metric, record)
    lost = a.diverged | b.diverged | ~np.isfinite(va) | ~np.isfinite(vb)
    return np.where(lost, np.nan, va - vb)


def paired_difference(a: SimResult, b: SimResult, metric: str = "gap", *, record: int = -1,
                      level: float = 0.95, method: str = "normal") -> Difference:
    """The paired difference a - b of ``metric`` at ``record`` over the trials both runs share.

    mean d-bar = (1/n) sum_r (a_r - b_r), stderr s_d / sqrt(n), interval
    d-bar -/+ c s_d / sqrt(n) (c = z_{1 - a/2} or t_{1 - a/2, n - 1}): the paired-t interval
    of Law (2015, Section 10.2) and its normal form. Trials that diverged in either run are
    left out (``excluded``).

    Args:
      a, b: :class:`~fedjax_abc.SimResult` of the same trials: the same key, trials,
        first_trial and rounds (a one-line ValueError names what differs).
      metric: "gap", "grad_norm_sq" or a recorded metric's name.
      record: the record index (-1: t = T).
      level: the interval's nominal coverage.
      method: "normal" or "t".

    Returns:
      :class:`Difference`.

    Example:
      >>> import jax, fedjax_abc as fa
      >>> p = fa.problems.huber_offsets(jax.random.key(0), n=10, d_max=20.0)
      >>> kw = dict(num_sampled=2, local_steps=5, stepsize=1e-2, rounds=50, trials=16,
      ...           x0=p.x_star + 1.0, key=jax.random.key(1))
      >>> d = fa.stats.paired_difference(fa.simulate(p, **kw), fa.simulate(
      ...     p, algorithm=fa.algorithms.FedProx(mu=0.1), **kw))
      >>> d.trials, d.ci_low < d.mean < d.ci_high
      (16, True)

    Reference: Law, *Simulation Modeling and Analysis* (5th ed., 2015), Sections 10.2, 11.2.
    """
    level, method = check_level(level), check_method(method)
    d = paired_values(a, b, metric, record)
    kept = d[np.isfinite(d)]
    if kept.size < 2:
        raise ValueError(f"a paired difference needs at least 2 trials that neither run lost, "
                         f"got {kept.size} of {d.size}")
    kept = finite_values(kept, "the paired differences")
    n = kept.size
    mean = float(kept.mean())
    se = float(kept.std(ddof=1) / math.sqrt(n))
    half = float(critical_value(level, n, method) * se)
    return Difference(mean, se, mean - half, mean + half, p_value(mean, se, n, method), n,
                      int(d.size - n), level, method)
