"""``simulate``: many independent trials of Algorithm 1 as one compiled XLA program.

Layout of the program: ``lax.scan`` over records of [``lax.scan`` over the k rounds between
records of [one round of all trials: ``vmap`` over clients of [``vmap`` over trials of
[``lax.scan`` over Q local steps]]]], under one ``jit``; the trials are the innermost
``vmap`` so that their copies of a client's model lie side by side in memory. Shapes (n, S,
Q, T/k, trials per chunk, mode) are static; the key, x0, the stepsizes and the problem's
arrays are data, so a new key or a new stepsize compiles nothing.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from typing import Callable, Optional, Sequence, Union

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from fedjax_abc._engine import _round
from fedjax_abc._problems._checks import check_components
from fedjax_abc._problems._oracles import AbstractOracle
from fedjax_abc._problems._problem import Problem, cast_floating
from fedjax_abc._engine._result import SimResult
from fedjax_abc._problems._samplers import AbstractSampler, FullParticipation, UniformWithoutReplacement
from fedjax_abc._engine._threefry import fold_in_data

__all__ = ["simulate", "stepsize_array"]

_DTYPES = {"float64": jnp.float64, "float32": jnp.float32}


def _check_int(name: str, value, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if value < low:
        raise ValueError(f"{name} ({value}) must be >= {low}")
    return int(value)


def stepsize_array(stepsize, rounds: int) -> np.ndarray:
    """alpha_0, ..., alpha_{T-1} as a float64 array from a number, an array or a schedule.

    A schedule is any ``t -> alpha_t`` (an optax schedule included); it is evaluated once,
    on all T rounds, before compilation.

    Raises:
      ValueError: if any alpha_t is not finite and positive, or an array has the wrong shape.
    """
    if callable(stepsize):
        ts = jnp.arange(rounds)
        try:
            alphas = np.asarray(jax.vmap(stepsize)(ts), dtype=np.float64)
        except Exception:  # a schedule written for Python numbers
            alphas = np.array([float(stepsize(t)) for t in range(rounds)], dtype=np.float64)
        what = "stepsize schedule"
    else:
        alphas = np.asarray(stepsize, dtype=np.float64)
        what = "stepsize"
        if alphas.ndim == 0:
            alphas = np.full((rounds,), float(alphas))
    if alphas.shape != (rounds,):
        raise ValueError(f"{what} must give one value per round, shape ({rounds},), got {alphas.shape}")
    bad = ~(np.isfinite(alphas) & (alphas > 0))
    if bad.any():
        t = int(np.argmax(bad))
        raise ValueError(f"{what} must be finite and > 0 in every round; alpha_{t} = {alphas[t]}")
    return alphas


def _default_record_every(rounds: int) -> int:
    for k in range(1, rounds + 1):
        if rounds % k == 0 and rounds // k <= 1000:
            return k
    return rounds


def _segment_records(records: int, pieces: int) -> int:
    """The divisor s of ``records`` with records / s closest to ``pieces`` from below."""
    target = max(1, records // max(1, pieces))
    best = 1
    for s in range(1, records + 1):
        if records % s == 0 and s <= max(target, 1):
            best = s
    return best


def _progress_block(rounds: int, record_every: int, pieces: int = 50) -> int:
    """The largest divisor b of k with at least ``pieces`` blocks of b rounds in T."""
    for b in range(record_every, 0, -1):
        if record_every % b == 0 and rounds // b >= min(pieces, rounds):
            return b
    return 1


def _keep_records(segments, keep: slice) -> np.ndarray:
    """Initial record plus every (k / b)-th block record, along axis 1."""
    first, rest = segments[0], np.concatenate(segments[1:], axis=1)
    return np.concatenate([first, rest[:, keep]], axis=1)


def _record(problem: Problem, x):
    f, g = problem.value_and_grad(x)
    return f - problem.f_star, jnp.sum(g * g)


@eqx.filter_jit
def _initial_records(problem, x):
    return jax.vmap(lambda xr: _record(problem, xr))(x)


_LANE_BYTES = 64  # the widest SIMD register in common use (AVX-512)


@eqx.filter_jit
def _run_segment(problem, oracle, sampler, x, trial_ids, key, t0, stepsizes, local_steps, mode,
                 record_x, per_record=1):
    """Rounds t0 .. t0 + s*b - 1 of every trial in s blocks of b rounds; a record per block.

    x: (m, d); trial_ids: (m,); stepsizes: (s, b). Returns x at the end and the records
    (gap, grad_norm_sq[, x]) of shape (m, s[, d]). Only blocks b * (i + 1) = k (i + 1)
    rounds after t = 0 (k = per_record * b, t0 a multiple of b) evaluate f and grad f; the
    records of the other blocks are zeros, for the caller to drop.
    """
    b = stepsizes.shape[1]
    trial_keys = fold_in_data(jax.random.key_data(key), trial_ids)  # (2, m): fold_in(key, r)

    def record(x_next):
        return jax.vmap(lambda xr: _record(problem, xr))(x_next)

    def skip(x_next):
        zero = jnp.zeros(x_next.shape[:1], x_next.dtype)
        return zero, zero

    def block(x_t, inputs):
        j, alphas = inputs
        x_next = _round.run_rounds(problem, oracle, sampler, x_t, trial_keys, t0 + j * b,
                                    alphas, local_steps, mode)
        if per_record == 1:
            gap, gns = record(x_next)
        else:  # every trial's f(x) costs a pass over all n clients: only where it is kept
            kept = (t0 // b + j) % per_record == per_record - 1
            gap, gns = jax.lax.cond(kept, record, skip, x_next)
        return x_next, (gap, gns, x_next) if record_x else (gap, gns)

    steps = jnp.arange(stepsizes.shape[0], dtype=jnp.int32)
    x, records = jax.lax.scan(block, x, (steps, stepsizes))
    return x, tuple(jnp.moveaxis(r, 0, 1) for r in records)


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
    dtype: str = "float64",
    trial_chunk: Optional[int] = None,
    record_x: bool = True,
    progress: Union[bool, Callable] = False,
    devices: Optional[Sequence[jax.Device]] = None,
) -> SimResult:
    """Runs ``trials`` independent trials of FedAvg with partial participation (Algorithm 1).

    Each round the sampler picks the participants (default: S = ``num_sampled`` clients
    uniformly without replacement, Assumption 3), each runs Q = ``local_steps`` stochastic
    gradient steps from x_t with stepsize alpha_t, and the server averages their local models.

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
    if not isinstance(problem, Problem):
        raise ValueError(f"problem must be a fedjax_abc.Problem, got {type(problem).__name__}")
    n = problem.num_clients
    d = problem.dim
    Q = _check_int("local_steps (Q)", local_steps)
    T = _check_int("rounds (T)", rounds)
    R = _check_int("trials", trials)
    k = _default_record_every(T) if record_every is None else _check_int("record_every", record_every)
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

    jdtype = _DTYPES[dtype]
    if key.dtype == jnp.uint32:
        key = jax.random.wrap_key_data(key, impl="threefry2x32")
    if str(jax.random.key_impl(key)) != "threefry2x32":
        raise ValueError("key must be a threefry2x32 key (the default, jax.random.key(seed)); "
                         f"got a {jax.random.key_impl(key)} key")
    check_components(problem, oracle, sampler, Q, dtype)
    # the name is static: drop it so problems differing only in name share one compilation
    problem_c = dataclasses.replace(problem.astype(jdtype), name="")
    oracle_c = cast_floating(oracle, jdtype)

    devices = _resolve_devices(devices)
    ndev = len(devices)
    # The trials are the innermost axis, so the compiled loops run along them in SIMD
    # lanes; a trial that fell in a loop's scalar remainder could round differently. Each
    # device gets a multiple of 64 bytes' worth of trials (8 in float64, 16 in float32),
    # so that trial r's numbers do not depend on the chunking, the devices or its neighbours.
    lanes = _LANE_BYTES // np.dtype(jdtype).itemsize
    per_call = int(math.ceil(chunk / (ndev * lanes))) * ndev * lanes
    if ndev > 1:
        mesh = Mesh(np.array(devices), ("trials",))
        sharding = NamedSharding(mesh, PartitionSpec("trials"))
    else:
        sharding = jax.sharding.SingleDeviceSharding(devices[0])

    # Rounds run in blocks of b rounds (b = k, or a divisor of k so that progress can be
    # shown often enough); a record is kept at the end of every k / b blocks.
    b = _progress_block(T, k) if progress else k
    blocks, per_record = T // b, k // b
    s = _segment_records(blocks, 100) if progress else blocks
    stepsize_blocks = jnp.asarray(alphas.reshape(blocks, b), jdtype)
    bar = _Progress(progress, T * math.ceil(R / chunk), "fedavg")

    gaps, gnss, xs, finals = [], [], [], []
    try:
        for start in range(0, R, chunk):
            stop = min(start + chunk, R)
            ids = np.arange(start, start + per_call)
            x_c = np.zeros((per_call, d))
            x_c[: stop - start] = x0[start:stop]
            x_c[stop - start:] = x0[start]
            ids = jax.device_put(jnp.asarray(ids, jnp.int32), sharding)
            x_c = jax.device_put(jnp.asarray(x_c, jdtype), sharding)
            g0, n0 = _initial_records(problem_c, x_c)
            seg_gap, seg_gns, seg_x = [np.asarray(g0)[:, None]], [np.asarray(n0)[:, None]], [np.asarray(x_c)[:, None]]
            keep = slice(per_record - 1, None, per_record)
            for j in range(0, blocks, s):
                x_c, rec = _run_segment(problem_c, oracle_c, sampler, x_c, ids, key,
                                        jnp.asarray(j * b, jnp.int32), stepsize_blocks[j: j + s],
                                        Q, mode, record_x, per_record)
                seg_gap.append(np.asarray(rec[0]))
                seg_gns.append(np.asarray(rec[1]))
                if record_x:
                    seg_x.append(np.asarray(rec[2]))
                bar.update(s * b, (start // chunk) * T + (j + s) * b)
            m = stop - start
            gaps.append(_keep_records(seg_gap, keep)[:m])
            gnss.append(_keep_records(seg_gns, keep)[:m])
            if record_x:
                xs.append(_keep_records(seg_x, keep)[:m])
            finals.append(np.asarray(x_c)[:m])
    finally:
        bar.close()

    config = dict(
        problem=problem.name, n=n, d=d, num_sampled=getattr(sampler, "num_sampled", None),
        sampler=type(sampler).__name__, oracle=type(oracle).__name__, local_steps=Q, rounds=T,
        trials=R, record_every=k, mode=mode, dtype=dtype, trial_chunk=chunk,
        stepsize=float(alphas[0]) if np.all(alphas == alphas[0]) else "schedule",
        key=np.asarray(jax.random.key_data(key)).tolist(), devices=[str(dv) for dv in devices],
        jax_version=jax.__version__,
    )
    return SimResult(
        rounds=np.arange(0, T + 1, k),
        gap=np.concatenate(gaps),
        grad_norm_sq=np.concatenate(gnss),
        x=np.concatenate(xs) if record_x else None,
        x_final=np.concatenate(finals),
        config=config,
    )
