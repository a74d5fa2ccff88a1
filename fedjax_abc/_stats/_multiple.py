"""Several methods at once: Holm's step-down adjustment and a ranking with its uncertainty.

Comparing k methods makes several tests at once: k - 1 against a baseline, or k (k - 1) / 2
in all pairs. Holm's step-down procedure keeps the probability of any false rejection at or
below alpha whatever the dependence between the tests (all share the trials here). A
ranking by mean is one draw of a random ordering; the paired bootstrap over trials (the
same resampled trials for every method) estimates how often each method takes each rank.

References: S. Holm, "A simple sequentially rejective multiple test procedure",
Scandinavian Journal of Statistics 6 (1979) 65-70; B. Efron and R. Tibshirani, *An
Introduction to the Bootstrap* (1993), Chapter 6; G. Hall and H. Miller, "Using the
bootstrap to quantify the authority of an empirical ranking", Annals of Statistics 37
(2009) 3929-3959.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Mapping, NamedTuple, Optional, Union

import numpy as np

from fedjax_abc._engine import SimResult
from fedjax_abc._stats._intervals import check_level, check_method, mean_interval, p_value
from fedjax_abc._stats._paired import Difference, check_paired, trial_values

__all__ = ["Comparisons", "PairComparison", "Ranking", "against_baseline", "generator", "holm",
           "pairwise", "rank", "stacked_values"]


def generator(rng) -> np.random.Generator:
    """``rng`` as a NumPy Generator: a Generator as it is, an integer as its seed."""
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool) and rng >= 0:
        return np.random.default_rng(int(rng))
    raise ValueError(f"rng ({rng!r}) must be a numpy.random.Generator or a seed (an integer "
                     ">= 0): the resampling takes its randomness only from it")


def holm(p_values) -> np.ndarray:
    """Holm's step-down adjusted p-values, in the order given.

    With the m p-values sorted, p_(1) <= ... <= p_(m), the adjusted value of the j-th is
    max over i <= j of min(1, (m - i + 1) p_(i)); rejecting where it is <= alpha is Holm's
    procedure at family-wise error rate alpha.

    Args:
      p_values: m p-values in [0, 1].

    Returns:
      Float[ndarray, "m"].

    Example:
      >>> import fedjax_abc as fa
      >>> fa.stats.holm([0.01, 0.04, 0.03, 0.005]).round(3).tolist()
      [0.03, 0.06, 0.06, 0.02]

    Reference: Holm (1979), Scandinavian Journal of Statistics 6, 65-70.
    """
    p = np.asarray(p_values, dtype=np.float64)
    if p.ndim != 1 or not np.all((p >= 0) & (p <= 1)):
        raise ValueError("p_values must be a 1-D array of numbers in [0, 1]")
    m = p.size
    order = np.argsort(p, kind="stable")
    steps = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted = np.empty(m)
    adjusted[order] = np.maximum.accumulate(steps)
    return adjusted


def stacked_values(runs: Mapping[str, Union[SimResult, np.ndarray]], metric: str = "gap",
                   record: int = -1) -> tuple[tuple[str, ...], np.ndarray, int]:
    """(names, values (k, trials) of the trials no method lost, how many were left out) of
    runs of the same trials (SimResults checked as :func:`check_paired`; arrays taken as
    paired by index)."""
    names = tuple(runs)
    if len(names) < 2:
        raise ValueError(f"runs must name at least 2 methods, got {len(names)}")
    results = [r for r in runs.values() if isinstance(r, SimResult)]
    for r in results[1:]:
        check_paired(results[0], r, record)
    rows = []
    for name, r in runs.items():
        if isinstance(r, SimResult):
            v = np.where(r.diverged, np.nan, trial_values(r, metric, record))
        else:
            v = np.asarray(r, dtype=np.float64)
        if v.ndim != 1:
            raise ValueError(f"runs[{name!r}] must be a SimResult or one number per trial")
        rows.append(v)
    if len({v.size for v in rows}) > 1:
        raise ValueError("the methods' runs must have the same trials, got "
                         + ", ".join(f"{n}: {v.size}" for n, v in zip(names, rows)))
    values = np.stack(rows)
    kept = np.isfinite(values).all(axis=0)
    if kept.sum() < 2:
        raise ValueError("fewer than 2 trials are finite in every method's run")
    return names, values[:, kept], int(values.shape[1] - kept.sum())


class PairComparison(NamedTuple):
    """One pair of :func:`pairwise`: ``first`` minus ``second``, its Holm-adjusted p-value,
    and whether the adjusted test rejects "no difference" at the family's alpha."""

    first: str
    second: str
    difference: Difference
    p_holm: float
    significant: bool


@dataclasses.dataclass(frozen=True)
class Comparisons:
    """What :func:`pairwise` returns: each pair's paired difference with Holm's adjustment.

    Attributes:
      rows: one :class:`PairComparison` per pair, in the order of the methods.
      metric: the metric compared (at ``record``).
      alpha: the family-wise error rate of ``significant`` (1 - level).
    """

    rows: tuple[PairComparison, ...]
    metric: str
    alpha: float

    def table(self) -> str:
        """One line per pair: the difference with its interval, raw and adjusted p-values."""
        pairs = [f"{r.first} - {r.second}" for r in self.rows]
        width = max(len("pair"), *(len(p) for p in pairs))
        lines = [f"{'pair':<{width}} {'mean ' + self.metric:>12} {'interval':^25} "
                 f"{'p':>8} {'p (Holm)':>8}"]
        for pair, r in zip(pairs, self.rows):
            d = r.difference
            mark = " *" if r.significant else ""
            lines.append(f"{pair:<{width}} {d.mean:>+12.4e} [{d.ci_low:+.3e}, {d.ci_high:+.3e}] "
                         f"{d.p_value:8.2g} {r.p_holm:8.2g}{mark}")
        lines.append(f"* different at family-wise error rate {self.alpha:g} (Holm); intervals "
                     f"{1 - self.alpha:.0%} each, paired over {self.rows[0].difference.trials} "
                     "trials")
        return "\n".join(lines)


def pairwise(runs: Mapping[str, Union[SimResult, np.ndarray]], *, baseline: Optional[str] = None,
             metric: str = "gap", record: int = -1, level: float = 0.95,
             method: str = "normal") -> Comparisons:
    """Paired differences of several methods against a baseline, or of all pairs, with Holm's
    adjustment of their p-values.

    Args:
      runs: method name -> its :class:`~fedjax_abc.SimResult` (all of the same trials, as
        :func:`~fedjax_abc.stats.paired_difference` needs) or one number per trial.
      baseline: a name of ``runs``: each other method minus it; None: every pair (first
        minus second in the order of ``runs``).
      metric, record: what is compared (see :func:`~fedjax_abc.stats.trial_values`).
      level: each interval's coverage; the family-wise error rate is 1 - level.
      method: "normal" or "t".

    Returns:
      :class:`Comparisons` (its ``table()`` prints them). Trials lost by any method are
      left out of every pair, so that all pairs share their trials.

    Example:
      >>> import numpy as np, fedjax_abc as fa
      >>> rng = np.random.default_rng(0)
      >>> base = rng.normal(size=200)
      >>> runs = {"A": base, "B": base + 0.5 + 0.1 * rng.normal(size=200),
      ...         "C": base + 0.01 * rng.normal(size=200)}
      >>> [(r.first, r.significant) for r in fa.stats.pairwise(runs, baseline="A").rows]
      [('B', True), ('C', False)]

    Reference: Holm (1979).
    """
    level, method = check_level(level), check_method(method)
    names, values, excluded = stacked_values(runs, metric, record)
    if baseline is not None and baseline not in names:
        raise ValueError(f"baseline ({baseline!r}) must be one of {list(names)}")
    pairs = ([(n, baseline) for n in names if n != baseline] if baseline is not None
             else list(itertools.combinations(names, 2)))
    index = {n: i for i, n in enumerate(names)}
    diffs = []
    for first, second in pairs:
        iv = mean_interval(values[index[first]] - values[index[second]], level=level,
                           method=method)
        diffs.append(Difference(iv.mean, iv.stderr, iv.ci_low, iv.ci_high,
                                p_value(iv.mean, iv.stderr, iv.trials, method), iv.trials,
                                excluded, level, method))
    adjusted = holm([d.p_value for d in diffs])
    alpha = 1.0 - level
    rows = tuple(PairComparison(f, s, d, float(p), bool(p <= alpha))
                 for (f, s), d, p in zip(pairs, diffs, adjusted))
    return Comparisons(rows, metric, alpha)


@dataclasses.dataclass(frozen=True)
class Ranking:
    """What :func:`rank` returns: the methods ranked by mean, with how sure each rank is.

    Attributes:
      names: the methods, best first (by the mean over all trials).
      means: their means, in that order.
      probabilities: Float[ndarray, "methods ranks"]: entry (i, j) is the bootstrap
        probability that ``names[i]`` takes rank j + 1.
      expected: each method's expected rank under the bootstrap.
      draws: the bootstrap's number of resamples.
      trials: the trials resampled (those no method lost).
    """

    names: tuple[str, ...]
    means: np.ndarray
    probabilities: np.ndarray
    expected: np.ndarray
    draws: int
    trials: int

    def table(self) -> str:
        """One line per method: its mean, expected rank and the probability of each rank."""
        k = len(self.names)
        width = max(len(n) for n in self.names)
        head = " ".join(f"{'P(' + str(j + 1) + ')':>6}" for j in range(k))
        lines = [f"{'rank':>4} {'method':<{width}} {'mean':>11} {'E rank':>6} {head}"]
        for i, n in enumerate(self.names):
            probs = " ".join(f"{p:6.2f}" for p in self.probabilities[i])
            lines.append(f"{i + 1:>4} {n:<{width}} {self.means[i]:11.4e} "
                         f"{self.expected[i]:6.2f} {probs}")
        return "\n".join(lines)


def rank(runs: Mapping[str, Union[SimResult, np.ndarray]], *, rng, metric: str = "gap",
         record: int = -1, draws: int = 2000, lower_is_better: bool = True) -> Ranking:
    """The methods ranked by their mean over trials, and the probability of each rank from
    a paired bootstrap over trials.

    Each of the ``draws`` resamples picks n trials with replacement, the same trials for
    every method (the runs are paired), and ranks the methods by their means on them; the
    share of resamples in which method i takes rank j estimates P(rank of i = j). Ties are
    broken by the order of ``runs``.

    Args:
      runs: method name -> its :class:`~fedjax_abc.SimResult` (all of the same trials) or
        one number per trial.
      rng: a ``numpy.random.Generator`` (or an integer seed): the resampling's only source
        of randomness.
      metric, record: what is ranked (see :func:`~fedjax_abc.stats.trial_values`).
      draws: bootstrap resamples.
      lower_is_better: rank 1 is the lowest mean (a gap, a loss); False for the highest.

    Returns:
      :class:`Ranking`.

    Example:
      >>> import numpy as np, fedjax_abc as fa
      >>> rng = np.random.default_rng(0)
      >>> base = rng.normal(size=100)
      >>> r = fa.stats.rank({"A": base, "B": base - 1.0, "C": base - 0.001}, rng=1)
      >>> r.names, r.probabilities[0].round(2).tolist()
      (('B', 'C', 'A'), [1.0, 0.0, 0.0])

    Reference: Efron and Tibshirani (1993), Chapter 6; Hall and Miller (2009).
    """
    rng = generator(rng)
    if isinstance(draws, bool) or not isinstance(draws, (int, np.integer)) or draws < 10:
        raise ValueError(f"draws ({draws!r}) must be an integer >= 10")
    names, values, _ = stacked_values(runs, metric, record)
    sign = 1.0 if lower_is_better else -1.0
    means = values.mean(axis=1)
    order = np.argsort(sign * means, kind="stable")
    k, n = values.shape
    counts = np.zeros((k, k))
    chunk = max(1, min(draws, 2 ** 22 // max(1, n * k)))
    done = 0
    while done < draws:
        b = min(chunk, draws - done)
        idx = rng.integers(0, n, size=(b, n))
        boot = values[:, idx].mean(axis=2)  # (k, b)
        ranks = np.argsort(np.argsort(sign * boot, axis=0, kind="stable"), axis=0, kind="stable")
        for j in range(k):
            counts[:, j] += (ranks == j).sum(axis=1)
        done += b
    probs = counts / draws
    expected = probs @ np.arange(1, k + 1)
    return Ranking(tuple(names[i] for i in order), means[order], probs[order], expected[order],
                   int(draws), int(n))


def against_baseline(result, baseline: Mapping[str, Any], *, metric: str = "gap",
                     record: int = -1, level: float = 0.95,
                     method: str = "normal") -> Comparisons:
    """Every point of a sweep against one of its points: paired differences with Holm's
    adjustment (:func:`pairwise` with the points named by their coordinates).

    The points of one sweep share their key and trials, so each difference is paired over
    the trials (common random numbers).

    Args:
      result: a :class:`~fedjax_abc.SweepResult`.
      baseline: the baseline point's coordinates, as :meth:`~fedjax_abc.SweepResult.point`
        takes them (``{"algorithm": "FedAvg"}``).
      metric, record, level, method: as :func:`pairwise`.

    Returns:
      :class:`Comparisons`, one row a point other than the baseline ("axis=label, ..."
      minus the baseline's name).

    Example:
      >>> import jax, fedjax_abc as fa
      >>> p = fa.problems.huber_offsets(jax.random.key(0), n=10, d_max=20.0)
      >>> res = fa.sweep(p, grid={"stepsize": [1e-3, 1e-2, 3e-2]}, num_sampled=2,
      ...                local_steps=5, rounds=50, x0=p.x_star + 1.0, trials=16,
      ...                key=jax.random.key(1))
      >>> rows = fa.stats.against_baseline(res, {"stepsize": 1e-3}).rows
      >>> [r.first for r in rows], rows[0].second
      (['stepsize=0.01', 'stepsize=0.03'], 'stepsize=0.001')
    """
    if not isinstance(baseline, Mapping):
        raise ValueError(f"baseline must be a dict of the baseline point's coordinates, got "
                         f"{baseline!r}"[:200])
    chosen = result.point(**baseline)

    def name(point: dict) -> str:
        return ", ".join(f"{axis}={label}" for axis, label in point.items())

    runs = {name(p): r for p, r in zip(result.points, result.results)}
    base = next(n for n, r in runs.items() if r is chosen)
    return pairwise(runs, baseline=base, metric=metric, record=record, level=level,
                    method=method)
