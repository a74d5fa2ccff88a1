"""Asynchronous federated training on a simulated clock, every trial in one program.

C clients are in flight. Each started from the server's model of its dispatch and its
update arrives after its duration (:class:`~fedjax_abc.timing.Clock`); a client's update
depends only on the model it started from, so it is computed at dispatch and held until it
arrives. A server step takes the K earliest arrivals (ties in slot order), applies the rule
(:class:`~fedjax_abc.timing.FedBuff`, :class:`~fedjax_abc.timing.FedAsync`) with each
one's staleness tau = (server steps since its dispatch), and dispatches K replacements,
chosen uniformly among the clients not in flight, from the new model.

Counter-based draws, as in the synchronous engine: with k_u the key data of version u of
a trial (``round_keys``), the clients dispatched at version u are the K (C at u = 0) free
clients with the smallest words of stream 0 (their upper 31 bits; ties by index, as
a sort would order them), client i's local noise is its piece of stream
1 and its duration's two words its piece of stream 4; the trial's speed factors are the
words of stream 5 under k_0. A client dispatched at version u therefore makes exactly the
local draws it would make in round u of a synchronous run.

One ``lax.scan`` over server steps carries the in-flight clients (who, their dispatch
version, arrival time and update) for R trials side by side, ``vmap`` over the trials,
which are split over the local devices (``fa.use_cpu_cores()``: every core) when their
number divides R.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from jaxtyping import Array

from fedjax_abc._algorithms._base import AbstractAlgorithm, RoundInfo, recheck_all
from fedjax_abc._algorithms._buffered import AbstractAsyncRule, check_staleness
from fedjax_abc._engine._jit import flat_jit
from fedjax_abc._engine._memory import available_bytes, format_bytes
from fedjax_abc._engine._metrics import check_metrics, record_trials
from fedjax_abc._engine._names import describe
from fedjax_abc._engine._plan import (default_record_every, recorded_rounds, segment_records,
                                      stepsize_array)
from fedjax_abc._engine._progress import Reporting, progress_meter
from fedjax_abc._engine._random import (SAMPLER_STREAM, SPEED_STREAM, TIME_STREAM,
                                        client_words, round_keys, stream_words)
from fedjax_abc._engine._result import SimResult, warn_divergence
from fedjax_abc._engine._round import Parts, client_round
from fedjax_abc._engine._run import check_settings, oracle_and_algorithm, threefry_key
from fedjax_abc._engine._threefry import fold_in_data
from fedjax_abc._problems._args import DTYPES, check_count, real_array
from fedjax_abc._problems._checks import check_components
from fedjax_abc._problems._oracles import AbstractOracle
from fedjax_abc._problems._problem import Problem, cast_floating, with_placeholder_minima
from fedjax_abc._problems._samplers import UniformWithoutReplacement
from fedjax_abc._problems._time import Clock

__all__ = ["AsyncResult", "AsyncState", "simulate_async"]


class AsyncState(NamedTuple):
    """One trial's asynchronous run (leaves gain a leading trials axis when batched).

    Attributes:
      x: the server's model, (d,).
      version: server steps taken so far, int32.
      now: the simulated time of the last server step.
      client: the C clients in flight, int32 (C,).
      start: the version each one started from, int32 (C,).
      finish: when each one's update arrives, (C,).
      payload: each one's update as the rule keeps it (``payload``), (C, d).
      speed: the trial's speed factors s_i, (n,).
      staleness: delivered updates counted by staleness 0, 1, ..., the last bin those at or
        beyond it, int32 (bins,).
    """

    x: Array
    version: Array
    now: Array
    client: Array
    start: Array
    finish: Array
    payload: Array
    speed: Array
    staleness: Array


class _Parts(eqx.Module):
    problem: Problem
    oracle: AbstractOracle
    algorithm: AbstractAlgorithm
    rule: AbstractAsyncRule
    clock: Clock
    metrics: tuple = eqx.field(static=True)


class _Spec(NamedTuple):
    concurrency: int
    local_steps: int
    generator: str
    bins: int
    groups: int  # devices the trials are sharded over


def smallest(values: Array, count: int, above) -> Array:
    """The indices of the ``count`` smallest entries of ``values`` (n,), smallest first,
    ties by index, each index once; ``above`` is at least every entry. ``count`` passes of
    a minimum (cheaper than a sort on CPU for the few that are taken). A taken entry is
    marked apart from its value: set to ``above`` alone, it would tie with entries equal to
    ``above`` (finish times that overflowed to inf) and be taken again."""
    def take(j, carry):
        taken, out = carry
        free = jnp.where(taken, above, values)
        i = jnp.argmax((free == jnp.min(free)) & ~taken).astype(jnp.int32)
        return taken.at[i].set(True), out.at[j].set(i)

    start = (jnp.zeros(values.shape, bool), jnp.zeros((count,), jnp.int32))
    return jax.lax.fori_loop(0, count, take, start)[1]


_FREE_BOUND = np.uint32(1 << 31)  # above every priority, word >> 1 < 2^31


def _choose(k: Array, busy: Array, count: int, generator: str) -> Array:
    """``count`` clients uniformly among those not ``busy`` (n,): the free ones with the
    smallest priorities (word >> 1, of stream 0 under k), ties by index."""
    words = stream_words(k, SAMPLER_STREAM, busy.shape[0], generator)
    priority = jnp.where(busy, _FREE_BOUND, words >> np.uint32(1))
    return smallest(priority, count, _FREE_BOUND)


def _durations(clock: Clock, k: Array, clients: Array, steps: int, speed: Array,
               generator: str) -> Array:
    """D_i of the dispatched clients from their two words of stream 4 under k."""
    words = client_words(k, clients, 2, generator, TIME_STREAM)  # (K, 2)
    return clock.durations(words.T, steps, speed[clients])


def _work(parts: _Parts, spec: _Spec, clients: Array, x: Array, k: Array, stepsize) -> Array:
    """The dispatched clients' payloads: the algorithm's client rule from x (K, d)."""
    server = parts.algorithm.init(x)

    def one(i):
        message = client_round(Parts(parts.problem, parts.oracle, None, parts.algorithm, None,
                                     spec.local_steps), spec.generator, i, server, (), (), k,
                               stepsize)[0]
        return parts.rule.payload(x, message)

    return jax.vmap(one)(clients)


def _start(parts: _Parts, spec: _Spec, trial_key: Array, x0: Array, stepsize) -> AsyncState:
    """One trial at version 0: C clients dispatched from x0 at time 0."""
    n = parts.problem.num_clients
    k = round_keys(trial_key, 0, spec.generator)
    speed = parts.clock.speeds(stream_words(k, SPEED_STREAM, n, spec.generator), x0.dtype)
    clients = _choose(k, jnp.zeros((n,), bool), spec.concurrency, spec.generator)
    finish = _durations(parts.clock, k, clients, spec.local_steps, speed, spec.generator)
    C = spec.concurrency
    return AsyncState(x0, jnp.zeros((), jnp.int32), jnp.zeros((), x0.dtype), clients,
                      jnp.zeros((C,), jnp.int32), finish,
                      _work(parts, spec, clients, x0, k, stepsize), speed,
                      jnp.zeros((spec.bins,), jnp.int32))


def server_step(parts: _Parts, spec: _Spec, trial_key: Array, state: AsyncState,
                stepsize) -> AsyncState:
    """One server step of one trial: the K earliest arrivals applied, K clients
    dispatched from the new model with client stepsize ``stepsize``."""
    K, bins = parts.rule.buffer, spec.bins
    arrive = smallest(state.finish, K, jnp.inf)
    now = state.finish[arrive[K - 1]]
    tau = state.version - state.start[arrive]
    weights = parts.rule.staleness(tau)
    x = parts.rule.server_step(state.x, state.payload[arrive], weights)
    counts = state.staleness.at[jnp.minimum(tau, bins - 1)].add(1)
    version = state.version + 1
    k = round_keys(trial_key, version, spec.generator)
    n = parts.problem.num_clients
    busy = jnp.zeros((n,), bool).at[state.client].set(True).at[state.client[arrive]].set(False)
    new = _choose(k, busy, K, spec.generator)
    finish = now + _durations(parts.clock, k, new, spec.local_steps, state.speed,
                              spec.generator)
    return AsyncState(x, version, now, state.client.at[arrive].set(new),
                      state.start.at[arrive].set(version), state.finish.at[arrive].set(finish),
                      state.payload.at[arrive].set(_work(parts, spec, new, x, k, stepsize)),
                      state.speed, counts)


def _record(parts: _Parts, spec: _Spec, state: AsyncState) -> tuple:
    """(gap, grad_norm_sq, *metrics, time) of every trial (each (R,))."""
    return record_trials(parts.problem, parts.metrics, state.x, spec.groups) + (state.now,)


def _begin(parts: _Parts, spec: _Spec, trial_keys: Array, x0: Array, stepsize):
    state = jax.vmap(lambda k, x: _start(parts, spec, k, x, stepsize), in_axes=(1, 0))(
        trial_keys, x0)
    return state, _record(parts, spec, state)


def _blocks(parts: _Parts, spec: _Spec, trial_keys: Array, state: AsyncState, stepsizes):
    """Blocks of server steps, a record after each: stepsizes (blocks, steps per block)."""
    step = jax.vmap(lambda k, s, a: server_step(parts, spec, k, s, a), in_axes=(1, 0, None))

    def block(state, alphas):
        state, _ = jax.lax.scan(lambda s, a: (step(trial_keys, s, a), None), state, alphas)
        return state, _record(parts, spec, state)

    state, records = jax.lax.scan(block, state, stepsizes)
    return state, tuple(jnp.moveaxis(r, 0, 1) for r in records)


# the two compiled programs, under the engine's jit wrapper
_run_begin = flat_jit(_begin)
_run_blocks = flat_jit(_blocks)


@dataclasses.dataclass(frozen=True)
class AsyncResult:
    """What :func:`simulate_async` returns.

    Attributes:
      result: the records as a :class:`~fedjax_abc.SimResult` whose ``rounds`` are server
        steps u = 0, k, 2k, ..., T and whose metric ``time`` is the simulated time of each
        recorded step (``result.plot(x="time")``, ``result.on_time_grid(...)``).
      staleness: Int[ndarray, "trials bins"], every trial's delivered updates counted by
        staleness tau = 0, 1, ..., the last bin counting tau >= bins - 1.
    """

    result: SimResult
    staleness: np.ndarray

    def staleness_distribution(self) -> np.ndarray:
        """The share of all delivered updates with each staleness (pooled over trials)."""
        counts = self.staleness.sum(axis=0).astype(np.float64)
        return counts / counts.sum()

    def plot_staleness(self, ax=None, **bar_kwargs):
        """The staleness distribution as bars; returns the Axes."""
        if ax is None:
            import matplotlib.pyplot as plt

            ax = plt.gca()
        share = self.staleness_distribution()
        ax.bar(np.arange(share.size), share, **bar_kwargs)
        ax.set_xlabel(f"staleness tau (last bar: tau >= {share.size - 1})")
        ax.set_ylabel("share of updates")
        return ax


def _numbers_as_arrays(tree, integers: bool):
    """``tree`` with its Python and NumPy numbers (a value put in with ``eqx.tree_at``, where
    the constructor makes an array) as float arrays, as the constructor makes them;
    ``integers``: integers too (no leaf of a rule or a clock counts anything)."""
    kinds = (float, np.floating) + ((int, np.integer) if integers else ())

    def array(leaf):
        if isinstance(leaf, kinds) and not isinstance(leaf, (bool, np.bool_)):
            return jnp.asarray(float(leaf), float)
        return leaf

    return jax.tree_util.tree_map(array, tree)


def check_local_model(algorithm, problem, oracle, Q, generator: str, x) -> None:
    """ValueError (one line) for an algorithm whose clients keep state or answer a query,
    whose message is not a model like x, or whose server step is not "take the mean
    model" (a server stepsize, momentum, an adaptive step): where a client's message is
    used as a model (an asynchronous rule's server step, a gossip step), the algorithm's
    own server step would be ignored silently. Q: local steps or a law of them."""
    name = type(algorithm).__name__
    # the components as the run has them: in its dtype (float32 included)
    problem, oracle, algorithm = (with_placeholder_minima(problem).astype(x.dtype),
                                  cast_floating(oracle, x.dtype), cast_floating(algorithm, x.dtype))
    client = jax.eval_shape(algorithm.init_client, x)
    if jax.tree_util.tree_leaves(client):
        raise ValueError(f"{name} keeps client states, which asynchronous clients do not "
                         "carry: use an algorithm whose clients are stateless (FedAvg, FedProx)")
    server = jax.eval_shape(algorithm.init, x)
    if jax.eval_shape(lambda s: algorithm.query(s, (), lambda y: y), server) is not None:
        raise ValueError(f"{name} asks its clients a query before the local steps; an "
                         "asynchronous client starts from the model alone")
    message = jax.eval_shape(lambda s: client_round(
        Parts(problem, oracle, None, algorithm, None, Q), generator, jnp.zeros((), jnp.int32),
        s, (), (), jnp.zeros((2,), jnp.uint32), jnp.ones((), x.dtype))[0], server)
    if not (isinstance(message, jax.ShapeDtypeStruct) and message.shape == x.shape):
        raise ValueError(f"{name}'s clients send {jax.tree_util.tree_structure(message)}, not "
                         "a local model: the asynchronous rules take the clients' models "
                         "(FedAvg, FedProx)")
    info = RoundInfo(jnp.ones((), x.dtype), problem.num_clients, jnp.ones((), x.dtype), Q, None)
    state = algorithm.init(jnp.linspace(1.0, 2.0, x.shape[0], dtype=x.dtype))
    for mean in (jnp.linspace(-1.0, 3.0, x.shape[0], dtype=x.dtype),  # two steps: momentum
                 jnp.linspace(2.0, -2.0, x.shape[0], dtype=x.dtype)):  # shows in the second
        state = algorithm.server_update(state, mean, info)
        if not np.allclose(state.x, mean):
            raise ValueError(f"{describe(algorithm)} has a server step of its own (a server "
                             "stepsize, momentum, an adaptive step), which the asynchronous "
                             "rule's server step would replace: use FedAvg() or FedProx (the "
                             "rule has its own server stepsize or mixing)")


def _check_memory(R: int, C: int, n: int, d: int, itemsize: int) -> None:
    """ValueError (one line) when the in-flight updates cannot fit: each trial holds C
    updates of d numbers, and a server step makes about two more copies of them."""
    need = 3 * R * (C * d + n) * itemsize
    available = available_bytes()
    if available is not None and need > available:
        raise ValueError(f"{R} trials with C={C} updates of d={d} in flight need about "
                         f"{format_bytes(need)}, more than the {format_bytes(available)} "
                         "available: run fewer trials at a time (several calls with other "
                         "keys) or fewer clients in flight")


def simulate_async(problem: Problem, rule: AbstractAsyncRule, clock: Clock, *,
                   concurrency: int, local_steps: int, stepsize, steps: int, trials: int,
                   key, x0, oracle: Optional[AbstractOracle] = None,
                   algorithm: Optional[AbstractAlgorithm] = None,
                   record_every: Optional[int] = None, dtype: str = "float64",
                   metrics=None, generator: str = "threefry",
                   staleness_bins: Optional[int] = None, progress=False) -> AsyncResult:
    """Asynchronous training (FedAsync, FedBuff) of ``trials`` trials on a simulated clock.

    Args:
      problem: the problem; ``oracle``: its gradient oracle (default the problem's).
      rule: :class:`~fedjax_abc.timing.FedBuff` or :class:`~fedjax_abc.timing.FedAsync`
        (or a user's :class:`~fedjax_abc.timing.AbstractAsyncRule`); its buffer K arrivals
        make a server step.
      clock: each client's duration (:class:`~fedjax_abc.timing.Clock`), K_i = local_steps.
      concurrency: C, the clients in flight (K <= C <= n).
      local_steps: Q, each client's local steps.
      stepsize: the clients' local stepsize: a number, T values or a schedule u -> alpha_u
        of the server version u a client starts from.
      steps: T, server steps.
      trials, key, x0: as :func:`fedjax_abc.simulate` (x0 of shape (d,)).
      algorithm: the client rule: an algorithm whose clients keep no state and send their
        local model (default FedAvg's local SGD; FedProx's proximal steps).
      record_every: k, records at server steps 0, k, 2k, ..., T (default as ``simulate``).
      dtype: "float64" (JAX's 64-bit mode on) or "float32" (the components cast to it; the
        paper's problems still need the 64-bit mode to be built).
      metrics: user metrics of x, as ``simulate``.
      staleness_bins: the staleness histogram's bins (default 4 C + 1; the last counts
        everything beyond).
      progress: as ``simulate``'s: True for a bar over the server steps, a callback
        ``(steps_done, total, secs)`` or a progress meter; the run is then cut into about
        50 calls of one compiled program (the same numbers).

    The rule, the clock, the algorithm and the oracle are checked as they are at the call,
    as ``simulate`` checks its components: a value put into one with ``eqx.tree_at`` (a
    negative server stepsize, a mixing outside (0, 1], a negative law parameter or speed
    factor) gets the error its constructor gives, and a Python number put where the
    constructor makes an array runs as that array.

    Returns:
      :class:`AsyncResult`.

    Example:
      >>> import jax, jax.numpy as jnp, fedjax_abc as fa
      >>> p = fa.problems.quadratics(jax.random.key(0), n=20, d=2)
      >>> out = fa.timing.simulate_async(
      ...     p, fa.timing.FedBuff(buffer=2), fa.timing.Clock(fa.timing.Exponential(1.0)),
      ...     concurrency=4, local_steps=2, stepsize=0.1, steps=30, trials=3,
      ...     key=jax.random.key(1), x0=jnp.ones(2))
      >>> out.result.gap.shape, out.staleness.shape
      ((3, 31), (3, 17))
    """
    check_settings(problem, dtype, generator)
    if not isinstance(rule, AbstractAsyncRule):
        raise ValueError(f"rule must be fedjax_abc.timing.FedBuff, FedAsync or another "
                         f"AbstractAsyncRule, got {type(rule).__name__}")
    if not isinstance(clock, Clock):
        raise ValueError(f"clock must be a fedjax_abc.timing.Clock, got {type(clock).__name__}")
    key = threefry_key(key)  # before x0: swapped, each names the other
    x0 = real_array("x0", x0)
    oracle, algorithm = oracle_and_algorithm(problem, oracle, algorithm)
    # the values as they are now, with the checks their constructors make: a value put in
    # with eqx.tree_at (a number where an array belongs included) gets the same error
    rule, clock = _numbers_as_arrays(rule, True), _numbers_as_arrays(clock, True)
    oracle, algorithm = _numbers_as_arrays(oracle, False), _numbers_as_arrays(algorithm, False)
    recheck_all((problem, oracle, algorithm, rule, clock))
    check_staleness(rule.staleness)  # as it is now (a value put in with eqx.tree_at too)
    n, d = problem.num_clients, problem.dim
    C = check_count("concurrency (C)", concurrency)
    K = rule.buffer
    if K > C:
        raise ValueError(f"the buffer (K={K}) is larger than the clients in flight "
                         f"(concurrency C={C}): a server step would wait forever")
    if C > n:
        raise ValueError(f"concurrency (C={C}) must be at most the number of clients (n={n})")
    Q = check_count("local_steps (Q)", local_steps)
    T = check_count("steps (T)", steps)
    R = check_count("trials", trials)
    clock.validate(n)
    jdtype = DTYPES[dtype]
    if x0.shape != (d,) or not np.all(np.isfinite(x0)):
        raise ValueError(f"x0 must be a finite array of shape ({d},), got shape {x0.shape}")
    # a user's oracle: its shapes, and no draw made once when traced (a generator of NumPy's)
    check_components(problem, oracle, UniformWithoutReplacement(K), Q, dtype)
    check_local_model(algorithm, problem, oracle, Q, generator, jax.ShapeDtypeStruct((d,), jdtype))
    k = (default_record_every(T) if record_every is None
         else check_count("record_every", record_every))
    if k > T:
        raise ValueError(f"record_every (k={k}) must be at most steps (T={T})")
    bins = 4 * C + 1 if staleness_bins is None else check_count("staleness_bins", staleness_bins, 2)
    _check_memory(R, C, n, d, np.dtype(jdtype).itemsize)
    alphas = stepsize_array(stepsize, T).astype(jdtype)
    names, fns = check_metrics(metrics, d, jdtype)
    if "time" in names:
        raise ValueError("metric name 'time' is taken by the simulated time; rename the metric")
    parts = _Parts(problem.solved().astype(jdtype), cast_floating(oracle, jdtype),
                   cast_floating(algorithm, jdtype), cast_floating(rule, jdtype),
                   cast_floating(clock, jdtype), fns)
    devices = jax.local_devices()
    groups = len(devices) if len(devices) > 1 and R % len(devices) == 0 else 1
    spec = _Spec(C, Q, generator, bins, groups)
    trial_keys = fold_in_data(jax.random.key_data(key), jnp.arange(R, dtype=jnp.int32))
    xs = jnp.broadcast_to(jnp.asarray(x0, jdtype), (R, d))
    if groups > 1:  # the trials split over the devices (a trial's numbers are the same)
        mesh = Mesh(np.array(devices), ("trials",))
        trial_keys = jax.device_put(trial_keys, NamedSharding(mesh, PartitionSpec(None, "trials")))
        xs = jax.device_put(xs, NamedSharding(mesh, PartitionSpec("trials")))
    state, first = _run_begin(parts, spec, trial_keys, xs, alphas[0])
    # alpha_u for the clients dispatched at version u = 1 .. T (the last never arrives)
    later = np.concatenate([alphas[1:], alphas[-1:]])
    blocks, tail = T // k, T % k
    reporting = Reporting(progress_meter(progress), T,
                          f"{type(rule).__name__}, {R} trials x {T} server steps")
    # with reports, calls of `per` blocks each (one program): about 50 of them
    per = segment_records(blocks, 50) if reporting.reports else blocks
    # (first step, blocks, steps a block) of each call; a last short block on its own
    calls = [(b * k, per, k) for b in range(0, blocks, per)]
    if tail:
        calls.append((blocks * k, 1, tail))
    pieces = [first]
    try:
        for lo, m, steps in calls:
            state, records = _run_blocks(parts, spec, trial_keys, state,
                                         later[lo:lo + m * steps].reshape(m, steps))
            pieces.append(records)
            reporting(lo + m * steps)
    finally:
        reporting.close()
    columns = [np.concatenate([np.asarray(first[j])[:, None]] + [np.asarray(p[j])
                               for p in pieces[1:]], axis=1) for j in range(len(first))]
    gap, grad, *user, time = columns
    config = {"algorithm": describe(algorithm), "rule": describe(rule),
              "clock": describe(clock), "oracle": describe(oracle), "problem": problem.name,
              "buffer": K, "concurrency": C, "local_steps": Q, "steps": T, "trials": R,
              "record_every": k, "dtype": dtype, "generator": generator,
              "num_clients": n, "dim": d, "stepsize": float(alphas[0]),
              "key_data": np.asarray(jax.random.key_data(key)).tolist()}
    result = SimResult(rounds=recorded_rounds(T, k), gap=gap, grad_norm_sq=grad, x=None,
                       x_final=np.asarray(state.x), config=config,
                       metrics={**dict(zip(names, user)), "time": time})
    warn_divergence(result, stacklevel=2)
    return AsyncResult(result, np.asarray(state.staleness))

