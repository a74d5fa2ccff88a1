"""Fair comparisons: each algorithm tuned on its own keys, reported on fresh ones."""

from __future__ import annotations

import itertools
import math
from typing import Any, Mapping, NamedTuple, Optional, Sequence

import jax
import numpy as np

from fedjax_abc._algorithms._base import AbstractAlgorithm
from fedjax_abc._engine._result import SimResult, Summary, summarize
from fedjax_abc._engine._simulate import simulate
from fedjax_abc._engine._sweep import sweep, with_field
from fedjax_abc._problems._args import check_count, check_key, check_real

__all__ = ["Tuned", "TuneResult", "tune"]

CRITERION = ("the mean over the tuning trials of f(x_T) - f*; a grid point with a diverged "
             "tuning trial counts as +inf; ties go to the first point of the grid (variants, "
             "then hyperparameters, then stepsizes, each in the order given)")


class Tuned(NamedTuple):
    """One algorithm of a :func:`tune` comparison.

    Attributes:
      stepsize: the chosen stepsize.
      hyperparameters: the chosen values of the tuned hyperparameters, field -> value
        (first ``"variant"``, the chosen variant's label or index in the list, when
        several were given); empty when only the stepsize was tuned.
      algorithm: the chosen algorithm (the variant with the chosen field values).
      tuning: grid point -> the criterion's value on the tuning keys (inf where a trial
        diverged); a point is the stepsize when nothing else is tuned, else the tuple
        (stepsize, then the values of ``hyperparameters`` in its order).
      result: the run at the chosen point on the evaluation key.
      final: its final gap over the evaluation trials (mean, stderr, 95% interval).
      vs_reference: the paired difference of final gaps against the reference algorithm
        (trial r against trial r, the same key), a :class:`~fedjax_abc.Summary`; None
        for the reference itself.
    """

    stepsize: float
    hyperparameters: dict
    algorithm: AbstractAlgorithm
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
                 f"{'minus ' + self.reference:>30s}"
                 + ("  tuned" if any(t.hyperparameters for t in self.algorithms.values())
                    else "")]
        for name, t in self.algorithms.items():
            f, d = t.final, t.vs_reference
            diff = "reference" if d is None else f"{d.mean:+.3e} [{d.ci_low:+.2e}, {d.ci_high:+.2e}]"
            lines.append(f"{name:16s} {t.stepsize:9.3g} {f.mean:.3e} [{f.ci_low:.2e}, "
                         f"{f.ci_high:.2e}] {diff:>30s}" + _setting(t.hyperparameters)
                         + ("  (diverged at every grid point)"
                            if all(math.isinf(v) for v in t.tuning.values()) else ""))
        return "\n".join(lines)


def _setting(hyper: dict) -> str:
    return "  " + ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                            for k, v in hyper.items()) if hyper else ""


def _criterion(res: SimResult) -> float:
    if res.num_diverged:
        return math.inf
    return float(np.mean(res.gap[:, -1]))


def _variants(name: str, given, fields: Mapping) -> list[tuple[AbstractAlgorithm, dict]]:
    """Every (algorithm, hyperparameters) of one entry: each variant with each combination
    of its fields' values."""
    many = isinstance(given, (list, tuple, Mapping))
    labels = list(given) if isinstance(given, Mapping) else None
    variants = list(given.values()) if labels is not None else (list(given) if many else [given])
    if not variants:
        raise ValueError(f"algorithms[{name!r}] must hold at least one algorithm")
    for v in variants:
        if not isinstance(v, AbstractAlgorithm):
            raise ValueError(f"algorithms[{name!r}] must be a fedjax_abc.algorithms."
                             f"AbstractAlgorithm or a list of them, got {type(v).__name__}")
    if not isinstance(fields, Mapping):
        raise ValueError(f"hyperparameters[{name!r}] must be a dict of field -> list of values")
    values = {}
    for field, vals in fields.items():
        if isinstance(vals, (str, bytes)) or not isinstance(vals, Sequence) or not vals:
            raise ValueError(f"hyperparameters[{name!r}][{field!r}] must be a non-empty list "
                             f"of values, got {vals!r}")
        try:
            values[field] = [float(v) for v in vals]
        except (TypeError, ValueError):
            raise ValueError(f"hyperparameters[{name!r}][{field!r}] must hold numbers, got "
                             f"{vals!r}"[:200]) from None
    out = []
    for k, variant in enumerate(variants):
        for combo in itertools.product(*values.values()):
            alg, hyper = variant, ({"variant": k if labels is None else labels[k]} if many
                                   else {})
            for field, value in zip(values, combo):
                try:
                    alg = with_field(alg, "algorithm", field, value)
                except ValueError as e:
                    raise ValueError(f"hyperparameters[{name!r}]: {e}") from None
                hyper[field] = value
            out.append((alg, hyper))
    return out


def tune(problem, algorithms: Mapping[str, Any], stepsizes: Sequence[float], *,
         tune_key, eval_key, trials: int, eval_trials: Optional[int] = None,
         reference: Optional[str] = None, hyperparameters: Optional[Mapping] = None,
         settings: Optional[Mapping] = None, **kwargs) -> TuneResult:
    """Tunes each algorithm on ``tune_key`` and reports it on ``eval_key``.

    Each algorithm's grid (its variants, times the values of its tuned hyperparameters,
    times the stepsizes) runs on the tuning key in one :func:`~fedjax_abc.sweep`, which
    compiles once per shape (values of array fields share one program); the best point by
    :data:`CRITERION` is picked; then every algorithm runs once at its pick on the
    evaluation key, the same key for all, so that trial r of two algorithms shares its
    client samples and noise and their difference is estimated from paired trials.

    Args:
      problem: the :class:`~fedjax_abc.Problem`.
      algorithms: name -> an algorithm, or variants of one to pick from (e.g. ``FedAdam``
        at several server learning rates, which are not array fields): a list, or a dict
        label -> algorithm.
      stepsizes: the grid of constant stepsizes, numbers > 0.
      tune_key, eval_key: two different keys (the evaluation must not reuse the tuning's
        randomness).
      trials: trials per tuning run; ``eval_trials`` per evaluation run (default the same).
      reference: the algorithm the others are compared with (default the first).
      hyperparameters: name -> {array field -> list of values} to tune with the stepsize,
        e.g. ``{"FedProx": {"mu": [0.01, 0.1, 1.0]}}``; the other algorithms keep theirs.
      settings: name -> {simulate argument -> value} that one algorithm runs with instead
        of ``kwargs``'s (e.g. Scaffnew's ``local_steps``).
      **kwargs: the other arguments of :func:`~fedjax_abc.simulate` (rounds, x0,
        local_steps, num_sampled or sampler, oracle, mode, ...).

    Returns:
      A :class:`TuneResult`; ``.table()`` prints it.

    Example:
      >>> import jax, fedjax_abc as fa
      >>> p = fa.problems.huber_offsets(jax.random.key(0), n=8, d_max=10.0)
      >>> out = fa.tune(p, {"FedAvg": fa.algorithms.FedAvg(), "FedProx": fa.algorithms.FedProx(0.1)},
      ...               [1e-3, 1e-2], tune_key=jax.random.key(1), eval_key=jax.random.key(2),
      ...               trials=8, rounds=50, local_steps=5, num_sampled=2, x0=p.x_star + 2.0,
      ...               hyperparameters={"FedProx": {"mu": [0.01, 0.1]}})
      >>> sorted(out.algorithms), out.reference, sorted(out.algorithms["FedProx"].hyperparameters)
      (['FedAvg', 'FedProx'], 'FedAvg', ['mu'])
    """
    if not isinstance(algorithms, Mapping) or not algorithms:
        raise ValueError("algorithms must be a non-empty dict of name -> algorithm")
    names = list(algorithms)
    hyperparameters = _per_algorithm("hyperparameters", hyperparameters, names)
    settings = _per_algorithm("settings", settings, names)
    grids = {n: _variants(n, algorithms[n], hyperparameters.get(n, {})) for n in names}
    grid = [check_real("stepsize", s, low=0.0, strict=True) for s in list(stepsizes)]
    if not grid:
        raise ValueError("stepsizes must hold at least one stepsize")
    tune_key, eval_key = check_key("tune_key", tune_key), check_key("eval_key", eval_key)
    if np.array_equal(jax.random.key_data(tune_key), jax.random.key_data(eval_key)):
        raise ValueError("tune_key and eval_key must differ: the evaluation would reuse the "
                         "tuning's randomness")
    trials = check_count("trials", trials)
    eval_trials = trials if eval_trials is None else check_count("eval_trials", eval_trials)
    if eval_trials < 2:
        raise ValueError(f"eval_trials (default: trials) must be >= 2, got {eval_trials}: the "
                         "evaluation's standard errors and paired differences need two trials")
    reference = names[0] if reference is None else reference
    if reference not in algorithms:
        raise ValueError(f"reference ({reference!r}) must be one of {names}")
    for taken in ("stepsize", "key", "trials", "algorithm", "grid"):
        if taken in kwargs or any(taken in s for s in settings.values()):
            raise ValueError(f"tune sets {taken!r} itself; give stepsizes, tune_key/eval_key, "
                             f"trials and algorithms instead")
    picks = {}
    for name in names:
        points = grids[name]
        swept = sweep(problem, grid={"algorithm": [a for a, _ in points], "stepsize": grid},
                      key=tune_key, trials=trials, **{**kwargs, **settings.get(name, {})})
        # the sweep's results in C order: point k is variant k // len(grid), stepsize k % len(grid)
        values = [_criterion(res) for res in swept.results]
        keys = [(s,) + tuple(hyper.values()) if hyper else s for _, hyper in points for s in grid]
        k = min(range(len(values)), key=lambda k: (values[k], k))
        picks[name] = (grid[k % len(grid)], points[k // len(grid)], dict(zip(keys, values)))
    runs = {n: simulate(problem, algorithm=picks[n][1][0], stepsize=picks[n][0], key=eval_key,
                        trials=eval_trials, **{**kwargs, **settings.get(n, {})})
            for n in names}
    ref_gap = runs[reference].gap[:, -1]
    out = {}
    for n in names:
        res = runs[n]
        diff = None if n == reference else summarize(res.gap[:, -1] - ref_gap)
        step, (alg, hyper), scores = picks[n]
        out[n] = Tuned(step, dict(hyper), alg, scores, res, res.final("gap"), diff)
    return TuneResult(out, reference, CRITERION)


def _per_algorithm(what: str, given, names: list) -> dict:
    """``hyperparameters`` or ``settings``: a dict keyed by names of ``algorithms``."""
    if given is None:
        return {}
    if not isinstance(given, Mapping):
        raise ValueError(f"{what} must be a dict of algorithm name -> dict")
    for name, value in given.items():
        if name not in names:
            raise ValueError(f"{what}[{name!r}]: {name!r} is not one of the algorithms {names}")
        if not isinstance(value, Mapping):
            raise ValueError(f"{what}[{name!r}] must be a dict, got {type(value).__name__}")
    return dict(given)
