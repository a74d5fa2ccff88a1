"""Fairness across clients: how the clients' losses spread, per trial, then over trials.

A run with ``record_clients=True`` holds every client's loss at its own model at every
record, ``SimResult.client_loss`` (trials, records, n). Each statistic here reduces the n
clients' losses of one trial and record to one number (the worst, the best, the mean, the
variance, the Gini coefficient, a quantile); :func:`fairness` then averages each over the
trials, with a normal 95% interval (:class:`~fedjax_abc.Summary`, as ``SimResult.summary``),
leaving out the trials that diverged.

References: C. Gini, *Variabilita e mutabilita* (1912); S. Yitzhaki and E. Schechtman,
*The Gini Methodology* (Springer, 2013), Chapter 2 (the mean-difference form used here);
R. J. Hyndman and Y. Fan, "Sample quantiles in statistical packages", The American
Statistician 50 (1996) 361-365 (the quantile's definition 7).
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Union

import numpy as np

from fedjax_abc._engine import SimResult, Summary, summarize

__all__ = ["Fairness", "best_loss", "fairness", "gini_coefficient", "loss_quantile",
           "loss_variance", "mean_loss", "worst_loss"]


def _losses(losses) -> np.ndarray:
    try:
        a = np.asarray(losses, np.float64)
    except (TypeError, ValueError):
        raise ValueError("losses must be an array of numbers with the clients last") from None
    if a.ndim < 1 or a.shape[-1] < 1:
        raise ValueError(f"losses must have a clients axis last (n >= 1), got shape {a.shape}")
    return a


def worst_loss(losses) -> np.ndarray:
    """max_i f_i: the worst client's loss, over the last (clients) axis.

    Example:
      >>> import fedjax_abc as fa
      >>> float(fa.stats.worst_loss([1.0, 3.0, 2.0]))
      3.0
    """
    return np.max(_losses(losses), axis=-1)


def best_loss(losses) -> np.ndarray:
    """min_i f_i: the best client's loss, over the last (clients) axis.

    Example:
      >>> import fedjax_abc as fa
      >>> float(fa.stats.best_loss([1.0, 3.0, 2.0]))
      1.0
    """
    return np.min(_losses(losses), axis=-1)


def mean_loss(losses) -> np.ndarray:
    """(1/n) sum_i f_i, over the last (clients) axis.

    Example:
      >>> import fedjax_abc as fa
      >>> float(fa.stats.mean_loss([1.0, 3.0, 2.0]))
      2.0
    """
    return np.mean(_losses(losses), axis=-1)


def loss_variance(losses) -> np.ndarray:
    """(1/n) sum_i (f_i - mean f)^2: the spread of the clients' losses over the last axis
    (divisor n: the n clients are the whole population, not a sample of it).

    Example:
      >>> import fedjax_abc as fa
      >>> round(float(fa.stats.loss_variance([1.0, 3.0, 2.0])), 6)
      0.666667
    """
    return np.var(_losses(losses), axis=-1)


def gini_coefficient(losses) -> np.ndarray:
    """The Gini coefficient of the clients' losses, over the last axis: the mean absolute
    difference over twice the mean,

        G = sum_i sum_j |f_i - f_j| / (2 n^2 mean f)   (Gini 1912; Yitzhaki and Schechtman
                                                         2013, Chapter 2),

    0 when every client has the same loss, (n - 1) / n when one client has it all. Computed
    from the sorted losses f_(1) <= ... <= f_(n) as sum_i (2i - n - 1) f_(i) / (n sum_i f_i)
    (the same number, in O(n log n)). For losses >= 0; NaN where their mean is 0.

    Example:
      >>> import fedjax_abc as fa
      >>> float(fa.stats.gini_coefficient([0.0, 0.0, 0.0, 4.0]))  # one client holds it all
      0.75
    """
    a = np.sort(_losses(losses), axis=-1)
    n = a.shape[-1]
    rank = 2 * np.arange(1, n + 1) - n - 1
    total = np.sum(a, axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total != 0, np.sum(rank * a, axis=-1) / (n * total), np.nan)


def loss_quantile(losses, q: float = 0.1) -> np.ndarray:
    """The q-quantile of the clients' losses over the last axis (linear interpolation,
    Hyndman and Fan's definition 7, NumPy's default): q = 0.1 is the loss that 10% of the
    clients are below.

    Example:
      >>> import fedjax_abc as fa
      >>> float(fa.stats.loss_quantile([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]))
      1.0
    """
    return np.quantile(_losses(losses), _level(q), axis=-1)


def _level(q) -> float:
    if isinstance(q, bool) or not isinstance(q, (int, float, np.floating)) or not 0 <= q <= 1:
        raise ValueError(f"quantile ({q!r}) must be a number in [0, 1]")
    return float(q)


class Fairness(NamedTuple):
    """Each fairness statistic's mean over trials with its normal 95% interval, per record.

    Every field but ``quantile``, ``rounds`` and ``excluded`` is a
    :class:`~fedjax_abc.Summary` whose arrays have one entry per record.

    Attributes:
      worst: of :func:`worst_loss`.
      best: of :func:`best_loss`.
      mean: of :func:`mean_loss`.
      variance: of :func:`loss_variance`.
      gini: of :func:`gini_coefficient`.
      low: of :func:`loss_quantile` at ``quantile``.
      quantile: the quantile ``low`` is of (0.1 by default).
      rounds: the recorded rounds (None from an array of losses).
      trials: the trials summarised.
      excluded: the trials left out (diverged).
    """

    worst: Summary
    best: Summary
    mean: Summary
    variance: Summary
    gini: Summary
    low: Summary
    quantile: float
    rounds: Optional[np.ndarray]
    trials: int
    excluded: int


def fairness(result: Union[SimResult, np.ndarray], *, quantile: float = 0.1) -> Fairness:
    """Fairness summaries over trials of the clients' losses at every record.

    Per trial and record, the worst, best and mean client loss, their variance, Gini
    coefficient and ``quantile``; then each one's mean over the trials with its normal 95%
    interval (mean -/+ 1.96 stderr, as ``SimResult.summary``). A trial that diverged
    (``SimResult.diverged``) or whose recorded client losses are not all finite is left out.

    Args:
      result: a :class:`~fedjax_abc.SimResult` of a run with ``record_clients=True``, or
        its ``client_loss`` array (trials, records, n) (or (trials, n) for one record).
      quantile: the quantile of the losses over the clients to summarise, in [0, 1].

    Returns:
      :class:`Fairness`.

    Raises:
      ValueError: a result without client records, an array of another shape, or no trial
        left to summarise.

    Example:
      >>> import jax, numpy as np, fedjax_abc as fa
      >>> p = fa.problems.quadratics(jax.random.key(0), n=4, d=2)
      >>> res = fa.simulate(p, local_steps=2, stepsize=0.1, rounds=4, trials=3, x0=np.ones(2),
      ...                   key=jax.random.key(1), record_every=2, record_clients=True)
      >>> f = fa.stats.fairness(res)
      >>> f.worst.mean.shape, f.trials, f.excluded
      ((3,), 3, 0)
    """
    q = _level(quantile)
    rounds = None
    if isinstance(result, SimResult):
        if result.client_loss is None:
            raise ValueError("the result has no client losses: run with record_clients=True")
        losses = np.asarray(result.client_loss, np.float64)
        diverged = np.asarray(result.diverged, bool)
        rounds = np.asarray(result.rounds)
    else:
        losses = _losses(result)
        if losses.ndim not in (2, 3):
            raise ValueError(f"client losses must have shape (trials, records, n) or (trials, "
                             f"n), got {losses.shape}")
        diverged = np.zeros(losses.shape[0], bool)
    finite = np.isfinite(losses).reshape(losses.shape[0], -1).all(axis=1)
    keep = ~diverged & finite
    excluded = int(np.count_nonzero(~keep))
    if not keep.any():
        raise ValueError(f"all {losses.shape[0]} trials diverged: no trial to summarise")
    kept = losses[keep]

    def over_trials(values) -> Summary:
        return summarize(values)._replace(excluded=excluded)

    return Fairness(worst=over_trials(worst_loss(kept)), best=over_trials(best_loss(kept)),
                    mean=over_trials(mean_loss(kept)), variance=over_trials(loss_variance(kept)),
                    gini=over_trials(gini_coefficient(kept)),
                    low=over_trials(loss_quantile(kept, q)), quantile=q, rounds=rounds,
                    trials=int(kept.shape[0]), excluded=excluded)
