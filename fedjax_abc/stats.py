"""Comparisons a reviewer accepts: paired differences, several methods at once, skewed
metrics, trial counts from power, and precision-targeted runs.

Runs of the same key, trials and rounds share their random numbers trial by trial (common
random numbers), so two algorithms are compared on paired trials:

- paired differences of any recorded metric at any record: :func:`paired_difference`
  (mean, standard error, normal or t interval, p-value), :func:`paired_values`,
  :func:`trial_values`, :func:`mean_interval`;
- several methods at once: :func:`pairwise` (against a baseline or all pairs, Holm's
  adjustment), :func:`against_baseline` (every point of a sweep against one of its points), :func:`holm`, :func:`rank` (the probability of each rank from a paired
  bootstrap);
- skewed or heavy-tailed metrics: :func:`bootstrap_interval` (BCa, percentile, basic; of
  the mean, the median or a quantile), :func:`describe` (next to the normal interval);
- trial counts: :func:`trials_needed` (from a pilot's paired differences),
  :func:`t_trials`, :func:`normal_trials`, :func:`achieved_power`;
- fairness across clients (a run with ``record_clients=True``): :func:`fairness` (the
  worst, best and mean client loss, their variance, Gini coefficient and 10% quantile per
  trial, with 95% intervals over trials), one function per statistic (:func:`worst_loss`,
  :func:`best_loss`, :func:`mean_loss`, :func:`loss_variance`, :func:`gini_coefficient`,
  :func:`loss_quantile`);
- precision-targeted runs: :func:`run_until` (trials in batches until the 95% half-width
  is below a target, under an anytime-valid confidence sequence,
  :func:`confidence_sequence_half_width`).

Every function is pure: resampling takes an explicit ``numpy.random.Generator`` (or a
seed), results are small immutable types.

Example:
  >>> import jax, fedjax_abc as fa
  >>> p = fa.problems.huber_offsets(jax.random.key(0), n=10, d_max=20.0)
  >>> kw = dict(num_sampled=2, local_steps=5, stepsize=1e-2, rounds=50, trials=16,
  ...           x0=p.x_star + 1.0, key=jax.random.key(1))
  >>> fedavg = fa.simulate(p, **kw)
  >>> fedprox = fa.simulate(p, algorithm=fa.algorithms.FedProx(mu=0.1), **kw)
  >>> fa.stats.paired_difference(fedprox, fedavg).trials
  16

References: Law, *Simulation Modeling and Analysis* (2015); Holm (1979); Efron (1987);
Chow, Shao and Wang (2008); Howard, Ramdas, McAuliffe and Sekhon (2021); Morris, White and
Crowther, "Using simulation studies to evaluate statistical methods", Statistics in
Medicine 38 (2019) 2074-2102 (the checklist the tests follow).
"""

from fedjax_abc._stats._bootstrap import (BootstrapInterval, Description, bootstrap_interval,
                                          describe)
from fedjax_abc._stats._fairness import (Fairness, best_loss, fairness, gini_coefficient,
                                         loss_quantile, loss_variance, mean_loss, worst_loss)
from fedjax_abc._stats._intervals import Interval, mean_interval
from fedjax_abc._stats._multiple import (Comparisons, PairComparison, Ranking, against_baseline,
                                         holm, pairwise, rank)
from fedjax_abc._stats._paired import (Difference, check_paired, paired_difference,
                                       paired_values, trial_values)
from fedjax_abc._stats._power import (TrialPlan, achieved_power, normal_trials, t_trials,
                                      trials_needed)
from fedjax_abc._stats._sequential import (BudgetWarning, Look, TargetedRun,
                                           confidence_sequence_half_width, run_until,
                                           sequential_half_width)

__all__ = [
    "BootstrapInterval",
    "BudgetWarning",
    "Comparisons",
    "Description",
    "Difference",
    "Fairness",
    "Interval",
    "Look",
    "PairComparison",
    "Ranking",
    "TargetedRun",
    "TrialPlan",
    "achieved_power",
    "against_baseline",
    "best_loss",
    "bootstrap_interval",
    "check_paired",
    "confidence_sequence_half_width",
    "describe",
    "fairness",
    "gini_coefficient",
    "holm",
    "loss_quantile",
    "loss_variance",
    "mean_interval",
    "mean_loss",
    "normal_trials",
    "paired_difference",
    "paired_values",
    "pairwise",
    "rank",
    "run_until",
    "sequential_half_width",
    "t_trials",
    "trial_values",
    "trials_needed",
    "worst_loss",
]
