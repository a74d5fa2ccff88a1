"""``simulate``: many independent trials of a federated algorithm as one compiled XLA program.

Layout of the program: ``lax.scan`` over records of [``lax.scan`` over the k rounds between
records of [one round of all trials: ``vmap`` over clients of [``vmap`` over trials of
[``lax.scan`` over Q local steps]]]], under one ``jit``; the trials are the innermost
``vmap`` so that their copies of a client's model lie side by side in memory. Shapes (n, S,
Q, T/k, trials per chunk, mode) are static; the key, x0, the stepsizes, the problem's and
the algorithm's arrays are data, so a new key, stepsize or ``FedProx(mu)`` compiles nothing.

``simulate`` runs in four named steps: :func:`_checked` (every argument validated before
anything compiles), :func:`~fedjax_abc._engine._plan.make_plan` (blocks, padding,
sharding), :func:`_run_chunk` (one chunk of trials, segment by segment) and
:func:`_assemble` (the :class:`SimResult`).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from typing import Any, Callable, Optional, Sequence, Union

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_abc._algorithms._base import AbstractAlgorithm
from fedjax_abc._algorithms._fedavg import FedAvg
from fedjax_abc._engine import _round
from fedjax_abc._engine._plan import Plan, default_record_every, make_plan, stepsize_array
from fedjax_abc._engine._result import SimResult
from fedjax_abc._engine._threefry import fold_in_data
from fedjax_abc._problems._checks import check_components
from fedjax_abc._problems._oracles import AbstractOracle
from fedjax_abc._problems._problem import Problem, cast_floating
from fedjax_abc._problems._samplers import (AbstractSampler, FullParticipation,
                                            UniformWithoutReplacement)

__all__ = ["simulate", "stepsize_array"]

_DTYPES = {"float64": jnp.float64, "float32": jnp.float32}


def _check_int(name: str, value, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if value < low:
        raise ValueError(f"{name} ({value}) must be >= {low}")
    return int(value)


def _record(problem: Problem, x):
    f, g = problem.value_and_grad(x)
    return f - problem.f_star, jnp.sum(g * g)


@eqx.filter_jit
def _initial_records(problem, x):
    return jax.vmap(lambda xr: _record(problem, xr))(x)


@eqx.filter_jit
def _init_state(algorithm, x0, num_clients):
    return _round.init_state(algorithm, x0, num_clients)


@eqx.filter_jit
def _run_segment(problem, oracle, sampler, algorithm, state, trial_ids, key, t0, stepsizes,
                 local_steps, mode, record_x, per_record=1):
    """Rounds t0 .. t0 + s*b - 1 of every trial in s blocks of b rounds; a record per block.

    state: the trials' RoundState (leaves with a trials axis of m); trial_ids: (m,);
    stepsizes: (s, b). Returns the state at the end and the records (gap, grad_norm_sq[,
    x]) of shape (m, s[, d]). Only blocks b * (i + 1) = k (i + 1) rounds after t = 0 (k =
    per_record * b, t0 a multiple of b) evaluate f and grad f; the records of the other
    blocks are zeros, for the caller to drop.
    """
    b = stepsizes.shape[1]
    trial_keys = fold_in_data(jax.random.key_data(key), trial_ids)  # (2, m): fold_in(key, r)

    def record(x_next):
        return jax.vmap(lambda xr: _record(problem, xr))(x_next)

    def skip(x_next):
        zero = jnp.zeros(x_next.shape[:1], x_next.dtype)
        return zero, zero

    def block(state_t, inputs):
        j, alphas = inputs
        state_next = _round.run_rounds(problem, oracle, sampler, algorithm, state_t, trial_keys,
                                       t0 + j * b, alphas, local_steps, mode)
        x_next = state_next.server.x
        if per_record == 1:
            gap, gns = record(x_next)
        else:  # every trial's f(x) costs a pass over all n clients: only where it is kept
            kept = (t0 // b + j) % per_record == per_record - 1
            gap, gns = jax.lax.cond(kept, record, skip, x_next)
        return state_next, (gap, gns, x_next) if record_x else (gap, gns)

    steps = jnp.arange(stepsizes.shape[0], dtype=jnp.int32)
    state, records = jax.lax.scan(block, state, (steps, stepsizes))
    return state, tuple(jnp.moveaxis(r, 0, 1) for r in records)


class _Progress:
    """Progress on stderr: rounds done, rate, time left; or a user callback."""

    def __init__(self, progress, total: int, label: str):
        self.callback = progress if callable(progress) else None
        self.bar = None
        self.total = total
        self.start = time.perf_counter()
        if progress is True:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=label, unit="round", file=sys.stderr,
                            mininterval=1.0, dynamic_ncols=True)

    def update(self, done_now: int, done_total: int):
        if self.bar is not None:
            self.bar.update(done_now)
        if self.callback is not None:
            self.callback(done_total, self.total, time.perf_counter() - self.start)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _resolve_devices(devices):
    if devices is None:
        devices = jax.local_devices()
    devices = list(devices)
    if not devices:
        raise ValueError("devices must name at least one device")
    return devices


@dataclasses.dataclass(frozen=True)
class _Run:
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


def _checked(problem, num_sampled, local_steps, stepsize, rounds, x0, trials, key, record_every,
             mode, sampler, oracle, algorithm, dtype, trial_chunk, record_x, devices) -> _Run:
    """Validates every argument of :func:`simulate` (ValueError naming it) before any work."""
    if not isinstance(problem, Problem):
        raise ValueError(f"problem must be a fedjax_abc.Problem, got {type(problem).__name__}")
    n = problem.num_clients
    d = problem.dim
    Q = _check_int("local_steps (Q)", local_steps)
    T = _check_int("rounds (T)", rounds)
    R = _check_int("trials", trials)
    k = default_record_every(T) if record_every is None else _check_int("record_every", record_every)
    if T % k:
        raise ValueError(f"record_every ({k}) must divide rounds (T={T})")
    if mode not in _round.MODES:
        raise ValueError(f"mode ({mode!r}) must be one of {_round.MODES}")
    if dtype not in _DTYPES:
        raise ValueError(f"dtype ({dtype!r}) must be 'float64' or 'float32'")
    if dtype == "float64" and not jax.config.jax_enable_x64:
        raise ValueError("dtype='float64' needs jax_enable_x64; it was switched off after import")
    chunk = R if trial_chunk is None else _check_int("trial_chunk", trial_chunk)
    chunk = min(chunk, R)
    if sampler is None:
        if num_sampled is None:
            sampler = FullParticipation()
        else:
            S = _check_int("num_sampled (S)", num_sampled)
            if not 1 <= S <= n:
                raise ValueError(f"num_sampled (S={S}) must be in [1, n={n}]")
            sampler = UniformWithoutReplacement(S)
    elif num_sampled is not None:
        raise ValueError("give num_sampled or sampler, not both")
    if not isinstance(sampler, AbstractSampler):
        raise ValueError(f"sampler must be a fedjax_abc.AbstractSampler, got {type(sampler).__name__}")
    sampler.validate(n)
    oracle = problem.oracle if oracle is None else oracle
    if not isinstance(oracle, AbstractOracle):
        raise ValueError(f"oracle must be a fedjax_abc.AbstractOracle, got {type(oracle).__name__}")
    algorithm = FedAvg() if algorithm is None else algorithm
    if not isinstance(algorithm, AbstractAlgorithm):
        raise ValueError("algorithm must be a fedjax_abc.algorithms.AbstractAlgorithm, got "
                         f"{type(algorithm).__name__}")
    alphas = stepsize_array(stepsize, T)
    x0 = np.asarray(x0, dtype=np.float64)
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
    check_components(problem, oracle, sampler, Q, dtype)
    devices = _resolve_devices(devices)
    jdtype = _DTYPES[dtype]
    if _keeps_client_states(algorithm, d, jdtype) and not sampler.distinct_slots:
        raise ValueError(f"{type(algorithm).__name__} keeps client states: it needs a sampler "
                         f"whose slots are distinct clients, not {type(sampler).__name__}")

    config = dict(
        problem=problem.name, n=n, d=d, num_sampled=getattr(sampler, "num_sampled", None),
        sampler=type(sampler).__name__, oracle=type(oracle).__name__,
        algorithm=_describe(algorithm), local_steps=Q, rounds=T, trials=R, record_every=k,
        mode=mode, dtype=dtype, trial_chunk=chunk,
        stepsize=float(alphas[0]) if np.all(alphas == alphas[0]) else "schedule",
        key=np.asarray(jax.random.key_data(key)).tolist(), devices=[str(dv) for dv in devices],
        jax_version=jax.__version__,
    )
    return _Run(
        # the name is static: drop it so problems differing only in name share one compilation
        problem=dataclasses.replace(problem.astype(jdtype), name=""),
        oracle=cast_floating(oracle, jdtype), sampler=sampler,
        algorithm=cast_floating(algorithm, jdtype), alphas=alphas, x0=x0, key=key,
        local_steps=Q, rounds=T, trials=R, record_every=k, mode=mode, dtype=jdtype, chunk=chunk,
        record_x=record_x, devices=devices, config=config)


_CLIENT_STATES: dict = {}


def _keeps_client_states(algorithm: AbstractAlgorithm, d: int, dtype) -> bool:
    """Whether ``client_init`` returns arrays, traced once per algorithm structure and d."""
    leaves, treedef = jax.tree_util.tree_flatten(algorithm)
    signature = (treedef, tuple((getattr(a, "shape", None), getattr(a, "dtype", type(a))) for a in leaves), d,
                 np.dtype(dtype))
    if signature not in _CLIENT_STATES:
        shape = jax.eval_shape(algorithm.client_init, jax.ShapeDtypeStruct((d,), dtype))
        _CLIENT_STATES[signature] = bool(jax.tree_util.tree_leaves(shape))
    return _CLIENT_STATES[signature]


def _describe(algorithm: AbstractAlgorithm) -> str:
    """A one-line description: the class and its scalar hyperparameters."""
    fields = []
    for f in dataclasses.fields(algorithm):
        value = getattr(algorithm, f.name)
        if isinstance(value, (jax.Array, np.ndarray)) and np.ndim(value) == 0:
            fields.append(f"{f.name}={float(value):g}")
    return f"{type(algorithm).__name__}({', '.join(fields)})"


def _keep_records(segments, keep: slice) -> np.ndarray:
    """Initial record plus every (k / b)-th block record, along axis 1."""
    first, rest = segments[0], np.concatenate(segments[1:], axis=1)
    return np.concatenate([first, rest[:, keep]], axis=1)


def _run_chunk(run: _Run, plan: Plan, start: int, bar: _Progress) -> dict:
    """Trials start .. start + chunk - 1 (padded to plan.per_call): their kept records."""
    stop = min(start + run.chunk, run.trials)
    m = stop - start
    x_c = np.zeros((plan.per_call, run.x0.shape[1]))
    x_c[:m] = run.x0[start:stop]
    x_c[m:] = run.x0[start]
    ids = jax.device_put(jnp.arange(start, start + plan.per_call, dtype=jnp.int32), plan.sharding)
    x_c = jax.device_put(jnp.asarray(x_c, run.dtype), plan.sharding)
    g0, n0 = _initial_records(run.problem, x_c)
    state = _init_state(run.algorithm, x_c, run.problem.num_clients)
    segs = dict(gap=[np.asarray(g0)[:, None]], grad_norm_sq=[np.asarray(n0)[:, None]],
                x=[np.asarray(x_c)[:, None]])
    b, s = plan.block, plan.segment
    stepsize_blocks = jnp.asarray(run.alphas.reshape(plan.blocks, b), run.dtype)
    for j in range(0, plan.blocks, s):
        state, rec = _run_segment(run.problem, run.oracle, run.sampler, run.algorithm, state, ids,
                                  run.key, jnp.asarray(j * b, jnp.int32), stepsize_blocks[j: j + s],
                                  run.local_steps, run.mode, run.record_x, plan.per_record)
        segs["gap"].append(np.asarray(rec[0]))
        segs["grad_norm_sq"].append(np.asarray(rec[1]))
        if run.record_x:
            segs["x"].append(np.asarray(rec[2]))
        bar.update(s * b, (start // run.chunk) * run.rounds + (j + s) * b)
    out = {name: _keep_records(v, plan.keep)[:m] for name, v in segs.items()
           if name != "x" or run.record_x}
    out["x_final"] = np.asarray(state.server.x)[:m]
    return out


def _assemble(run: _Run, chunks: list[dict]) -> SimResult:
    """The :class:`SimResult` of all chunks, in trial order."""
    def cat(name):
        return np.concatenate([c[name] for c in chunks]) if name in chunks[0] else None

    return SimResult(rounds=np.arange(0, run.rounds + 1, run.record_every), gap=cat("gap"),
                     grad_norm_sq=cat("grad_norm_sq"), x=cat("x"), x_final=cat("x_final"),
                     config=run.config)


def simulate(
    problem: Problem,
    *,
    num_sampled: Optional[int] = None,
    local_steps: int,
    stepsize: Union[float, Callable, np.ndarray],
    rounds: int,
    x0,
    trials: int = 1,
    key: jax.Array,
    record_every: Optional[int] = None,
    mode: str = "mask",
    sampler: Optional[AbstractSampler] = None,
    oracle: Optional[AbstractOracle] = None,
    algorithm: Optional[AbstractAlgorithm] = None,
    dtype: str = "float64",
    trial_chunk: Optional[int] = None,
    record_x: bool = True,
    progress: Union[bool, Callable] = False,
    devices: Optional[Sequence[jax.Device]] = None,
) -> SimResult:
    """Runs ``trials`` independent trials of a federated algorithm (Algorithm 1 by default).

    Each round the sampler picks the participants (default: S = ``num_sampled`` clients
    uniformly without replacement, Assumption 3), each runs Q = ``local_steps`` stochastic
    gradient steps from x_t with stepsize alpha_t, and the server averages their local
    models (Algorithm 1), or does what ``algorithm`` says.

    Args:
      problem: a :class:`~fedjax_abc.Problem` (see ``fedjax_abc.problems``).
      num_sampled: S in [1, n]; None with no ``sampler`` means full participation (S = n).
      local_steps: Q >= 1.
      stepsize: alpha > 0, an array of T values, or a schedule ``t -> alpha_t`` (optax too).
      rounds: T >= 1.
      x0: initial point, shape (d,) (or () when d = 1), or (trials, d) for one per trial.
      trials: number of independent trials (>= 1). Each device runs a multiple of 8
        (float64) or 16 (float32) trials, the extra ones discarded: trial r's numbers are
        then the same bit for bit whatever the number of trials, the chunks or the devices.
      key: a JAX PRNG key of the default threefry2x32 generator; trial r uses
        ``fold_in(key, r)`` whatever the number of trials.
      record_every: k, recording t = 0, k, ..., T; must divide T. Default: the smallest k
        that keeps at most 1000 records.
      mode: "mask" runs all n virtual local trajectories (Section II-A) and averages the
        sampled ones; "gather" runs only the sampled clients. Same key, same draws: the
        same numbers bit for bit on the paper's problems, to rounding in general.
      sampler: an :class:`~fedjax_abc.AbstractSampler`; overrides ``num_sampled``.
      oracle: overrides ``problem.oracle``.
      algorithm: a :class:`~fedjax_abc.algorithms.AbstractAlgorithm`; None is Algorithm 1
        (:class:`~fedjax_abc.algorithms.FedAvg`). Algorithms with client states (SCAFFOLD)
        need a sampler whose slots are distinct clients.
      dtype: "float64" (default; use it for anything compared with the paper) or "float32"
        (faster, biases small gaps).
      trial_chunk: run the trials in chunks of this many (bounds memory); same results.
      record_x: keep the iterates x_t (memory trials x T/k x d); gaps are always kept.
      progress: True for a progress bar on stderr, or ``callback(rounds_done, total, secs)``.
      devices: devices to shard the trials over; default all local devices.

    Returns:
      A :class:`~fedjax_abc.SimResult`.

    Raises:
      ValueError: on invalid input, before anything is compiled.

    Example:
      >>> import jax, fedjax_abc as fa
      >>> p = fa.problems.huber_offsets(jax.random.key(0), n=10, d_max=20.0)
      >>> res = fa.simulate(p, num_sampled=2, local_steps=5, stepsize=1e-2, rounds=100,
      ...                   x0=p.x_star + 1.0, trials=8, key=jax.random.key(1), record_every=10)
      >>> res.gap.shape, res.x_final.shape
      ((8, 11), (8, 1))

    Reference: Algorithm 1 and Section IV of the paper.
    """
    run = _checked(problem, num_sampled, local_steps, stepsize, rounds, x0, trials, key,
                   record_every, mode, sampler, oracle, algorithm, dtype, trial_chunk, record_x,
                   devices)
    plan = make_plan(run.rounds, run.record_every, run.chunk, run.dtype, run.devices,
                     bool(progress))
    bar = _Progress(progress, run.rounds * math.ceil(run.trials / run.chunk), "fedavg")
    try:
        chunks = [_run_chunk(run, plan, start, bar) for start in range(0, run.trials, run.chunk)]
    finally:
        bar.close()
    return _assemble(run, chunks)
