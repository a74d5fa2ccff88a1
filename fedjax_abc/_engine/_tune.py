"""Fair comparisons: each algorithm's stepsize tuned on its own keys, reported on fresh ones."""

from __future__ import annotations

import math
from typing import Mapping, NamedTuple, Optional, Sequence

import jax
import numpy as np

from fedjax_abc._algorithms._base import AbstractAlgorithm
from fedjax_abc._engine._result import SimResult, Summary, summarize
from fedjax_abc._engine._simulate import simulate
from fedjax_abc._engine._sweep import sweep
from fedjax_abc._problems._args import check_count, check_key, check_real

__all__ = ["Tuned", "TuneResult", "tune"]

CRITERION = ("the mean over the tuning trials of f(x_T) - f*; a stepsize with a diverged "
             "tuning trial counts as +inf; ties go to the first stepsize of the grid")


class Tuned(NamedTuple):
    """One algorithm of a :func:`tune` comparison.

    Attributes:
      stepsize: the chosen stepsize.
      tuning: stepsize -> the criterion's value on the tuning keys (inf where a trial
        diverged).
      result: the run at the chosen stepsize on the evaluation key.
      final: its final gap over the evaluation trials (mean, stderr, 95% interval).
      vs_reference: the paired difference of final gaps against the reference algorithm
        (trial r against trial r, the same key), a :class:`~fedjax_abc.Summary`; None
        for the reference itself.
    """

    stepsize: float
    tuning: dict
    result: SimResult
    final: Summary
    vs_reference: Optional[Summary]


class TuneResult(NamedTuple):
    """What :func:`tune` returns: the algorithms by name, the reference and the criterion."""

    algorithms: dict
    reference: str
    criterion: str

    def table(self) -> str:
        """One line per algorithm: its stepsize, final gap and difference with 95% intervals."""
        lines = [f"{'algorithm':16s} {'stepsize':>9s} {'final gap (95% CI)':>28s} "
                 f"{'minus ' + self.reference:>30s}"]
        for name, t in self.algorithms.items():
            f, d = t.final, t.vs_reference
            diff = "reference" if d is None else f"{d.mean:+.3e} [{d.ci_low:+.2e}, {d.ci_high:+.2e}]"
            lines.append(f"{name:16s} {t.stepsize:9.3g} {f.mean:.3e} [{f.ci_low:.2e}, "
                         f"{f.ci_high:.2e}] {diff:>30s}")
        return "\n".join(lines)


def _criterion(res: SimResult) -> float:
    if res.num_diverged:
        return math.inf
    return float(np.mean(res.gap[:, -1]))


def tune(problem, algorithms: Mapping[str, AbstractAlgorithm], stepsizes: Sequence[float], *,
         tune_key, eval_key, trials: int, eval_trials: Optional[int] = None,
         reference: Optional[str] = None, **kwargs) -> TuneResult:
    """Tunes each algorithm's stepsize on ``tune_key`` and reports it on ``eval_key``.

    Every (algorithm, stepsize) runs on the tuning key in one :func:`~fedjax_abc.sweep`;
    each algorithm's stepsize is the grid's best by :data:`CRITERION`; then every algorithm
    runs once at its stepsize on the evaluation key, the same key for all, so that trial r
    of two algorithms shares its client samples and noise and their difference is
    estimated from paired trials.

    Args:
      problem: the :class:`~fedjax_abc.Problem`.
      algorithms: name -> algorithm (at least one).
      stepsizes: the grid of constant stepsizes, numbers > 0.
      tune_key, eval_key: two different keys (the evaluation must not reuse the tuning's
        randomness).
      trials: trials per tuning run; ``eval_trials`` per evaluation run (default the same).
      reference: the algorithm the others are compared with (default the first).
      **kwargs: the other arguments of :func:`~fedjax_abc.simulate` (rounds, x0,
        local_steps, num_sampled or sampler, oracle, mode, ...).

    Returns:
      A :class:`TuneResult`; ``.table()`` prints it.

    Example:
      >>> import jax, fedjax_abc as fa
      >>> p = fa.problems.huber_offsets(jax.random.key(0), n=8, d_max=10.0)
      >>> out = fa.tune(p, {"FedAvg": fa.algorithms.FedAvg(), "FedProx": fa.algorithms.FedProx(0.1)},
      ...               [1e-3, 1e-2], tune_key=jax.random.key(1), eval_key=jax.random.key(2),
      ...               trials=8, rounds=50, local_steps=5, num_sampled=2, x0=p.x_star + 2.0)
      >>> sorted(out.algorithms), out.reference
      (['FedAvg', 'FedProx'], 'FedAvg')
    """
    if not isinstance(algorithms, Mapping) or not algorithms:
        raise ValueError("algorithms must be a non-empty dict of name -> algorithm")
    for name, alg in algorithms.items():
        if not isinstance(alg, AbstractAlgorithm):
            raise ValueError(f"algorithms[{name!r}] must be a fedjax_abc.algorithms."
                             f"AbstractAlgorithm, got {type(alg).__name__}")
    grid = [check_real("stepsize", s, low=0.0, strict=True) for s in list(stepsizes)]
    if not grid:
        raise ValueError("stepsizes must hold at least one stepsize")
    tune_key, eval_key = check_key("tune_key", tune_key), check_key("eval_key", eval_key)
    if np.array_equal(jax.random.key_data(tune_key), jax.random.key_data(eval_key)):
        raise ValueError("tune_key and eval_key must differ: the evaluation would reuse the "
                         "tuning's randomness")
    trials = check_count("trials", trials)
    eval_trials = trials if eval_trials is None else check_count("eval_trials", eval_trials)
    names = list(algorithms)
    reference = names[0] if reference is None else reference
    if reference not in algorithms:
        raise ValueError(f"reference ({reference!r}) must be one of {names}")
    for taken in ("stepsize", "key", "trials", "algorithm", "grid"):
        if taken in kwargs:
            raise ValueError(f"tune sets {taken!r} itself; give stepsizes, tune_key/eval_key, "
                             f"trials and algorithms instead")
    swept = sweep(problem, grid={"algorithm": list(algorithms.values()), "stepsize": grid},
                  key=tune_key, trials=trials, **kwargs)
    results = {}
    for a, name in enumerate(names):
        scores = {s: _criterion(swept.results[a * len(grid) + j]) for j, s in enumerate(grid)}
        best = min(grid, key=lambda s: (scores[s], grid.index(s)))
        results[name] = (best, scores)
    runs = {n: simulate(problem, algorithm=algorithms[n], stepsize=results[n][0], key=eval_key,
                        trials=eval_trials, **kwargs) for n in names}
    ref_gap = runs[reference].gap[:, -1]
    out = {}
    for n in names:
        res = runs[n]
        diff = None if n == reference else summarize(res.gap[:, -1] - ref_gap)
        out[n] = Tuned(results[n][0], results[n][1], res, res.final("gap"), diff)
    return TuneResult(out, reference, CRITERION)
