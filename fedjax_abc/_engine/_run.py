"""The checked settings of a run: every argument of ``simulate`` validated before any work.

:func:`checked` turns ``simulate``'s arguments into a :class:`Run` (ValueError naming the
argument, in one line, on invalid input); :func:`checked_path` does the same for the
checkpoint path. ``sweep`` checks each grid point with the same function.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_abc._algorithms._base import AbstractAlgorithm
from fedjax_abc._algorithms._fedavg import FedAvg
from fedjax_abc._engine import _memory, _round
from fedjax_abc._engine._memo import remembered
from fedjax_abc._engine._metrics import check_metrics
from fedjax_abc._engine._plan import default_record_every, stepsize_array
from fedjax_abc._engine._random import GENERATORS
from fedjax_abc._engine._xla_loops import native_loops
from fedjax_abc._problems._checks import check_components
from fedjax_abc._problems._oracles import AbstractOracle
from fedjax_abc._problems._problem import (Problem, cast_floating,
                                          with_constant_zero_minima)
from fedjax_abc._problems._samplers import (AbstractSampler, FullParticipation,
                                            UniformWithoutReplacement)

__all__ = ["DTYPES", "Run", "checked", "checked_path", "describe"]

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
    alphas: np.ndarray    # (T,) float64
    x0: np.ndarray        # (R, d) float64
    key: jax.Array
    local_steps: int
    rounds: int
    trials: int
    record_every: int
    mode: str
    dtype: Any
    chunk: int
    record_x: bool
    devices: list
    config: dict
    first_trial: int = 0  # the global index of the first trial (its key is fold_in(key, index))
    metric_names: tuple = ()  # the user metrics' names and functions, in the order given
    metrics: tuple = ()
    generator: str = "threefry"
    key_words: tuple = ()  # the key's two uint32 words, as ints

    @property
    def record_names(self) -> tuple:
        """The records' names in the order the compiled segment returns them."""
        return ("gap", "grad_norm_sq") + self.metric_names + (("x",) if self.record_x else ())


def checked(problem, num_sampled, local_steps, stepsize, rounds, x0, trials, key, record_every,
             mode, sampler, oracle, algorithm, dtype, trial_chunk, record_x, devices,
             first_trial=0, metrics=None, generator="threefry") -> Run:
    """Validates every argument of :func:`simulate` (ValueError naming it) before any work."""
    if not isinstance(problem, Problem):
        raise ValueError(f"problem must be a fedjax_abc.Problem, got {type(problem).__name__}")
    n = problem.num_clients
    d = problem.dim
    Q = _check_int("local_steps (Q)", local_steps)
    T = _check_int("rounds (T)", rounds)
    R = _check_int("trials", trials)
    first_trial = _check_int("first_trial", first_trial, low=0)
    if first_trial + R > 2 ** 31 - 1:
        raise ValueError(f"first_trial + trials ({first_trial + R}) must be below 2^31")
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
    chunk = R if trial_chunk is None else _check_int("trial_chunk", trial_chunk)
    chunk = min(chunk, R)
    # absurd sizes fail here, before anything of size T or R is allocated (a lower bound:
    # two records per trial unless record_every says more, no working set)
    keep_x = record_x is True
    _memory.check(_memory.estimate(trials=R, records=2 if k is None else T // k + 1, dim=d,
                                   itemsize=np.dtype(DTYPES[dtype]).itemsize, record_x=keep_x,
                                   rounds=T), record_x=keep_x, rounds=T, trials=R, chunk=chunk,
                  record_every=k)
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
    remembered(_validate, (sampler,), n)
    oracle = problem.oracle if oracle is None else oracle
    if not isinstance(oracle, AbstractOracle):
        raise ValueError(f"oracle must be a fedjax_abc.AbstractOracle, got {type(oracle).__name__}")
    algorithm = _default_algorithm() if algorithm is None else algorithm
    if not isinstance(algorithm, AbstractAlgorithm):
        raise ValueError("algorithm must be a fedjax_abc.algorithms.AbstractAlgorithm, got "
                         f"{type(algorithm).__name__}")
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
    if not (isinstance(key, jax.Array)
            and ((jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) and key.shape == ())
                 or (key.dtype == jnp.uint32 and key.shape == (2,)))):
        raise ValueError("key must be a single JAX PRNG key, e.g. jax.random.key(0)")
    if not isinstance(record_x, bool):
        raise ValueError("record_x must be True or False")
    if key.dtype == jnp.uint32:
        key = jax.random.wrap_key_data(key, impl="threefry2x32")
    if str(jax.random.key_impl(key)) != "threefry2x32":
        raise ValueError("key must be a threefry2x32 key (the default, jax.random.key(seed)); "
                         f"got a {jax.random.key_impl(key)} key")
    remembered(check_components, (problem, oracle, sampler), Q, dtype)
    key_words = remembered(_key_data, (key,))
    devices = _resolve_devices(devices)
    jdtype = DTYPES[dtype]
    metric_names, metric_fns = check_metrics(metrics, d, jdtype)
    if _memory.state_sizes(algorithm, d, jdtype).client_states and not sampler.distinct_slots:
        raise ValueError(f"{type(algorithm).__name__} keeps client states: it needs a sampler "
                         f"whose slots are distinct clients, not {type(sampler).__name__}")

    config = dict(
        problem=problem.name, n=n, d=d, num_sampled=getattr(sampler, "num_sampled", None),
        sampler=type(sampler).__name__, oracle=type(oracle).__name__,
        algorithm=describe(algorithm), local_steps=Q, rounds=T, trials=R, record_every=k,
        mode=mode, dtype=dtype, trial_chunk=chunk,
        stepsize=float(alphas[0]) if np.all(alphas == alphas[0]) else "schedule",
        key=list(key_words), devices=[str(dv) for dv in devices],
        jax_version=jax.__version__,
    )
    if first_trial:
        config["first_trial"] = first_trial
    if metric_names:
        config["metrics"] = list(metric_names)
    if generator != "threefry":  # the default is left out, as in results saved before it
        config["generator"] = generator
    return Run(
        problem=remembered(_run_problem, (problem,), jdtype, native_loops()),
        oracle=remembered(cast_floating, (oracle,), jdtype), sampler=sampler,
        algorithm=remembered(cast_floating, (algorithm,), jdtype), alphas=alphas, x0=x0, key=key,
        local_steps=Q, rounds=T, trials=R, record_every=k, mode=mode, dtype=jdtype, chunk=chunk,
        record_x=record_x, devices=devices, config=config, first_trial=first_trial,
        metric_names=metric_names, metrics=metric_fns, generator=generator, key_words=key_words)


@functools.lru_cache(maxsize=64)
def _default_sampler(num_sampled: Optional[int]) -> AbstractSampler:
    """S clients uniformly without replacement, or all of them for None (one object per S,
    so that what is prepared for it is remembered)."""
    return FullParticipation() if num_sampled is None else UniformWithoutReplacement(num_sampled)


@functools.lru_cache(maxsize=None)
def _default_algorithm() -> AbstractAlgorithm:
    """Algorithm 1 (one object, made at the first run)."""
    return FedAvg()


def _validate(sampler: AbstractSampler, n: int) -> None:
    sampler.validate(n)


def _key_data(key: jax.Array) -> tuple:
    """A key's data as ints (for the result's config)."""
    return tuple(np.asarray(jax.random.key_data(key)).tolist())


def _run_problem(problem: Problem, dtype, native: bool) -> Problem:
    """The simulator's copy of a problem: cast to dtype, its name dropped (static: problems
    differing only in name share one compilation), f_i* = 0 a constant in native loops,
    where a lighter local step pays (see ``with_constant_zero_minima``)."""
    run_problem = dataclasses.replace(problem.astype(dtype), name="")
    return with_constant_zero_minima(run_problem) if native else run_problem


def describe(algorithm: AbstractAlgorithm) -> str:
    """A one-line description: the class and its scalar hyperparameters."""
    fields = []
    for f in dataclasses.fields(algorithm):
        value = getattr(algorithm, f.name)
        if isinstance(value, (jax.Array, np.ndarray)) and np.ndim(value) == 0:
            fields.append(f"{f.name}={float(value):g}")
    return f"{type(algorithm).__name__}({', '.join(fields)})"


def checked_path(checkpoint) -> Optional[str]:
    if checkpoint is None:
        return None
    if not isinstance(checkpoint, (str, os.PathLike)) or not os.fspath(checkpoint):
        raise ValueError(f"checkpoint must be a file path or None, got {checkpoint!r}")
    path = os.fspath(checkpoint)
    if os.path.isdir(path):
        raise ValueError(f"checkpoint ({path}) is a folder; give a file path")
    return path
