"""A run's checked values: the :class:`Components` and :class:`Spec` a ``Simulation`` holds,
and the :class:`Call` values of one ``Simulation.run``.

:func:`build` turns the shape-setting arguments of ``simulate`` into components (cast to the
run's dtype) and a spec (ValueError naming the argument, in one line, on invalid input);
:func:`check_call` checks one call's arguments against them and gives the
:class:`CheckedRun` the driver executes: the components as the simulator runs them, the
spec and the call. The components are data: :func:`check_call` reads them as they are, so a
value put into one with ``eqx.tree_at`` is what runs, checked by the checks its class
makes at construction (its ``__check_init__``), and a change of structure or shape is
built again as a new run. ``sweep`` checks each grid point with the same functions.
"""

from __future__ import annotations

import dataclasses
import os
from typing import NamedTuple, Optional, Union

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from fedjax_abc._algorithms._base import AbstractAlgorithm, recheck_all
from fedjax_abc._algorithms._transforms import AbstractTransform
from fedjax_abc._algorithms._fedavg import FedAvg
from fedjax_abc._engine import _memory, _round
from fedjax_abc._engine._round import Parts
from fedjax_abc._engine._schedule import AbstractSchedule, Rounds
from fedjax_abc._engine._cores import warn_one_device
from fedjax_abc._engine._metrics import check_metrics
from fedjax_abc._engine._names import describe, describe_sampler
from fedjax_abc._engine._plan import (Plan, closed_form_gradient, default_record_every,
                                      make_plan, num_records, record_spacing, stepsize_array,
                                      trial_work)
from fedjax_abc._engine._random import GENERATORS
from fedjax_abc._problems._args import (DTYPES, X64_FIX, check_count, check_flag, check_key,
                                       real_array)
from fedjax_abc._problems._checks import check_components, reads_local_minima
from fedjax_abc._problems._host import method
from fedjax_abc._problems._local_work import AbstractLocalSteps, PerClientSteps
from fedjax_abc._problems._oracles import AbstractOracle
from fedjax_abc._problems._problem import (Problem, cast_floating, renamed,
                                          with_constant_zero_minima, with_placeholder_minima)
from fedjax_abc._problems._samplers import AbstractSampler, is_of_size, sampler_of_size
from fedjax_abc._robust._aggregators import AbstractAggregator, WeightedMean
from fedjax_abc._robust._byzantine import Byzantine

__all__ = ["Call", "CheckedRun", "Components", "Parts", "Spec", "build", "check_call",
           "check_robust", "check_settings", "checked_path", "current", "layout", "local_work",
           "oracle_and_algorithm", "oracle_of", "participants", "settings", "threefry_key"]


def _resolve_devices(devices):
    if devices is None:
        devices = jax.local_devices()
    if isinstance(devices, jax.Device) or not isinstance(devices, (list, tuple)):
        raise ValueError(f"devices must be a list of JAX devices (e.g. jax.devices()), got "
                         f"{devices!r}")
    devices = list(devices)
    if not devices:
        raise ValueError("devices must name at least one device")
    bad = [d for d in devices if not isinstance(d, jax.Device)]
    if bad:
        raise ValueError(f"devices must be JAX devices (e.g. jax.devices()), got {bad[0]!r}")
    return devices


# the default schedule and server rule: modules without fields, so one instance of each
# serves every run (one built per call costs a module's construction, its checks included)
_ROUNDS = Rounds()
_WEIGHTED_MEAN = WeightedMean()


class Components(eqx.Module):
    """A run's components, cast to its dtype: the one pytree whose array leaves are data.

    A ``Simulation`` holds it; ``sweep`` stacks the leaves that differ between its grid
    points. ``local_steps`` is a law of local steps (or per-client counts), None where every
    client takes the spec's Q steps (a shape, static). ``metrics`` are the user's metric
    functions: data too (a metric holding a test set is a module whose arrays are leaves).
    """

    problem: Problem
    oracle: Optional[AbstractOracle]  # None: the problem's own (read from it at each run)
    sampler: AbstractSampler
    algorithm: AbstractAlgorithm
    transform: Optional[AbstractTransform]
    local_steps: Optional[AbstractLocalSteps]
    metrics: tuple = ()  # the user's metric functions, in the order of Spec.metric_names
    aggregator: AbstractAggregator = _WEIGHTED_MEAN  # the server's rule
    byzantine: Optional[Byzantine] = None  # the Byzantine clients and their attack
    schedule: AbstractSchedule = _ROUNDS  # how the run's steps go


def oracle_of(components: Components) -> AbstractOracle:
    """The run's oracle: the one given, or the problem's own as the problem is now."""
    return components.problem.oracle if components.oracle is None else components.oracle


def _replaced(components: Components, **fields) -> Components:
    """``components`` with ``fields`` put in, remade as JAX remakes a pytree: the other
    fields as they are, nothing constructed or checked again (their values are checked).
    Components has no static field, so its values flatten in the order of its fields."""
    values, treedef = jax.tree_util.tree_flatten(components,
                                                 is_leaf=lambda x: x is not components)
    names = [f.name for f in dataclasses.fields(components)]
    return treedef.unflatten([fields.get(name, value) for name, value in zip(names, values)])


class Record(NamedTuple):
    """What a run records, and when: t = 0, ``every``, 2 ``every``, ..., T (the last interval
    shorter where ``every`` does not divide T)."""

    every: int
    x: bool = True  # the iterates x_t
    clients: bool = False  # every client's own model and loss
    default: bool = False  # ``every`` chosen by default (again when the run is rebuilt)


class Execution(NamedTuple):
    """How a run's trials are computed; the numbers are the same whatever the values (to
    rounding for ``pad_trials=False``; ``generator`` sets the draws)."""

    mode: str = "mask"  # all n clients' trajectories, or the sampled ones ("gather")
    trial_chunk: Optional[int] = None  # trials per chunk (None: all at once)
    devices: Optional[tuple] = None  # the devices given, or None: all local devices
    generator: str = "threefry"  # the hash of the counter-based streams
    pad_trials: bool = True  # each device's trials a multiple of the SIMD lanes (_plan.lanes)

    def optional(self) -> dict:
        """The fields a result's config and a checkpoint name only where they are not the
        defaults (results saved before a field existed stay those of its default)."""
        return {name: value for name, value in self._asdict().items()
                if name in _OPTIONAL and value != self._field_defaults[name]}


_OPTIONAL = ("pad_trials", "generator")  # Execution's fields named only where set


class Spec(NamedTuple):
    """What sets a run's compiled program, besides its components' structure: hashable.

    ``layout`` is the components' structure and their leaves' shapes and dtypes when they
    were checked (:func:`layout`); ``stat_names`` and ``state_sizes`` follow from it.
    """

    rounds: int
    local_steps: Optional[int]  # Q, or None where Components.local_steps is a law
    dtype: str
    record: Record
    execution: Execution
    metric_names: tuple  # the user's metrics' names, in the order given
    stat_names: tuple  # the transform's statistics, sorted
    state_sizes: _memory.StateSizes
    layout: tuple
    # the problem's f* is computed on demand and no step reads f_i*: the program runs on
    # zeros in their place, records f(x_t), and the result forms the gap when it is read
    gap_on_host: bool = False


_ARRAY = "array"  # marks an array leaf's entry in a layout: (_ARRAY, shape, dtype)


def layout(leaves: list, treedef) -> tuple:
    """The components' structure (their flattened ``leaves`` and ``treedef``) with each
    leaf's shape and dtype (arrays) or value: what a change must keep for a run to use the
    checks and the program made for them."""
    return (treedef,) + tuple(
        (_ARRAY, np.shape(a), np.dtype(a.dtype).str) if isinstance(a, (jax.Array, np.ndarray))
        else (type(a), _hashable(a)) for a in leaves)


def _hashable(value):
    try:
        hash(value)
    except TypeError:
        return id(value)
    return value


class Call(NamedTuple):
    """One call's own values (``Simulation.run``'s arguments), checked by :func:`check_call`,
    and what follows from them: what neither the components nor the spec hold."""

    alphas: np.ndarray  # (T,) float64: the stepsizes
    x0: np.ndarray      # (R, d) float64 (a broadcast view where every trial starts at one)
    key: jax.Array      # a threefry2x32 key
    key_words: tuple    # the key's two uint32 words, as ints
    trials: int         # R
    first_trial: int    # the global index of the first trial (its key is fold_in(key, index))
    chunk: int          # trials per chunk
    devices: list       # the spec's devices, or all local devices
    config: dict        # the settings the result records (``SimResult.config``)
    # the sampler's capacity for the n clients (AbstractSampler.capacity), read once a call
    capacity: Optional[int]
    # where the program records f(x_t) (Spec.gap_on_host): the components' problem, whose f*
    # the result subtracts when its gap is read
    gap_from: Optional[Problem] = None
    # the schedule's stepsizes (AbstractSchedule.stepsizes): the one its start is given, and
    # those of its steps 0, ..., T - 1 (None: alpha_0 and ``alphas``)
    start_alpha: Optional[float] = None
    step_alphas: Optional[np.ndarray] = None


class CheckedRun(NamedTuple):
    """What the driver executes: the components as the simulator runs them (the problem as
    :func:`_run_problem` makes it), the spec, and the call's checked values."""

    components: Components
    spec: Spec
    call: Call

    @property
    def dtype(self):
        """The run's JAX dtype."""
        return DTYPES[self.spec.dtype]

    @property
    def fill_devices(self) -> bool:
        """Whether the user listed the devices: the trials then go to as many as they fill,
        whatever the work (by default only to as many as the call's work keeps busy, see
        ``_plan.make_plan``)."""
        return self.spec.execution.devices is not None

    def parts(self) -> Parts:
        """The components as the compiled program reads them."""
        c = self.components
        return Parts(c.problem, oracle_of(c), c.sampler, c.algorithm, c.transform,
                     local_work(c, self.spec), c.metrics, c.aggregator, c.byzantine, c.schedule)

    def on_devices(self, groups: int, calls: int = 1) -> "CheckedRun":
        """The run with its components' copies on every device when it calls the compiled
        program more than once (``calls``) sharded over them all (``groups`` devices), else
        as it is; for one call, ``jax.jit``'s own copy costs as much (see
        :func:`_replicated`)."""
        devices = self.call.devices
        if groups < 2 or groups != len(devices) or calls < 2:
            return self
        c = self.components
        copies = _replicated((c.problem, c.oracle, c.sampler, c.algorithm), devices)
        if copies is None:
            return self
        problem, oracle, sampler, algorithm = copies
        return self._replace(components=_replaced(c, problem=problem, oracle=oracle,
                                                  sampler=sampler, algorithm=algorithm))

    def plan(self, segmented: bool, every_device: bool = False) -> Plan:
        """The run's :class:`~fedjax_abc._engine._plan.Plan` (see ``_plan.make_plan``):
        ``segmented`` for progress or a checkpoint, ``every_device`` for a sweep."""
        spec, call, problem = self.spec, self.call, self.components.problem
        return make_plan(spec.rounds, spec.record.every, call.chunk, self.dtype, call.devices,
                         segmented, num_clients=problem.num_clients, dim=call.x0.shape[1],
                         closed_form=closed_form_gradient(problem),
                         mask=spec.execution.mode == "mask", every_device=every_device,
                         work=None if self.fill_devices or every_device else self.trial_work,
                         pad=spec.execution.pad_trials)

    @property
    def start_alpha(self) -> float:
        """The stepsize the schedule's start is given (``AbstractSchedule.stepsizes``)."""
        call = self.call
        return float(call.alphas[0]) if call.start_alpha is None else call.start_alpha

    @property
    def step_alphas(self) -> np.ndarray:
        """The stepsizes of the schedule's steps 0, ..., T - 1."""
        call = self.call
        return call.alphas if call.step_alphas is None else call.step_alphas

    @property
    def max_steps(self) -> int:
        """Q, or Q_max of a law of local steps."""
        return _round.steps_of(local_work(self.components, self.spec))

    @property
    def participants(self) -> int:
        """How many clients a round computes at once (:func:`participants`)."""
        return participants(self.spec.execution.mode, self.components.sampler,
                            self.components.problem.num_clients, self.call.capacity)

    @property
    def trial_work(self) -> int:
        """One trial's work, client-steps times d (see ``_plan.trial_work``)."""
        return trial_work(self.spec.rounds, self.participants, self.max_steps,
                          self.components.problem.dim)

    @property
    def record_names(self) -> tuple:
        """The records' names in the order the compiled segment returns them."""
        s = self.spec
        return (("gap", "grad_norm_sq") + s.metric_names + s.stat_names
                + (("client_x", "client_loss") if s.record.clients else ())
                + (("x",) if s.record.x else ()))


def build(problem, *, num_sampled, local_steps, rounds, record_every, mode, sampler, oracle,
          algorithm, dtype, trial_chunk, record_x, devices, metrics, generator,
          transform, pad_trials=True, aggregator=None,
          byzantine=None, record_clients=False, schedule=None) -> tuple[Components, Spec]:
    """The shape-setting arguments of ``simulate`` (a ``Simulation``'s) validated and the
    components cast: the :class:`Components` and :class:`Spec` of a ``Simulation``."""
    check_settings(problem, dtype, generator)
    # values put into a component with eqx.tree_at before it is given: its constructor's checks
    recheck_all((problem, sampler, oracle, algorithm, transform, local_steps, aggregator,
                 byzantine, schedule))
    n = problem.num_clients
    d = problem.dim
    local_steps = _local_steps(local_steps, n)
    Q = _round.steps_of(local_steps)
    T = check_count("rounds (T)", rounds)
    k = None if record_every is None else check_count("record_every", record_every)
    if k is not None and T % k:
        raise ValueError(f"record_every ({k}) must divide rounds (T={T}); leave it None for about "
                         "1000 records (the last interval shorter where no divisor fits)")
    if mode not in _round.MODES:
        raise ValueError(f"mode ({mode!r}) must be one of {_round.MODES}")
    chunk = None if trial_chunk is None else check_count("trial_chunk", trial_chunk)
    if sampler is None:  # S clients uniformly without replacement, or all of them
        S = None if num_sampled is None else check_count("num_sampled (S)", num_sampled)
        if S is not None and S > n:
            raise ValueError(f"num_sampled (S={S}) must be in [1, n={n}]")
        sampler = sampler_of_size(S)
    elif num_sampled is not None:
        raise ValueError("give num_sampled or sampler, not both")
    if not isinstance(sampler, AbstractSampler):
        raise ValueError(f"sampler must be a fedjax_abc.AbstractSampler, got {type(sampler).__name__}")
    method(sampler, "validate")(n)
    own_oracle = oracle is not None
    oracle, algorithm = oracle_and_algorithm(problem, oracle, algorithm)
    record_x = check_flag("record_x", record_x)
    record_clients = check_flag("record_clients", record_clients)
    pad_trials = check_flag("pad_trials", pad_trials)
    check_components(problem, oracle, sampler, Q, dtype)
    method(sampler, "check_local_steps")(local_steps)
    if k is None:
        k = max(default_record_every(T), _record_spacing(problem, oracle, sampler, mode, T, Q))
    if devices is not None:
        devices = tuple(_resolve_devices(devices))
    jdtype = DTYPES[dtype]
    metric_names, metric_fns = check_metrics(metrics, d, jdtype)
    if transform is not None and not isinstance(transform, AbstractTransform):
        raise ValueError("transform must be a fedjax_abc.transforms.AbstractTransform or None, "
                         f"got {type(transform).__name__}")
    stat_names = _round.transform_stats(transform, d, jdtype)
    gap_on_host = problem.minima.deferred and not reads_local_minima(problem, oracle, Q, dtype)
    if gap_on_host and "loss" in metric_names:
        raise ValueError("metric name 'loss' is taken: a learning problem's run records its "
                         "loss f(x_t) under that name; rename the metric")
    taken = set(metric_names) | {"gap", "grad_norm_sq", "x", "diverged"}
    if taken & set(stat_names):
        raise ValueError(f"the transform's statistics {sorted(taken & set(stat_names))} are named "
                         "like metrics or result fields; rename the metrics")
    sampler_names = tuple(method(sampler, "record_names")())
    if (taken | set(stat_names)) & set(sampler_names):
        raise ValueError(f"the sampler's records {sorted((taken | set(stat_names)) & set(sampler_names))} "
                         "are named like metrics, statistics or result fields; rename the metrics")
    schedule = _ROUNDS if schedule is None else schedule
    if not isinstance(schedule, AbstractSchedule):
        raise ValueError("schedule must be a fedjax_abc.AbstractSchedule (fa.Rounds(), "
                         f"fa.decentral.Gossip(...)), got {type(schedule).__name__}")
    own_names = tuple(method(schedule, "record_names")())
    if (taken | set(stat_names) | set(sampler_names)) & set(own_names):
        raise ValueError(f"the schedule's records {list(own_names)} are named like metrics, "
                         "statistics or result fields; rename the metrics")
    stat_names = stat_names + sampler_names + own_names
    if not method(sampler, "normalised")() and not algorithm.reads_scale:
        raise ValueError(f"{type(algorithm).__name__} does not apply RoundInfo.scale (its "
                         f"reads_scale is False): it cannot combine the unbiased weights of "
                         f"{type(sampler).__name__}; use a normalised sampler (unbiased=False)")
    method(algorithm, "check_local_steps")(local_steps)
    if algorithm.needs_unit_weights and not method(sampler, "unit_weights")():
        raise ValueError(f"{type(algorithm).__name__} keeps a mean of client states that needs "
                         f"every participant's weight 1, not {type(sampler).__name__}'s")
    aggregator = _WEIGHTED_MEAN if aggregator is None else aggregator
    check_robust(problem, sampler, aggregator, byzantine)
    method(schedule, "check")(problem=problem, oracle=oracle, sampler=sampler,
                              algorithm=algorithm, transform=transform,
                              local_steps=local_steps, aggregator=aggregator,
                              byzantine=byzantine, generator=generator, dtype=jdtype)
    components = Components(
        problem=method(problem, "astype")(jdtype),
        oracle=cast_floating(oracle, jdtype) if own_oracle else None,
        sampler=sampler, algorithm=cast_floating(algorithm, jdtype),
        transform=None if transform is None else cast_floating(transform, jdtype),
        local_steps=None if isinstance(local_steps, int) else cast_floating(local_steps, jdtype),
        metrics=metric_fns, aggregator=cast_floating(aggregator, jdtype),
        byzantine=None if byzantine is None else cast_floating(byzantine, jdtype),
        schedule=cast_floating(schedule, jdtype))
    # a point of R^d in the run's dtype that exists already (a new array is a device copy)
    x_star = None if problem.minima.deferred else components.problem.x_star
    point = x_star if x_star is not None and x_star.dtype == jdtype else jnp.zeros((d,), jdtype)
    sizes = _memory.state_sizes(components.algorithm, point, components.transform)
    if sizes.client_states and not sampler.distinct_slots:
        raise ValueError(f"{type(algorithm).__name__} keeps client states: it needs a sampler "
                         f"whose slots are distinct clients, not {type(sampler).__name__}")
    spec = Spec(rounds=T, local_steps=Q if isinstance(local_steps, int) else None, dtype=dtype,
                record=Record(k, record_x, record_clients, record_every is None),
                execution=Execution(mode, chunk, devices, generator, pad_trials),
                metric_names=metric_names, stat_names=stat_names, state_sizes=sizes,
                layout=layout(*jax.tree_util.tree_flatten(components)), gap_on_host=gap_on_host)
    return components, spec


def check_robust(problem: Problem, sampler: AbstractSampler, aggregator, byzantine) -> None:
    """The server's rule and the Byzantine clients of a run (their classes, the slots a
    round gives the rule, the sampler's weights a rule needs, a problem the attack can
    poison)."""
    n = problem.num_clients
    if not isinstance(aggregator, AbstractAggregator):
        raise ValueError("aggregator must be a fedjax_abc.robust.AbstractAggregator (Median(), "
                         f"Krum(f), ...) or None, got {type(aggregator).__name__}")
    if byzantine is not None and not isinstance(byzantine, Byzantine):
        raise ValueError("byzantine must be a fedjax_abc.robust.Byzantine or None, got "
                         f"{type(byzantine).__name__}")
    if byzantine is not None:
        byzantine.validate(n)
        byzantine.attack.poisoned(problem)  # a data attack on a problem without that data
    if aggregator.streaming:
        return
    name = type(aggregator).__name__
    aggregator.check_slots(method(sampler, "num_slots")(n))
    if not method(sampler, "unit_weights")() or not method(sampler, "normalised")():
        raise ValueError(f"{name} treats every participant alike: it needs a sampler whose "
                         f"participants have weight 1, not {type(sampler).__name__}")


def check_settings(problem, dtype: str, generator: str) -> None:
    """The problem, dtype and generator of a run (``simulate``'s or ``simulate_async``'s)."""
    if not isinstance(problem, Problem):
        raise ValueError(f"problem must be a fedjax_abc.Problem, got {type(problem).__name__}")
    if generator not in GENERATORS:
        raise ValueError(f"generator ({generator!r}) must be one of {GENERATORS}")
    if generator == "splitmix" and not jax.config.jax_enable_x64:
        raise ValueError("generator='splitmix' hashes 64-bit words: it needs JAX's 64-bit "
                         f"mode; {X64_FIX}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype ({dtype!r}) must be 'float64' or 'float32'")
    if dtype == "float64" and not jax.config.jax_enable_x64:
        raise ValueError(f"dtype='float64' (the default) needs JAX's 64-bit mode; {X64_FIX} "
                         "(or pass dtype='float32')")


def oracle_and_algorithm(problem: Problem, oracle, algorithm) -> tuple:
    """The run's oracle (default: the problem's) and algorithm (default: Algorithm 1)."""
    oracle = problem.oracle if oracle is None else oracle
    if not isinstance(oracle, AbstractOracle):
        raise ValueError(f"oracle must be a fedjax_abc.AbstractOracle, got {type(oracle).__name__}")
    algorithm = FedAvg() if algorithm is None else algorithm
    if not isinstance(algorithm, AbstractAlgorithm):
        raise ValueError("algorithm must be a fedjax_abc.algorithms.AbstractAlgorithm, got "
                         f"{type(algorithm).__name__}")
    return oracle, algorithm


def threefry_key(key) -> jax.Array:
    """A run's key: a threefry2x32 key (raw uint32 key data of shape (2,) wrapped as one)."""
    key = check_key("key", key)
    if key.dtype == jnp.uint32:
        key = jax.random.wrap_key_data(key, impl="threefry2x32")
    if str(jax.random.key_impl(key)) != "threefry2x32":
        raise ValueError("key must be a threefry2x32 key (the default, jax.random.key(seed)); "
                         f"got a {jax.random.key_impl(key)} key")
    return key


def _record_spacing(problem, oracle, sampler, mode: str, T: int, Q: int) -> int:
    """The default records' fewest rounds apart for a problem evaluated in one pass over
    pooled data (a learning problem's): its records, full-data passes, then cost no more
    than its training (see ``_plan.record_spacing``)."""
    if problem.pooled is None:
        return 1
    n = problem.num_clients
    return record_spacing(T, method(oracle, "steps_per_evaluation")(problem),
                          participants(mode, sampler, n, method(sampler, "capacity")(n)), Q)


def participants(mode: str, sampler: AbstractSampler, n: int, capacity: Optional[int]) -> int:
    """How many clients a round computes at once: n in ``mask`` mode, the sampler's
    ``capacity`` for the n clients or its number of slots in ``gather`` mode."""
    if mode == "mask":
        return n
    return capacity or method(sampler, "num_slots")(n)


def _as_arrays(leaves: list, spec: Spec) -> list:
    """The components' leaves with a number put where the spec has an array
    (``eqx.tree_at(..., 0.5)``) made an array, and every floating array in the dtype the
    spec has for it (the run's, as :func:`build` casts them; a metric's data its own)."""
    out = list(leaves)
    for i, (leaf, was) in enumerate(zip(leaves, spec.layout[1:])):
        if was[0] != _ARRAY or not np.issubdtype(np.dtype(was[2]), np.floating):
            continue  # a static value, or an integer array: kept as it is
        dtype = np.dtype(was[2])
        if isinstance(leaf, (int, float, np.integer, np.floating)) and not isinstance(
                leaf, (bool, np.bool_)):  # a number (eqx.tree_at(..., 2)): an array, as built
            leaf = np.asarray(leaf, dtype)
        if isinstance(leaf, (jax.Array, np.ndarray)) and jnp.issubdtype(leaf.dtype, jnp.floating) \
                and (leaf.dtype != dtype or getattr(leaf, "weak_type", False)
                     or isinstance(leaf, np.ndarray) and leaf.ndim):
            leaf = cast_floating(leaf, dtype)
        out[i] = leaf
    return out


def local_work(components: Components, spec: Spec) -> Union[int, AbstractLocalSteps]:
    """Q (the spec's), or the components' law of local steps."""
    return spec.local_steps if components.local_steps is None else components.local_steps


def settings(components: Components, spec: Spec) -> dict:
    """The arguments of :func:`build` (``simulate``'s shape-setting ones) that make these
    components and spec: the components as they are, the sampler given as itself."""
    c, r = components, spec.record
    return dict(problem=c.problem, num_sampled=None, local_steps=local_work(c, spec),
                rounds=spec.rounds, record_every=None if r.default else r.every,
                record_x=r.x, record_clients=r.clients, sampler=c.sampler, oracle=c.oracle,
                algorithm=c.algorithm, dtype=spec.dtype,
                **dict(spec.execution._asdict(), devices=None if spec.execution.devices is None
                       else list(spec.execution.devices)),
                metrics=dict(zip(spec.metric_names, c.metrics)) or None, transform=c.transform,
                aggregator=c.aggregator, byzantine=c.byzantine, schedule=c.schedule)


def current(components: Components, spec: Spec) -> tuple[Components, Spec]:
    """The components and spec a run uses, checked as they are now.

    Every module's ``__check_init__`` runs again (a value put in with ``eqx.tree_at`` gets
    the constructor's error), and the algorithm checks the local work it is given;
    components of another structure, shapes or dtypes than the spec's (a component replaced
    by one of another class) are checked and built again, as a new ``Simulation`` of them
    would be."""
    leaves, treedef = jax.tree_util.tree_flatten(components)
    if len(leaves) == len(spec.layout) - 1:
        cast = _as_arrays(leaves, spec)
        if any(a is not b for a, b in zip(cast, leaves)):
            leaves, components = cast, treedef.unflatten(cast)
    recheck_all(components)
    if layout(leaves, treedef) != spec.layout:
        return build(**settings(components, spec))  # build casts them as it casts any
    for part in (components.algorithm, components.sampler):
        method(part, "check_local_steps")(local_work(components, spec))
    check_robust(components.problem, components.sampler, components.aggregator,
                 components.byzantine)
    return components, spec


def check_call(components: Components, spec: Spec, *, stepsize, x0, key, trials=1,
               first_trial=0, fresh: bool = False) -> CheckedRun:
    """One call of a ``Simulation``: its stepsizes, x0, trials, key and first trial, each
    validated (ValueError naming it), and the memory it needs checked, with the components
    as they are (:func:`current`; ``fresh``: just made by :func:`build`, checked there).
    Returns the :class:`CheckedRun` the driver executes."""
    if not fresh:
        components, spec = current(components, spec)
    problem = components.problem
    d, T, k = problem.dim, spec.rounds, spec.record.every
    R = check_count("trials", trials)
    first_trial = check_count("first_trial", first_trial, low=0)
    if first_trial + R > 2 ** 31 - 1:
        raise ValueError(f"first_trial + trials ({first_trial + R}) must be below 2^31")
    chunk = R if spec.execution.trial_chunk is None else min(spec.execution.trial_chunk, R)
    # absurd sizes fail before anything of size T or R is allocated (records, stepsizes)
    _memory.check(_memory.estimate(trials=R, records=num_records(T, k), dim=d,
                                   itemsize=np.dtype(spec.dtype).itemsize,
                                   record_x=spec.record.x, rounds=T,
                                   client_values=_memory.client_values(spec, problem)),
                  record_x=spec.record.x, rounds=T, trials=R, chunk=chunk, record_every=k)
    alphas = stepsize_array(stepsize, T)
    x0 = real_array("x0", x0)
    if x0.shape == () and d == 1:
        x0 = x0.reshape(1)
    if x0.shape == (d,):
        x0 = np.broadcast_to(x0, (R, d))
    if x0.shape != (R, d):
        raise ValueError(f"x0 must have shape ({d},) or (trials={R}, {d}), got {x0.shape}")
    if not np.all(np.isfinite(x0)):
        raise ValueError("x0 must be finite")
    key = threefry_key(key)
    key_words = tuple(np.asarray(jax.random.key_data(key)).tolist())  # for the config
    devices = _resolve_devices(spec.execution.devices)
    if spec.execution.devices is None:
        warn_one_device(devices)
    config = _config(components, spec, devices, dict(
        trials=R, trial_chunk=chunk, key=list(key_words), first_trial=first_trial,
        stepsize=float(alphas[0]) if np.all(alphas == alphas[0]) else "schedule"))
    call = Call(alphas=alphas, x0=x0, key=key, key_words=key_words, trials=R,
                first_trial=first_trial, chunk=chunk, devices=devices, config=config,
                capacity=method(components.sampler, "capacity")(problem.num_clients),
                gap_from=problem if spec.gap_on_host else None)
    start_alpha, step_alphas = method(components.schedule, "stepsizes")(alphas)
    if step_alphas is not alphas:
        call = call._replace(start_alpha=float(start_alpha), step_alphas=step_alphas)
    simulated = _replaced(components, problem=_run_problem(problem, spec.gap_on_host))
    return CheckedRun(simulated, spec, call)


def _config(components: Components, spec: Spec, devices: list, call: dict) -> dict:
    """The settings a result records (``SimResult.config``), in their order, with the call's
    own (``call``: trials, trial_chunk, stepsize, key, first_trial)."""
    c = components
    config = dict(
        problem=c.problem.name, n=c.problem.num_clients, d=c.problem.dim,
        num_sampled=c.sampler.num_sampled, sampler=type(c.sampler).__name__,
        oracle=type(oracle_of(c)).__name__, algorithm=describe(c.algorithm),
        local_steps=_describe_steps(local_work(c, spec)), rounds=spec.rounds, trials=call["trials"],
        record_every=spec.record.every, mode=spec.execution.mode, dtype=spec.dtype,
        trial_chunk=call["trial_chunk"], stepsize=call["stepsize"], key=call["key"],
        devices=[str(dv) for dv in devices], jax_version=jax.__version__)
    if call["first_trial"]:
        config["first_trial"] = call["first_trial"]
    if spec.metric_names:
        config["metrics"] = list(spec.metric_names)
    config.update(spec.execution.optional())
    if c.transform is not None:
        config["transform"] = describe(c.transform)
    if not c.aggregator.streaming:  # the default weighted mean is left out
        config["aggregator"] = describe(c.aggregator)
    if c.byzantine is not None:
        config["byzantine"] = describe(c.byzantine)
    # the default synchronous rounds are left out (the default instance itself needs no
    # comparison, which walks both modules)
    if c.schedule is not _ROUNDS and c.schedule != _ROUNDS:
        config["schedule"] = describe(c.schedule)
    if not is_of_size(c.sampler):
        config["sampler_config"] = describe_sampler(c.sampler)  # the paper's: S says it all
    return config


# components up to this size are copied to every device once, when a run is prepared
_REPLICA_BYTES = 16 * 2 ** 20


def _replicated(parts: tuple, devices: list) -> Optional[tuple]:
    """The components with their JAX arrays on every device of a run over several (None for
    one device, several processes or components over the size below).

    ``jax.jit`` copies a component that lives on one device to every device of a sharded
    call, at every call (the start and each segment), while the devices wait. Copied once
    here, up to 16 MiB of arrays, they serve every call of the run, and every run of a
    :class:`~fedjax_abc.Simulation`; larger components (a data set) are copied per call, so
    as not to hold a second copy. The same numbers either way.
    """
    if len(devices) < 2 or any(dv.process_index != jax.process_index() for dv in devices):
        return None
    leaves, treedef = jax.tree_util.tree_flatten(parts)
    where = [i for i, leaf in enumerate(leaves) if isinstance(leaf, jax.Array)]
    if sum(leaves[i].nbytes for i in where) > _REPLICA_BYTES:
        return None
    everywhere = NamedSharding(Mesh(np.array(devices), ("trials",)), PartitionSpec())
    for i, a in zip(where, jax.device_put([leaves[i] for i in where], everywhere)):
        leaves[i] = a
    return jax.tree_util.tree_unflatten(treedef, leaves)


def _local_steps(local_steps, n: int):
    """``local_steps`` as Q (an int) or a checked law of local steps (AbstractLocalSteps)."""
    if isinstance(local_steps, AbstractLocalSteps):
        local_steps.validate(n)
        return local_steps
    if isinstance(local_steps, (int, np.integer)) and not isinstance(local_steps, bool):
        return check_count("local_steps (Q)", local_steps)
    if isinstance(local_steps, (list, tuple, np.ndarray, jax.Array)):
        steps = PerClientSteps(local_steps)
        steps.validate(n)
        return steps
    raise ValueError("local_steps must be an integer Q >= 1, an array of n per-client counts or "
                     f"a fedjax_abc.AbstractLocalSteps, got {local_steps!r}")


def _describe_steps(local_steps):
    """Q, or a one-line description of a law of local steps (for the result's config)."""
    return local_steps if isinstance(local_steps, int) else describe(local_steps)


def _run_problem(problem: Problem, gap_on_host: bool) -> Problem:
    """The simulator's copy of a problem (already in the run's dtype): its name dropped
    (static: problems differing only in name share one compilation), f_i* = 0 a constant
    where XLA:CPU's loops are native functions, where a lighter local step pays (see
    ``with_constant_zero_minima``). Deferred f_i*, f*, x* are zeros where ``gap_on_host``
    (see ``Spec``), else computed now (a step reads f_i*).

    The loops are native as far as the backend tells: where it has several CPU devices,
    with which ``use_cpu_cores`` turns them on by default (:mod:`~fedjax_abc._engine._cores`).
    The XLA flags are not read again; a user's other choice costs speed, not bits. A run on
    a GPU or TPU follows the same answer, as it followed the flags before."""
    if problem.minima.deferred:
        problem = with_placeholder_minima(problem) if gap_on_host else problem.solved()
    if len(jax.devices("cpu")) > 1:
        return with_constant_zero_minima(problem, name="")
    return renamed(problem, "")


def checked_path(checkpoint) -> Optional[str]:
    if checkpoint is None:
        return None
    if not isinstance(checkpoint, (str, os.PathLike)) or not os.fspath(checkpoint):
        raise ValueError(f"checkpoint must be a file path or None, got {checkpoint!r}")
    path = os.fspath(checkpoint)
    if os.path.isdir(path):
        raise ValueError(f"checkpoint ({path}) is a folder; give a file path")
    return path
