"""The checked settings of a run: every argument of ``simulate`` validated before any work.

:func:`checked` turns ``simulate``'s arguments into a :class:`Run` (ValueError naming the
argument, in one line, on invalid input); :func:`checked_path` does the same for the
checkpoint path. ``sweep`` checks each grid point with the same function.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from fedjax_abc._algorithms._base import AbstractAlgorithm
from fedjax_abc._algorithms._transforms import AbstractTransform
from fedjax_abc._algorithms._fedavg import FedAvg
from fedjax_abc._engine import _memory, _round
from fedjax_abc._engine._metrics import check_metrics
from fedjax_abc._engine._plan import (default_record_every, num_records, stepsize_array,
                                      trial_work)
from fedjax_abc._engine._random import GENERATORS
from fedjax_abc._problems._args import check_key
from fedjax_abc._problems._checks import check_components
from fedjax_abc._problems._host import method
from fedjax_abc._problems._local_work import AbstractLocalSteps, PerClientSteps
from fedjax_abc._problems._oracles import AbstractOracle
from fedjax_abc._problems._problem import (Problem, cast_floating,
                                          with_constant_zero_minima)
from fedjax_abc._problems._samplers import (AbstractSampler, FullParticipation,
                                            UniformWithoutReplacement)

__all__ = ["DTYPES", "Run", "checked", "checked_every", "checked_path", "describe", "for_call",
           "prepare"]

DTYPES = {"float64": jnp.float64, "float32": jnp.float32}


def _check_int(name: str, value, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if value < low:
        raise ValueError(f"{name} ({value}) must be >= {low}")
    return int(value)


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


def _points(name: str, value) -> np.ndarray:
    """``value`` as a float64 array: ValueError naming ``name`` for strings, ragged lists,
    complex or non-numeric values (NumPy would raise deep inside, or drop the imaginary
    part)."""
    try:
        a = np.asarray(value) if not isinstance(value, (str, bytes)) else None
    except ValueError:  # a ragged list
        a = None
    if a is None or a.dtype.kind not in "biuf":
        raise ValueError(f"{name} must be an array of real numbers, got {value!r}"[:200])
    return a.astype(np.float64)


@dataclasses.dataclass(frozen=True)
class Run:
    """The checked settings of a run: the arrays in the simulation dtype, counts as ints."""

    problem: Problem      # cast to dtype, name dropped (so it does not key the compilation)
    oracle: AbstractOracle
    sampler: AbstractSampler
    algorithm: AbstractAlgorithm
    alphas: np.ndarray    # (T,) float64; None until for_call
    x0: np.ndarray        # (R, d) float64; None until for_call
    key: jax.Array        # None until for_call
    local_steps: Any      # Q (an int) or an AbstractLocalSteps, cast to dtype
    rounds: int
    trials: int           # 0 until for_call
    record_every: int
    mode: str
    dtype: Any
    chunk: Optional[int]  # trials per chunk; until for_call the user's trial_chunk or None
    record_x: bool
    devices: list
    config: dict
    # the user listed the devices: the trials go to as many as they fill, whatever the work
    # (by default only to as many as the call's work keeps busy, see ``_plan.make_plan``)
    fill_devices: bool = False
    first_trial: int = 0  # the global index of the first trial (its key is fold_in(key, index))
    metric_names: tuple = ()  # the user metrics' names and functions, in the order given
    metrics: tuple = ()
    generator: str = "threefry"
    key_words: tuple = ()  # the key's two uint32 words, as ints
    transform: Any = None  # an AbstractTransform cast to dtype, or None
    stat_names: tuple = ()  # the transform's statistics, sorted
    state_sizes: Any = None  # _memory.StateSizes of the algorithm (and the transform)
    replicas: Any = None  # (problem, oracle, sampler, algorithm) on every device, or None

    def on_devices(self, groups: int, calls: int = 1) -> "Run":
        """The run with its components' copies on every device when it is sharded over them
        all (``groups`` devices), else as it is. A run prepared without the copies (one of
        ``simulate``) makes them here when it calls the compiled program more than once
        (``calls``); for one call, ``jax.jit``'s own copy costs as much."""
        if groups < 2 or groups != len(self.devices):
            return self
        run = self.with_replicas() if self.replicas is None and calls > 1 else self
        if run.replicas is None:
            return run
        problem, oracle, sampler, algorithm = run.replicas
        return dataclasses.replace(run, problem=problem, oracle=oracle, sampler=sampler,
                                   algorithm=algorithm)

    def with_replicas(self) -> "Run":
        """The run holding its components' copies on every device (see :func:`_replicated`;
        None where it makes none)."""
        return dataclasses.replace(self, replicas=_replicated(
            (self.problem, self.oracle, self.sampler, self.algorithm), self.devices))

    @property
    def max_steps(self) -> int:
        """Q, or Q_max of a law of local steps."""
        return _round.steps_of(self.local_steps)

    @property
    def trial_work(self) -> int:
        """One trial's work, client-steps times d (see ``_plan.trial_work``)."""
        n = self.problem.num_clients
        participants = n if self.mode == "mask" else method(self.sampler, "num_slots")(n)
        return trial_work(self.rounds, participants, self.max_steps, self.problem.dim)

    @property
    def record_names(self) -> tuple:
        """The records' names in the order the compiled segment returns them."""
        return (("gap", "grad_norm_sq") + self.metric_names + self.stat_names
                + (("x",) if self.record_x else ()))


def checked(problem, num_sampled, local_steps, stepsize, rounds, x0, trials, key, record_every,
            mode, sampler, oracle, algorithm, dtype, trial_chunk, record_x, devices,
            first_trial=0, metrics=None, generator="threefry", transform=None) -> Run:
    """Validates every argument of :func:`simulate` (ValueError naming it) before any work:
    :func:`prepare` then :func:`for_call`."""
    prepared = prepare(problem, num_sampled, local_steps, rounds, record_every, mode, sampler,
                       oracle, algorithm, dtype, trial_chunk, record_x, devices, metrics,
                       generator, transform, replicate=False)
    return for_call(prepared, stepsize, x0, trials, key, first_trial)


def _check_size(d, T, k, R, chunk, record_x, dtype) -> None:
    """Absurd sizes fail before anything of size T or R is allocated (the records and
    stepsizes alone, no working set)."""
    _memory.check(_memory.estimate(trials=R, records=num_records(T, k), dim=d,
                                   itemsize=np.dtype(dtype).itemsize, record_x=record_x,
                                   rounds=T), record_x=record_x, rounds=T, trials=R, chunk=chunk,
                  record_every=k)


def prepare(problem, num_sampled, local_steps, rounds, record_every, mode, sampler, oracle,
            algorithm, dtype, trial_chunk, record_x, devices, metrics=None,
            generator="threefry", transform=None, replicate=True) -> Run:
    """The shape-setting arguments of :func:`simulate` validated and the components cast: a
    :class:`Run` whose per-call fields (stepsizes, x0, key, trials) :func:`for_call` fills.
    ``replicate``: copy the components to every device now, for the runs to come (a
    :class:`~fedjax_abc.Simulation`); a single run leaves it to :meth:`Run.on_devices`."""
    if not isinstance(problem, Problem):
        raise ValueError(f"problem must be a fedjax_abc.Problem, got {type(problem).__name__}")
    n = problem.num_clients
    d = problem.dim
    local_steps = _local_steps(local_steps, n)
    Q = _round.steps_of(local_steps)
    T = _check_int("rounds (T)", rounds)
    k = None if record_every is None else _check_int("record_every", record_every)
    if k is not None and T % k:
        raise ValueError(f"record_every ({k}) must divide rounds (T={T}); leave it None for about "
                         "1000 records (the last interval shorter where no divisor fits)")
    if mode not in _round.MODES:
        raise ValueError(f"mode ({mode!r}) must be one of {_round.MODES}")
    if generator not in GENERATORS:
        raise ValueError(f"generator ({generator!r}) must be one of {GENERATORS}")
    if generator == "splitmix" and not jax.config.jax_enable_x64:
        raise ValueError("generator='splitmix' hashes 64-bit words: it needs jax_enable_x64, "
                         "which was switched off after import")
    if dtype not in DTYPES:
        raise ValueError(f"dtype ({dtype!r}) must be 'float64' or 'float32'")
    if dtype == "float64" and not jax.config.jax_enable_x64:
        raise ValueError("dtype='float64' needs jax_enable_x64; it was switched off after import")
    chunk = None if trial_chunk is None else _check_int("trial_chunk", trial_chunk)
    k = default_record_every(T) if k is None else k
    if sampler is None:
        if num_sampled is None:
            sampler = _default_sampler(None)
        else:
            S = _check_int("num_sampled (S)", num_sampled)
            if not 1 <= S <= n:
                raise ValueError(f"num_sampled (S={S}) must be in [1, n={n}]")
            sampler = _default_sampler(S)
    elif num_sampled is not None:
        raise ValueError("give num_sampled or sampler, not both")
    if not isinstance(sampler, AbstractSampler):
        raise ValueError(f"sampler must be a fedjax_abc.AbstractSampler, got {type(sampler).__name__}")
    method(sampler, "validate")(n)
    oracle = problem.oracle if oracle is None else oracle
    if not isinstance(oracle, AbstractOracle):
        raise ValueError(f"oracle must be a fedjax_abc.AbstractOracle, got {type(oracle).__name__}")
    algorithm = _default_algorithm() if algorithm is None else algorithm
    if not isinstance(algorithm, AbstractAlgorithm):
        raise ValueError("algorithm must be a fedjax_abc.algorithms.AbstractAlgorithm, got "
                         f"{type(algorithm).__name__}")
    if not isinstance(record_x, bool):
        raise ValueError("record_x must be True or False")
    check_components(problem, oracle, sampler, Q, dtype)
    fill_devices = devices is not None
    devices = _resolve_devices(devices)
    jdtype = DTYPES[dtype]
    metric_names, metric_fns = check_metrics(metrics, d, jdtype)
    if transform is not None and not isinstance(transform, AbstractTransform):
        raise ValueError("transform must be a fedjax_abc.transforms.AbstractTransform or None, "
                         f"got {type(transform).__name__}")
    stat_names = _round.transform_stats(transform, d, jdtype)
    taken = set(metric_names) | {"gap", "grad_norm_sq", "x", "diverged"}
    if taken & set(stat_names):
        raise ValueError(f"the transform's statistics {sorted(taken & set(stat_names))} are named "
                         "like metrics or result fields; rename the metrics")
    run_problem = _run_problem(problem, jdtype, _native_loops())
    # a point of R^d in the run's dtype that exists already (a new array is a device copy)
    point = run_problem.x_star if run_problem.x_star.dtype == jdtype else jnp.zeros((d,), jdtype)
    sizes = _memory.state_sizes(algorithm, point, transform)
    if not method(sampler, "normalised")() and not algorithm.reads_scale:
        raise ValueError(f"{type(algorithm).__name__} does not apply RoundInfo.scale (its "
                         f"reads_scale is False): it cannot combine the unbiased weights of "
                         f"{type(sampler).__name__}; use a normalised sampler (unbiased=False)")
    if algorithm.needs_unit_weights and not method(sampler, "unit_weights")():
        raise ValueError(f"{type(algorithm).__name__} keeps a mean of client states that needs "
                         f"every participant's weight 1, not {type(sampler).__name__}'s")
    if sizes.client_states and not sampler.distinct_slots:
        raise ValueError(f"{type(algorithm).__name__} keeps client states: it needs a sampler "
                         f"whose slots are distinct clients, not {type(sampler).__name__}")

    config = dict(
        problem=problem.name, n=n, d=d, num_sampled=getattr(sampler, "num_sampled", None),
        sampler=type(sampler).__name__, oracle=type(oracle).__name__,
        algorithm=describe(algorithm), local_steps=_describe_steps(local_steps), rounds=T,
        trials=None, record_every=k, mode=mode, dtype=dtype, trial_chunk=None,
        stepsize=None, key=None, devices=[str(dv) for dv in devices],
        jax_version=jax.__version__,
    )
    if metric_names:
        config["metrics"] = list(metric_names)
    if generator != "threefry":  # the default is left out, as in results saved before it
        config["generator"] = generator
    if transform is not None:
        config["transform"] = describe(transform)
    if not isinstance(sampler, (UniformWithoutReplacement, FullParticipation)):
        config["sampler_config"] = describe_sampler(sampler)  # the paper's: S says it all
    run_oracle = cast_floating(oracle, jdtype)
    run_algorithm = cast_floating(algorithm, jdtype)
    run_transform = None if transform is None else cast_floating(transform, jdtype)
    run_steps = local_steps if isinstance(local_steps, int) else cast_floating(local_steps, jdtype)
    run = Run(
        problem=run_problem, oracle=run_oracle, sampler=sampler,
        algorithm=run_algorithm, alphas=None, x0=None, key=None,
        local_steps=run_steps,
        rounds=T, trials=0, record_every=k, mode=mode, dtype=jdtype, chunk=chunk,
        record_x=record_x, devices=devices, config=config, fill_devices=fill_devices,
        metric_names=metric_names, metrics=metric_fns, generator=generator,
        transform=run_transform, stat_names=stat_names, state_sizes=sizes)
    return run.with_replicas() if replicate else run


def for_call(prepared: Run, stepsize, x0, trials, key, first_trial=0) -> Run:
    """A :func:`prepare`-d run with one call's stepsizes, x0, trials, key and first trial,
    each validated (ValueError naming it); the memory the call needs is checked too."""
    d, T, k = prepared.problem.dim, prepared.rounds, prepared.record_every
    R = _check_int("trials", trials)
    first_trial = _check_int("first_trial", first_trial, low=0)
    if first_trial + R > 2 ** 31 - 1:
        raise ValueError(f"first_trial + trials ({first_trial + R}) must be below 2^31")
    chunk = R if prepared.chunk is None else min(prepared.chunk, R)
    _check_size(d, T, k, R, chunk, prepared.record_x, prepared.dtype)
    alphas = stepsize_array(stepsize, T)
    x0 = _points("x0", x0)
    if x0.shape == () and d == 1:
        x0 = x0.reshape(1)
    if x0.shape == (d,):
        x0 = np.broadcast_to(x0, (R, d))
    if x0.shape != (R, d):
        raise ValueError(f"x0 must have shape ({d},) or (trials={R}, {d}), got {x0.shape}")
    if not np.all(np.isfinite(x0)):
        raise ValueError("x0 must be finite")
    key = check_key("key", key)
    if key.dtype == jnp.uint32:
        key = jax.random.wrap_key_data(key, impl="threefry2x32")
    if str(jax.random.key_impl(key)) != "threefry2x32":
        raise ValueError("key must be a threefry2x32 key (the default, jax.random.key(seed)); "
                         f"got a {jax.random.key_impl(key)} key")
    key_words = _key_data(key)
    c = prepared.config
    config = {name: c[name] for name in ("problem", "n", "d", "num_sampled", "sampler", "oracle",
                                          "algorithm", "local_steps", "rounds")}
    config.update(trials=R, record_every=k, mode=c["mode"], dtype=c["dtype"], trial_chunk=chunk,
                  stepsize=float(alphas[0]) if np.all(alphas == alphas[0]) else "schedule",
                  key=list(key_words), devices=c["devices"], jax_version=c["jax_version"])
    if first_trial:
        config["first_trial"] = first_trial
    config.update({name: c[name] for name in ("metrics", "generator", "transform",
                                              "sampler_config") if name in c})
    return dataclasses.replace(prepared, alphas=alphas, x0=x0, key=key, trials=R, chunk=chunk,
                               config=config, first_trial=first_trial, key_words=key_words)


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
        return _check_int("local_steps (Q)", local_steps)
    if isinstance(local_steps, (list, tuple, np.ndarray, jax.Array)):
        steps = PerClientSteps(local_steps)
        steps.validate(n)
        return steps
    raise ValueError("local_steps must be an integer Q >= 1, an array of n per-client counts or "
                     f"a fedjax_abc.AbstractLocalSteps, got {local_steps!r}")


def _describe_steps(local_steps):
    """Q, or a one-line description of a law of local steps (for the result's config)."""
    if isinstance(local_steps, int):
        return local_steps
    if isinstance(local_steps, PerClientSteps):
        return f"PerClientSteps({np.asarray(local_steps.counts).tolist()})"
    return describe(local_steps)


def _default_sampler(num_sampled: Optional[int]) -> AbstractSampler:
    """S clients uniformly without replacement, or all of them for None."""
    return FullParticipation() if num_sampled is None else UniformWithoutReplacement(num_sampled)


def _default_algorithm() -> AbstractAlgorithm:
    """Algorithm 1."""
    return FedAvg()


def _key_data(key: jax.Array) -> tuple:
    """A key's data as ints (for the result's config)."""
    return tuple(np.asarray(jax.random.key_data(key)).tolist())


def _native_loops() -> bool:
    """Whether XLA:CPU's loops are native functions, as far as the backend tells: where it
    has several CPU devices, with which the import and ``use_cpu_cores`` turn them on by
    default (:mod:`~fedjax_abc._engine._cores`). The XLA flags are not read again; a user's
    other choice costs speed (``_run_problem``), not bits. A run on a GPU or TPU follows
    the same answer, as it followed the flags before."""
    return len(jax.devices("cpu")) > 1


def _run_problem(problem: Problem, dtype, native: bool) -> Problem:
    """The simulator's copy of a problem: cast to dtype, its name dropped (static: problems
    differing only in name share one compilation), f_i* = 0 a constant where ``native`` (the
    loops are native functions, see :func:`_native_loops`), where a lighter local step pays
    (see ``with_constant_zero_minima``)."""
    cast = method(problem, "astype")(dtype)
    if native:
        return with_constant_zero_minima(cast, name="")
    return dataclasses.replace(cast, name="")


def describe(algorithm) -> str:
    """A one-line description: the class and its scalar hyperparameters (and static ints)."""
    fields = []
    for f in dataclasses.fields(algorithm):
        value = getattr(algorithm, f.name)
        if isinstance(value, (jax.Array, np.ndarray)) and np.ndim(value) == 0:
            fields.append(f"{f.name}={float(value):g}")
        elif isinstance(value, int) and not isinstance(value, bool):
            fields.append(f"{f.name}={value}")
    return f"{type(algorithm).__name__}({', '.join(fields)})"


def describe_sampler(sampler) -> str:
    """A sampler's class and every field: numbers, flags, arrays (in full up to 8 entries,
    else their shape and mean) and wrapped samplers, e.g. ``Poisson(probs=[0.2, 0.5],
    unbiased=True)``."""
    fields = []
    for f in dataclasses.fields(sampler):
        value = getattr(sampler, f.name)
        if isinstance(value, AbstractSampler):
            text = describe_sampler(value)
        elif isinstance(value, (jax.Array, np.ndarray)):
            a = np.asarray(value)
            text = (f"{a.tolist()}" if a.size <= 8 else
                    f"array{list(a.shape)} mean {float(np.mean(a)):.4g}")
        else:
            text = repr(value)
        fields.append(f"{f.name}={text}")
    return f"{type(sampler).__name__}({', '.join(fields)})"


def checked_every(checkpoint_every) -> float:
    """The seconds between a checkpoint's saves: a finite number >= 0."""
    if isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, (int, float,
                                                                               np.number)):
        raise ValueError(f"checkpoint_every must be a number of seconds >= 0, got "
                         f"{checkpoint_every!r}")
    if not (np.isfinite(checkpoint_every) and checkpoint_every >= 0):
        raise ValueError(f"checkpoint_every ({checkpoint_every}) must be finite and >= 0")
    return float(checkpoint_every)


def checked_path(checkpoint) -> Optional[str]:
    if checkpoint is None:
        return None
    if not isinstance(checkpoint, (str, os.PathLike)) or not os.fspath(checkpoint):
        raise ValueError(f"checkpoint must be a file path or None, got {checkpoint!r}")
    path = os.fspath(checkpoint)
    if os.path.isdir(path):
        raise ValueError(f"checkpoint ({path}) is a folder; give a file path")
    return path
