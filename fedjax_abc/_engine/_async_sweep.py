"""``sweep_async``: :func:`~fedjax_abc.timing.simulate_async` at every point of a grid, as
one ``fa.sweep`` of a :class:`~fedjax_abc.timing.Buffered` Simulation.

The axes that keep the shapes (a law's parameter, the server stepsize, a staleness
exponent, the stepsize) run as one compiled program; those that change them (C, K, Q,
another rule or clock) as one group each, as ``fa.sweep`` groups any grid.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from fedjax_abc._engine._async import Buffered
from fedjax_abc._engine._result import SweepResult
from fedjax_abc._engine._simulate import Simulation
from fedjax_abc._engine._sweep import check_grid, sweep

__all__ = ["sweep_async"]

# the keyword settings a grid axis may vary, besides "rule.<field>" and "clock.<field>"
_KEYWORDS = ("concurrency", "local_steps", "stepsize", "rule", "clock")
_CALL = ("key", "x0", "stepsize", "trials", "progress")  # fa.sweep's per-call arguments


def sweep_async(problem, rule, clock, *, grid: Mapping[str, Sequence],
                **kwargs) -> SweepResult:
    """:func:`~fedjax_abc.timing.simulate_async` at every point of a grid: ``fa.sweep`` of
    ``Simulation(problem, schedule=Buffered(rule, clock, concurrency), rounds=steps,
    record_x=False, ...)`` over the grid's axes, named as the schedule's (``"rule.buffer"``
    is ``"schedule.rule.buffer"``).

    Args:
      problem, rule, clock: as :func:`~fedjax_abc.timing.simulate_async`; every point's
        unless the grid varies them.
      grid: axis name -> values. Names: ``concurrency``, ``local_steps``, ``stepsize``,
        ``rule``, ``clock``, ``"rule.<field>"`` (``"rule.buffer"`` of FedBuff,
        ``"rule.server_stepsize"``, ``"rule.staleness.a"``) or ``"clock.<field>"``
        (``"clock.compute.mean"``, ``"clock.speed.sigma"``).
      **kwargs: every other argument of ``simulate_async``, the same for all points.

    Returns:
      A :class:`~fedjax_abc.SweepResult` with the grid's axis names; each point's
      :class:`~fedjax_abc.SimResult` is ``simulate_async``'s (``fa.timing.staleness``).

    Example:
      >>> import jax, jax.numpy as jnp, fedjax_abc as fa
      >>> p = fa.problems.quadratics(jax.random.key(0), n=20, d=2)
      >>> out = fa.timing.sweep_async(
      ...     p, fa.timing.FedBuff(2), fa.timing.Clock(fa.timing.Exponential(1.0)),
      ...     grid={"rule.buffer": [1, 2], "clock.compute.mean": [0.5, 2.0]},
      ...     concurrency=4, local_steps=2, stepsize=0.1, steps=20, trials=2,
      ...     key=jax.random.key(1), x0=jnp.ones(2))
      >>> point = out.point(**{"rule.buffer": 2, "clock.compute.mean": 0.5})
      >>> out.shape, fa.timing.staleness(point).shape
      ((2, 2), (2, 17))
    """
    axes = check_grid(grid, _KEYWORDS, ("rule", "clock"), "an asynchronous sweep")
    both = [name for name in axes if name in kwargs]
    if both:
        raise ValueError(f"{both[0]!r} is both a grid axis and a keyword argument")
    first = {name: values[0] for name, values in axes.items()}  # the Simulation's own
    kw = dict(kwargs)
    call = {name: kw.pop(name) for name in _CALL if name in kw}
    rule, clock = first.get("rule", rule), first.get("clock", clock)
    schedule = Buffered(rule, clock, first.get("concurrency", kw.pop("concurrency", None)),
                        kw.pop("staleness_bins", None))
    sim = Simulation(problem, rounds=kw.pop("steps"), record_x=False, schedule=schedule,
                     local_steps=first.get("local_steps", kw.pop("local_steps", None)), **kw)
    names = {name: name if name in ("stepsize", "local_steps") else "schedule." + name
             for name in axes}
    try:
        out = sweep(sim, grid={names[n]: v for n, v in axes.items()}, **call)
    except ValueError as err:  # named as the user named the axis
        raise ValueError(str(err).replace("grid axis 'schedule.", "grid axis '")) from None
    return SweepResult({name: out.axes[names[name]] for name in axes}, out.results)
