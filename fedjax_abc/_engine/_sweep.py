"""``sweep``: a grid of settings as one compiled program per shape.

A grid point is a Simulation: the base one (given, or built from the keyword settings) with
the point's values put in, a component or one of its fields by ``eqx.tree_at`` (checked, and
built again where it changes the program's structure, as ``Simulation.run`` does), a setting
of the spec (S, Q, the mode) by building the Simulation again. Points whose settings
differ only in data (the stepsizes, x0, the array leaves of the problem, oracle, sampler,
algorithm and law of local steps: ``FedProx(mu)``, ``FedAvg(server_stepsize)``, a problem's
offsets, ``GeometricSteps(p, Q_max)``) run together:
their values are stacked along a leading grid axis G and the compiled segment is ``vmap``-ped
over it, outside the trials axis (gymnax's layering: trials -> population of params). Only
leaves that differ between the points get the axis; the others are shared. Points that
differ in shapes (S, Q, n, mode, the algorithm's class) run one group after another, one
compilation per group. Trial r of grid point g uses ``fold_in(key, r)`` as in ``simulate``,
so its numbers are those of ``simulate`` with the same arguments and key.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import math
import numbers
from typing import Callable, Mapping, Optional, Sequence, Union

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_abc._algorithms._base import recheck_all
from fedjax_abc._engine import _memory, _metrics
from fedjax_abc._engine._chunk import Grid, run_chunk, stack
from fedjax_abc._engine._result import SimResult, SweepResult, warn_divergence
from fedjax_abc._engine._progress import AbstractProgressMeter, Reporting, progress_meter
from fedjax_abc._engine._names import coordinate_labels
from fedjax_abc._engine._run import CheckedRun, check_call, settings
from fedjax_abc._engine._simulate import _SETTINGS, Simulation, _assemble
from fedjax_abc._problems._problem import Problem
from fedjax_abc._problems._samplers import is_of_size

__all__ = ["sweep", "GRID_NAMES", "check_grid", "with_field"]

# simulate's arguments a grid may vary; "algorithm.<field>", "oracle.<field>" and
# "sampler.<field>" replace one array field of that component
GRID_NAMES = ("stepsize", "x0", "num_sampled", "local_steps", "mode", "sampler", "oracle",
              "algorithm", "problem", "transform", "aggregator", "byzantine", "schedule")
_COMPONENTS = ("algorithm", "oracle", "sampler", "transform", "aggregator", "byzantine",
               "schedule")
_REQUIRED = ("local_steps", "stepsize", "rounds", "x0", "key")
_CALL = ("stepsize", "x0", "key", "trials")  # the arguments of Simulation.run a sweep takes


# ---------------------------------------------------------------------------- the grid


def check_grid(grid, names: tuple, components: tuple, what: str = "a sweep") -> dict:
    """A grid as axis name -> list of values: a non-empty dict whose names are ``names`` or
    ``"<component>.<field>"`` of ``components``, each with a non-empty list of values."""
    if not isinstance(grid, Mapping) or not grid:
        raise ValueError("grid must be a non-empty dict: setting name -> list of values, e.g. "
                         f"{{{names[0]!r}: [...]}}")
    out = {}
    for name, values in grid.items():
        head, _, field = name.partition(".")
        if not ((not field and name in names) or (field and head in components)):
            fields = ", ".join(f"'{c}.<field>'" for c in components)
            raise ValueError(f"grid axis {name!r} is not a setting {what} can vary; use one of "
                             f"{', '.join(names)} or {fields}")
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) and not (
                isinstance(values, np.ndarray) and values.ndim >= 1):
            raise ValueError(f"grid axis {name!r} must be a list of values, got {values!r}")
        out[name] = list(values)
        if not out[name]:
            raise ValueError(f"grid axis {name!r} has no values")
    return out


def _check_grid(grid) -> dict:
    out = check_grid(grid, GRID_NAMES, _COMPONENTS)
    for comp in _COMPONENTS:
        if comp in out and any(n.startswith(comp + ".") for n in out):
            raise ValueError(f"grid varies {comp!r} and one of its fields: vary one or the other")
    if "sampler" in out and "num_sampled" in out:
        raise ValueError("grid varies both 'sampler' and 'num_sampled': vary one or the other")
    return out


def _get(component, field: str):
    """The value at a dotted path of fields (an integer picks an entry of a tuple:
    ``"transforms.1.stddev"`` of a chain), or None where there is none."""
    value = component
    for part in field.split("."):
        if isinstance(value, tuple) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        elif not part.isdigit() and hasattr(value, part):
            value = getattr(value, part)
        else:
            return None
    return value


def with_field(component, name: str, field: str, value):
    """``component`` with its field ``field`` set to ``value``: an array field keeps its
    shape (data: the points share a program); any other field (a count, a rule, a law) is
    given to the constructor of the module that holds it, whose checks it passes (a new
    shape or class: the point runs in a group of its own)."""
    old = _get(component, field)
    if not isinstance(old, (jax.Array, np.ndarray)):
        return _rebuilt(component, name, field, value)
    floating = jnp.issubdtype(old.dtype, jnp.floating)
    new = np.asarray(value, dtype=np.float64 if floating else old.dtype)
    if not floating and np.shape(value) == new.shape and not np.array_equal(
            np.asarray(value), new):  # 0.5 would become True, 2.7 would become 2
        raise ValueError(f"grid axis '{name}.{field}': values must be {np.dtype(old.dtype)}, "
                         f"got {np.asarray(value).tolist()}"[:200])
    if new.shape != old.shape:
        raise ValueError(f"grid axis '{name}.{field}': values must have shape {old.shape}, "
                         f"got {new.shape}")
    if not np.all(np.isfinite(new)):
        raise ValueError(f"grid axis '{name}.{field}': values must be finite, got {value!r}")
    changed = eqx.tree_at(lambda c: _get(c, field), component, jnp.asarray(new, old.dtype))
    try:  # the checks its constructor would make of this value
        recheck_all(changed)
    except ValueError as e:
        raise ValueError(f"grid axis '{name}.{field}' value {value!r}: {e}") from None
    return changed


def _rebuilt(component, name: str, field: str, value):
    """``component`` with the field at the end of the dotted path ``field`` (not an array)
    set to ``value`` by its holder's constructor, given the holder's other fields by name
    (each of its parameters must be a field: a constructor that keeps a parameter under
    another name cannot be called again faithfully), the holder put back in its place."""
    path, _, last = field.rpartition(".")
    holder = _get(component, path) if path else component
    if not isinstance(holder, eqx.Module):
        raise ValueError(f"grid axis '{name}.{field}': {type(component).__name__} has no "
                         f"field {path!r}")
    kept = {f.name for f in dataclasses.fields(holder)}
    params = [p.name for p in inspect.signature(type(holder)).parameters.values()
              if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    cls = type(holder).__name__
    if last not in params or last not in kept:
        raise ValueError(f"grid axis '{name}.{field}': {cls} has no field {last!r} its "
                         "constructor takes")
    lost = [p for p in params if p not in kept]
    if lost:
        raise ValueError(f"grid axis '{name}.{field}': {cls}'s constructor takes {lost}, which "
                         "it does not keep as fields: it cannot be built again with a new "
                         f"{last!r}")
    try:
        new = type(holder)(**{p: value if p == last else object.__getattribute__(holder, p)
                              for p in params})
        changed = eqx.tree_at(lambda c: _get(c, path), component, new) if path else new
        recheck_all(changed)
    except (TypeError, ValueError) as e:
        raise ValueError(" ".join(f"grid axis '{name}.{field}' value {value!r}: {e}".split())
                         [:300]) from None
    return changed


def _given_labels(name: str, given, values: list) -> tuple:
    """The user's labels of an axis's values: strings or numbers, one a value, all different."""
    if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
        raise ValueError(f"labels[{name!r}] must be a list of labels, got {given!r}"[:200])
    given = tuple(given)
    if len(given) != len(values):
        raise ValueError(f"labels[{name!r}] has {len(given)} labels for the axis's "
                         f"{len(values)} values")
    if not all(isinstance(x, (str, numbers.Real)) and not isinstance(x, bool) for x in given):
        raise ValueError(f"labels[{name!r}] must be strings or numbers, got {list(given)}"[:200])
    if len(set(given)) < len(given):
        raise ValueError(f"labels[{name!r}] must all differ, got {list(given)}"[:200])
    return given


def _component(sim: Simulation, name: str):
    """The Simulation's component ``name`` as it runs (the oracle: the problem's own where
    none is given)."""
    return sim.oracle if name == "oracle" else getattr(sim.components, name)


def _put(sim: Simulation, name: str, value) -> Simulation:
    """``sim`` with its component ``name`` replaced by ``value`` (``eqx.tree_at``)."""
    return eqx.tree_at(lambda s: getattr(s.components, name), sim, value,
                       is_leaf=lambda x: x is None)


def _point(base: Simulation, point: dict) -> Simulation:
    """The Simulation of one grid point: ``base`` with the point's values put in. A component
    or one of its fields is put in with ``eqx.tree_at`` (checked and, where it changes the
    program's structure, built again when the point is checked, as ``Simulation.run``
    does); a setting of the spec (S, Q, the mode) builds the Simulation again with it."""
    sim, settings_ = base, {}
    for name, value in point.items():
        head, _, field = name.partition(".")
        if name in _CALL:
            continue
        if field:
            part = _component(sim, head)
            if part is None:
                raise ValueError(f"grid axis {name!r} needs a {head}= to vary")
            sim = _put(sim, head, with_field(part, head, field, value))
        elif name == "problem" or name in _COMPONENTS:
            sim = _put(sim, name, value)
        else:
            settings_[name] = value
    if not settings_:
        return sim
    args = settings(sim.components, sim.spec)
    if "num_sampled" in settings_:  # S on an axis: the default sampler of that size
        args["sampler"] = None
    return Simulation(**dict(args, **settings_))


def _point_run(base: Simulation, point: dict, call: dict) -> CheckedRun:
    """The checked run of one grid point (:func:`_point`), with the point's per-call values
    (stepsize, x0) in ``call``."""
    sim = _point(base, point)
    call = dict(call, **{name: value for name, value in point.items() if name in _CALL})
    return check_call(sim.components, sim.spec, **call)


# ------------------------------------------------------------------ groups of one shape


def _shape_key(run: CheckedRun):
    """What sets the compiled program: structure, static fields, leaf shapes, counts."""
    leaves, treedef = jax.tree_util.tree_flatten(run.parts())
    described = tuple((np.shape(a), str(a.dtype)) if isinstance(a, (jax.Array, np.ndarray))
                      else ("static", type(a).__name__, repr(a)) for a in leaves)
    spec, call = run.spec, run.call
    return (treedef, described, spec.rounds, call.trials, spec.record.every,
            spec.execution.mode, np.dtype(run.dtype).str, call.chunk, spec.record.x, spec.record.clients,
            spec.metric_names,
            spec.stat_names, spec.execution.generator,
            tuple(str(d) for d in call.devices), call.x0.shape)


def _run_group(runs: list[CheckedRun], bar: Reporting, done_before: int) -> list:
    """The results of grid points of one shape, run together chunk by chunk by the runner
    ``simulate`` uses; returns one SimResult each and the rounds done so far."""
    first = runs[0]
    spec, call, problem = first.spec, first.call, first.components.problem
    G = len(runs)
    plan = first.plan(bar.reports, every_device=True)
    _memory.check_run(first._replace(call=call._replace(trials=call.trials * G,
                                                        chunk=call.chunk * G)),
                      plan._replace(per_call=plan.per_call * G))
    stacked, axes = stack([r.parts() for r in runs])
    group = Grid(tuple(runs), stacked, axes)
    num_chunks = math.ceil(call.trials / call.chunk)
    chunks = [run_chunk(group, plan, c, bar, done_before) for c in range(num_chunks)]
    results = [_assemble(r, [{name: out[name][g] for name in out} for out in chunks])
               for g, r in enumerate(runs)]
    return results, done_before + G * spec.rounds * num_chunks


def _base(problem, grid: dict, kwargs: dict) -> tuple[Simulation, dict]:
    """The Simulation every grid point starts from and the per-call arguments: a given
    Simulation as it is, or one built from the keyword settings and the grid's first values
    of the settings on its axes."""
    call = {name: kwargs[name] for name in _CALL if name in kwargs}
    unknown = set(kwargs) - set(_SETTINGS) - set(_CALL)
    if unknown:
        raise ValueError(f"sweep got unknown arguments {sorted(unknown)}")
    if isinstance(problem, Simulation):
        given = sorted(set(kwargs) & set(_SETTINGS))
        if given:
            raise ValueError(f"sweep of a Simulation takes only the per-call arguments (key, "
                             f"x0, stepsize, trials); {given} are the Simulation's: build it "
                             "with them")
        if "num_sampled" in grid and not is_of_size(problem.sampler):
            raise ValueError(f"grid axis 'num_sampled' replaces the sampler, but the Simulation "
                             f"has a {type(problem.sampler).__name__}; vary 'sampler' instead")
        base = problem
    else:
        missing = [name for name in _REQUIRED if name not in kwargs and name not in grid]
        if missing:
            raise ValueError(f"sweep needs {', '.join(missing)} (as for simulate)")
        own = {name: value for name, value in kwargs.items() if name in _SETTINGS}
        first = {name: values[0] for name, values in grid.items() if name in _SETTINGS}
        base = Simulation(grid["problem"][0] if "problem" in grid else problem, **own, **first)
    overlap = set(grid) & set(kwargs)
    if overlap:
        raise ValueError(f"{sorted(overlap)} given both as a grid axis and as an argument")
    return base, call


def sweep(
    problem: Union[Problem, Simulation],
    *,
    grid: Mapping[str, Sequence],
    progress: Union[bool, Callable, AbstractProgressMeter] = False,
    labels: Optional[Mapping[str, Sequence]] = None,
    **kwargs,
) -> SweepResult:
    """Runs :func:`~fedjax_abc.simulate` at every point of a grid, one program per shape.

    The grid is the Cartesian product of its axes, in the order given. Points that differ
    only in data (stepsize or schedule, x0, the array fields of the algorithm, oracle,
    sampler, laws of local steps of one kind and Q_max, or problems of the same shapes) run
    as one compiled program, the grid being one more ``vmap``-ped axis outside the trials;
    points that differ in shapes (num_sampled, an int local_steps, mode, the algorithm's
    class, n) run group after group, compiling once each.

    Args:
      problem: the :class:`~fedjax_abc.Problem` (unless the grid has a ``problem`` axis, it
        is every point's), or a :class:`~fedjax_abc.Simulation`: its components as they are
        and its settings are every point's, and ``kwargs`` takes only the per-call
        arguments (``key``, ``x0``, ``stepsize``, ``trials``); a grid point is then the
        Simulation with the point's values put in (a ``"algorithm.mu"`` axis: its
        ``eqx.tree_at``), and its results are those of the point's ``Simulation.run``.
      grid: axis name -> list of values. Names: any of ``stepsize``, ``x0``,
        ``num_sampled``, ``local_steps``, ``mode``, ``sampler``, ``oracle``, ``algorithm``,
        ``transform``, ``aggregator``, ``byzantine``, ``problem``, or
        ``"algorithm.<field>"`` / ``"oracle.<field>"`` / ``"sampler.<field>"`` /
        ``"transform.<field>"`` / ``"aggregator.<field>"`` / ``"byzantine.<field>"`` for
        one field of that component (``"byzantine.attack.tau"``) (e.g. ``"algorithm.mu"`` with ``algorithm=FedProx(0.0)``,
        ``"algorithm.server_stepsize"`` of the default FedAvg, ``"oracle.C"``,
        ``"transform.levels"`` of QSGD, ``"transform.noise_multiplier"`` of ``dp_fedavg``);
        a dotted path reaches into nested components, an integer into a chain
        (``"transform.transforms.1.stddev"`` of ``chain(Clip(c), GaussianNoise(s))``). An
        array field keeps its shape (the points share a program); any other field (a count,
        a rule, a law: ``"sampler.num_sampled"``, ``"schedule.rule.buffer"``) is given to
        the constructor of the module holding it, and its points run in groups of one shape.
        Values are given as to ``simulate``.
      progress: True for one progress bar over the whole grid (rounds x grid points), a
        ``callback(rounds_done, total, secs)`` or a progress meter (as for ``simulate``).
      labels: axis name -> the coordinate labels of its values (strings or numbers, one a
        value, all different), in place of those the sweep makes (numbers, a component's
        description, ``"x0[1]"``): ``labels={"algorithm": ["FedAvg", "FedProx 0.1"]}``.
      **kwargs: every other argument of :func:`~fedjax_abc.simulate` (``key``, ``rounds``,
        ``trials``, ...), the same for all points; ``checkpoint`` is not taken (the
        ``fedjax-abc run`` command resumes a grid point by point).

    Returns:
      A :class:`~fedjax_abc.SweepResult`: ``axes`` (name -> coordinate labels) and one
      :class:`~fedjax_abc.SimResult` per point. Trial r of a point has the numbers of
      ``simulate`` with the point's arguments and the same key, bit for bit (tested for
      stepsizes, schedules, x0, modes, FedProx's mu, oracles' constants, problems), except
      where XLA compiles an operation differently once batched: a server stepsize
      eta_g != 1 (``x + eta_g (mean - x)``, fused into a multiply-add) and an unbiased
      sampler's scaled aggregate (``Bernoulli``, ``Poisson``: x_T within about 1e-15
      relative, on a stepsize axis) agree to rounding.

    Raises:
      ValueError: for an unknown axis, an empty one, or any point's invalid arguments
        (checked before anything compiles); when the whole grid's results would not fit in
        the memory (estimated from the first point before the others are checked).

    Example:
      >>> import jax, fedjax_abc as fa
      >>> p = fa.problems.huber_offsets(jax.random.key(0), n=10, d_max=20.0)
      >>> res = fa.sweep(p, grid={"stepsize": [1e-3, 1e-2]}, num_sampled=2, local_steps=5,
      ...                rounds=100, x0=p.x_star + 1.0, trials=8, key=jax.random.key(1),
      ...                record_every=10)
      >>> res.shape, res.gap.shape
      ((2,), (2, 8, 11))
    """
    if "checkpoint" in kwargs or "checkpoint_every" in kwargs:
        raise ValueError("sweep takes no checkpoint; 'fedjax-abc run GRID.toml' resumes a grid")
    meter = progress_meter(progress)
    grid = _check_grid(grid)
    if labels is not None and (not isinstance(labels, Mapping) or set(labels) - set(grid)):
        raise ValueError(f"labels must be a dict: grid axis -> its values' labels, for axes of "
                         f"the grid ({', '.join(grid)}), got {labels!r}"[:300])
    base, call = _base(problem, grid, kwargs)
    _metrics.check_axis_names(dict.fromkeys(base.spec.metric_names), grid)
    # the whole grid's size from its first point, before the other points are checked
    _memory.check_sweep(_point_run(base, {n: v[0] for n, v in grid.items()}, call), grid)
    points = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
    runs = [_point_run(base, point, call) for point in points]  # all checked first
    groups: dict = {}
    for i, run in enumerate(runs):
        groups.setdefault(_shape_key(run), []).append(i)
    total = sum(r.spec.rounds * math.ceil(r.call.trials / r.call.chunk) for r in runs)
    # the count is every point's rounds (and trial chunks'), one after another
    bar = Reporting(meter, total, f"sweep of {len(runs)} points x {runs[0].spec.rounds} rounds")
    results: list[Optional[SimResult]] = [None] * len(runs)
    done = 0
    try:
        for members in groups.values():
            out, done = _run_group([runs[i] for i in members], bar, done)
            for i, res in zip(members, out):
                results[i] = res
    finally:
        bar.close()
    axes = {name: _given_labels(name, labels[name], values) if labels and name in labels
            else coordinate_labels(name, values) for name, values in grid.items()}
    result = SweepResult(axes=axes, results=tuple(results))
    for res in result.results:
        warn_divergence(res)
    return result
