"""A grid of asynchronous runs: the clock's laws, the rule's parameters, C and K as axes.

Each point is :func:`~fedjax_abc._engine._async.simulate_async` with the point's values put
in. The axes that keep the shapes (a law's parameter, the server stepsize, a staleness
exponent, the stepsize) are one ``fa.sweep`` of a :class:`~fedjax_abc.timing.Buffered`
Simulation: one compiled program for all their points; the axes that change them (C, K,
Q, another rule or clock) run one such sweep each.
"""

from __future__ import annotations

import dataclasses
import itertools
import numbers
from typing import Mapping, Sequence

from fedjax_abc._engine._async import AsyncResult, Buffered
from fedjax_abc._engine._names import coordinate_labels
from fedjax_abc._engine._result import SweepResult
from fedjax_abc._engine._simulate import Simulation
from fedjax_abc._engine._sweep import check_grid, sweep, with_field

__all__ = ["AsyncSweepResult", "sweep_async"]

# the keyword settings a grid axis may vary, besides "rule.<field>" and "clock.<field>"
_KEYWORDS = ("concurrency", "local_steps", "stepsize", "rule", "clock")


@dataclasses.dataclass(frozen=True)
class AsyncSweepResult:
    """What :func:`sweep_async` returns.

    Attributes:
      sweep: the records of every point (:class:`~fedjax_abc.SweepResult`: ``point``,
        ``to_dataframe``, ``to_xarray``).
      staleness: every point's staleness counts (trials, bins), in the sweep's order.
    """

    sweep: SweepResult
    staleness: tuple

    def point(self, **labels) -> AsyncResult:
        """The :class:`~fedjax_abc.timing.AsyncResult` of the point with these labels."""
        result = self.sweep.point(**labels)
        j = next(j for j, r in enumerate(self.sweep.results) if r is result)
        return AsyncResult(result, self.staleness[j])


def _with(rule, clock, kwargs: dict, name: str, value):
    """(rule, clock, kwargs) with the axis ``name`` set to ``value``; a value its component
    refuses is a ValueError in one line (an array's value printed on one)."""
    try:
        return _put(rule, clock, kwargs, name, value)
    except ValueError as err:
        raise ValueError(" ".join(str(err).split())) from None


def _put(rule, clock, kwargs: dict, name: str, value):
    head, _, field = name.partition(".")
    if head == "rule" and field == "buffer":
        try:
            return dataclasses.replace(rule, buffer=value), clock, kwargs
        except TypeError:
            raise ValueError(f"grid axis 'rule.buffer': {type(rule).__name__}'s buffer is fixed "
                             "(FedAsync takes one arrival a step)") from None
    if head == "rule":
        return (with_field(rule, "rule", field, value) if field else value), clock, kwargs
    if head == "clock":
        return rule, (with_field(clock, "clock", field, value) if field else value), kwargs
    return rule, clock, {**kwargs, name: value}


def sweep_async(problem, rule, clock, *, grid: Mapping[str, Sequence],
                **kwargs) -> AsyncSweepResult:
    """:func:`~fedjax_abc.timing.simulate_async` at every point of a grid.

    Args:
      problem, rule, clock: as :func:`~fedjax_abc.timing.simulate_async`; every point's
        unless the grid varies them.
      grid: axis name -> values. Names: ``concurrency``, ``local_steps``, ``stepsize``,
        ``rule``, ``clock``, ``"rule.<field>"`` (``"rule.buffer"`` of FedBuff,
        ``"rule.server_stepsize"``, ``"rule.staleness.a"``) or ``"clock.<field>"``
        (``"clock.compute.mean"``, ``"clock.speed.sigma"``).
      **kwargs: every other argument of ``simulate_async``, the same for all points.

    The points are labelled as :func:`~fedjax_abc.sweep` labels them: numbers, a rule or a
    clock by its description (``"FedBuff(buffer=2, ...)"``; ``point(rule="FedBuff")`` or
    ``point(rule=fa.timing.FedBuff(2))`` finds it).

    Example:
      >>> import jax, jax.numpy as jnp, fedjax_abc as fa
      >>> p = fa.problems.quadratics(jax.random.key(0), n=20, d=2)
      >>> out = fa.timing.sweep_async(
      ...     p, fa.timing.FedBuff(2), fa.timing.Clock(fa.timing.Exponential(1.0)),
      ...     grid={"rule.buffer": [1, 2], "clock.compute.mean": [0.5, 2.0]},
      ...     concurrency=4, local_steps=2, stepsize=0.1, steps=20, trials=2,
      ...     key=jax.random.key(1), x0=jnp.ones(2))
      >>> point = out.point(**{"rule.buffer": 2, "clock.compute.mean": 0.5})
      >>> out.sweep.shape, point.staleness.shape
      ((2, 2), (2, 17))
    """
    axes = check_grid(grid, _KEYWORDS, ("rule", "clock"), "an asynchronous sweep")
    for name in axes:
        if name in kwargs:
            raise ValueError(f"{name!r} is both a grid axis and a keyword argument")
    # the axes that change a program's shapes or components' classes run one fa.sweep each;
    # the others (an array field of the rule or the clock, the stepsize) are its axes
    fixed = [n for n in axes if n in ("rule", "clock", "concurrency", "local_steps")
             or n == "rule.buffer"]
    swept = [n for n in axes if n not in fixed]
    results = {}
    for values in itertools.product(*(axes[n] for n in fixed)):
        r, c, kw = rule, clock, dict(kwargs)
        for name, value in zip(fixed, values):
            r, c, kw = _with(r, c, kw, name, value)
        for name in swept:  # each swept value checked as its component checks it
            for value in axes[name]:
                _with(r, c, kw, name, value)
        points = _points(problem, r, c, kw, {n: axes[n] for n in swept})
        for rest, result in points.items():
            results[tuple(_key(v) for v in values) + rest] = result
    ordered = []  # the points in the grid's order: the product of the axes as given
    for point in itertools.product(*axes.values()):
        value = dict(zip(axes, point))
        ordered.append(results[tuple(_key(value[n]) for n in fixed + swept)])
    labels = {name: coordinate_labels(name, values) for name, values in axes.items()}
    return AsyncSweepResult(SweepResult(labels, tuple(r for r, _ in ordered)),
                            tuple(st for _, st in ordered))


def _key(value):
    return value if isinstance(value, numbers.Real) else id(value)


def _points(problem, rule, clock, kwargs: dict, swept: dict) -> dict:
    """The runs of one set of fixed settings: values of the swept axes (tuples, in
    ``swept``'s order, of :func:`_key`) -> (SimResult, staleness counts). One ``fa.sweep``
    over the swept axes: one compiled program for all of them."""
    kw = dict(kwargs)
    schedule = Buffered(rule, clock, kw.pop("concurrency"), kw.pop("staleness_bins", None))
    call = {name: kw.pop(name) for name in ("key", "x0", "stepsize", "trials") if name in kw}
    progress = kw.pop("progress", False)
    sim = Simulation(problem, rounds=kw.pop("steps"), record_x=False, schedule=schedule, **kw)
    if not swept:
        res = sim.run(**call, progress=progress)
        return {(): (res, res.metrics["staleness"][:, -1])}
    grid = {("schedule." + n if n != "stepsize" else n): v for n, v in swept.items()}
    call.pop("stepsize", None) if "stepsize" in swept else None
    out = sweep(sim, grid=grid, progress=progress, **call)
    points = itertools.product(*(swept[n] for n in swept))
    return {tuple(_key(v) for v in point): (res, res.metrics["staleness"][:, -1])
            for point, res in zip(points, out.results)}
