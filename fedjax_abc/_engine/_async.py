"""Asynchronous federated training on a simulated clock: the :class:`Buffered` schedule.

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
local draws it would make in round u of a synchronous run, with stepsize alpha_u.

:class:`Buffered` is a schedule (:class:`~fedjax_abc.AbstractSchedule`): ``fa.simulate(...,
schedule=Buffered(rule, clock, concurrency))`` runs it through the one driver of every
schedule (checkpoints, progress, trial chunks, devices, ``first_trial``, sweeps). A step
is a server step; the records add the simulated time of each recorded step (``time``) and
every trial's delivered updates counted by staleness so far (``staleness``, a vector of
bins a record). :func:`simulate_async` is the same run with the asynchronous names.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from fedjax_abc._algorithms._base import AbstractAlgorithm
from fedjax_abc._algorithms._buffered import AbstractAsyncRule, check_staleness
from fedjax_abc._engine._aggregate import needs_messages
from fedjax_abc._engine._memory import available_bytes, format_bytes
from fedjax_abc._engine._metrics import client_records
from fedjax_abc._engine._random import (SAMPLER_STREAM, SPEED_STREAM, TIME_STREAM,
                                        client_words, round_keys, stream_words)
from fedjax_abc._engine._result import SimResult
from fedjax_abc._engine._round import Parts, client_round
from fedjax_abc._engine._schedule import AbstractSchedule, check_local_model
from fedjax_abc._engine._simulate import simulate
from fedjax_abc._problems._args import check_count
from fedjax_abc._problems._oracles import AbstractOracle
from fedjax_abc._problems._problem import Problem
from fedjax_abc._problems._samplers import FullParticipation
from fedjax_abc._problems._time import Clock

__all__ = ["AsyncState", "Buffered", "plot_staleness", "simulate_async", "staleness",
           "staleness_distribution"]


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


def _numbers_as_arrays(tree):
    """``tree`` with its Python and NumPy numbers (a value put in with ``eqx.tree_at``, where
    the constructor makes an array) as float arrays, as the constructor makes them."""
    def array(leaf):
        if isinstance(leaf, (float, int, np.floating, np.integer)) and \
                not isinstance(leaf, (bool, np.bool_)):
            return jnp.asarray(float(leaf), float)
        return leaf

    return jax.tree_util.tree_map(array, tree)


class Buffered(AbstractSchedule):
    """Buffered asynchronous aggregation on a simulated clock (see the module): a step is
    a server step, which applies the K earliest of the C updates in flight.

    Attributes:
      rule: :class:`~fedjax_abc.timing.FedBuff` or :class:`~fedjax_abc.timing.FedAsync` (or
        a user's :class:`~fedjax_abc.timing.AbstractAsyncRule`); its buffer K arrivals make
        a server step.
      clock: each client's duration (:class:`~fedjax_abc.timing.Clock`), K_i = the run's Q.
      concurrency: C, the clients in flight (K <= C <= n; static).
      staleness_bins: the staleness record's bins (default 4 C + 1; the last counts
        everything beyond; static).

    The clients dispatched at version u take their local steps with alpha_u (the run's
    stepsize of step u; the last step's replacements, which never arrive, alpha_{T-1}).

    Example:
      >>> import jax, jax.numpy as jnp, fedjax_abc as fa
      >>> p = fa.problems.quadratics(jax.random.key(0), n=20, d=2)
      >>> schedule = fa.timing.Buffered(fa.timing.FedBuff(buffer=2),
      ...                               fa.timing.Clock(fa.timing.Exponential(1.0)),
      ...                               concurrency=4)
      >>> res = fa.simulate(p, local_steps=2, stepsize=0.1, rounds=30, trials=3,
      ...                   key=jax.random.key(1), x0=jnp.ones(2), schedule=schedule)
      >>> res.metrics["time"].shape, res.metrics["staleness"].shape
      ((3, 31), (3, 31, 17))
    """

    rule: AbstractAsyncRule
    clock: Clock
    concurrency: int = eqx.field(static=True)
    staleness_bins: Optional[int] = eqx.field(static=True)  # None: 4 C + 1

    def __init__(self, rule: AbstractAsyncRule, clock: Clock, concurrency: int,
                 staleness_bins: Optional[int] = None):
        if not isinstance(rule, AbstractAsyncRule):
            raise ValueError(f"rule must be fedjax_abc.timing.FedBuff, FedAsync or another "
                             f"AbstractAsyncRule, got {type(rule).__name__}")
        if not isinstance(clock, Clock):
            raise ValueError(f"clock must be a fedjax_abc.timing.Clock, got {type(clock).__name__}")
        C = check_count("concurrency (C)", concurrency)
        if rule.buffer > C:
            raise ValueError(f"the buffer (K={rule.buffer}) is larger than the clients in flight "
                             f"(concurrency C={C}): a server step would wait forever")
        # a Python number put into either with eqx.tree_at runs as the array its constructor
        # makes (no leaf of a rule or a clock counts anything)
        self.rule, self.clock = _numbers_as_arrays(rule), _numbers_as_arrays(clock)
        self.concurrency = C
        self.staleness_bins = None if staleness_bins is None else check_count(
            "staleness_bins", staleness_bins, 2)

    @property
    def bins(self) -> int:
        """The staleness record's bins: ``staleness_bins``, or 4 C + 1."""
        return 4 * self.concurrency + 1 if self.staleness_bins is None else self.staleness_bins

    def check(self, *, problem, oracle, sampler, algorithm, transform, local_steps, aggregator,
              byzantine, generator, dtype) -> None:
        n, C = problem.num_clients, self.concurrency
        if C > n:
            raise ValueError(f"concurrency (C={C}) must be at most the number of clients (n={n})")
        check_staleness(self.rule.staleness)
        self.clock.validate(n)
        if not isinstance(local_steps, int):
            raise ValueError("Buffered clients take Q local steps (an int), not "
                             f"{type(local_steps).__name__}")
        if sampler != FullParticipation():
            raise ValueError("Buffered chooses the clients it dispatches itself (uniformly among "
                             f"those not in flight): leave num_sampled and sampler out, not "
                             f"{type(sampler).__name__}")
        if transform is not None:
            raise ValueError("Buffered clients send their models without message transforms: "
                             "pass transform=None")
        if needs_messages(aggregator, byzantine):
            raise ValueError("Buffered aggregates with its rule: an aggregator or Byzantine "
                             "clients do not apply (leave them out)")
        check_local_model(algorithm, problem, oracle, local_steps, generator,
                          jax.ShapeDtypeStruct((problem.dim,), dtype), "Buffered")

    def stepsizes(self, alphas):
        # the C clients of version 0 take alpha_0; server step t dispatches version t + 1
        return alphas[0], np.concatenate([alphas[1:], alphas[-1:]])

    def _parts(self, parts) -> tuple:
        return (_Parts(parts.problem, parts.oracle, parts.algorithm, self.rule, self.clock,
                       parts.metrics),
                _Spec(self.concurrency, parts.local_steps, "", self.bins, 1))

    def init(self, parts, program, x0, trial_keys, stepsize):
        p, spec = self._parts(parts)
        spec = spec._replace(generator=program.generator)
        return jax.vmap(lambda k, x: _start(p, spec, k, x, stepsize), in_axes=(1, 0))(
            trial_keys, x0)

    def advance(self, parts, program, state, trial_keys, t0, stepsizes):
        p, spec = self._parts(parts)
        spec = spec._replace(generator=program.generator)
        step = jax.vmap(lambda k, s, a: server_step(p, spec, k, s, a), in_axes=(1, 0, None))
        state, _ = jax.lax.scan(lambda s, a: (step(trial_keys, s, a), None), state, stepsizes)
        return state

    def model(self, state):
        return state.x

    def record_names(self):
        return ("time", "staleness")

    def records(self, parts, program, state):
        return (state.now, state.staleness)

    def clients(self, parts, program, state):
        server = jax.vmap(parts.algorithm.init)(state.x)
        return client_records(parts.problem, parts.algorithm, server, (), program.groups)


def staleness(result: SimResult) -> np.ndarray:
    """Int[ndarray, "trials bins"]: every trial's delivered updates of a :class:`Buffered`
    run counted by staleness tau = 0, 1, ..., the last bin counting tau >= bins - 1 (the
    last record of ``result.metrics["staleness"]``)."""
    if "staleness" not in result.metrics:
        raise ValueError("the result has no staleness records: it is not a run of the "
                         "fa.timing.Buffered schedule (fa.timing.simulate_async)")
    return result.metrics["staleness"][:, -1]


def staleness_distribution(result: SimResult) -> np.ndarray:
    """The share of a :class:`Buffered` run's delivered updates with each staleness, pooled
    over its trials."""
    counts = staleness(result).sum(axis=0).astype(np.float64)
    return counts / counts.sum()


def plot_staleness(result: SimResult, ax=None, **bar_kwargs):
    """A :class:`Buffered` run's staleness distribution as bars; returns the Axes."""
    share = staleness_distribution(result)
    if ax is None:
        import matplotlib.pyplot as plt

        ax = plt.gca()
    ax.bar(np.arange(share.size), share, **bar_kwargs)
    ax.set_xlabel(f"staleness tau (last bar: tau >= {share.size - 1})")
    ax.set_ylabel("share of updates")
    return ax


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
                   staleness_bins: Optional[int] = None, progress=False,
                   pad_trials: bool = True) -> SimResult:
    """Asynchronous training (FedAsync, FedBuff) of ``trials`` trials on a simulated clock:
    ``fa.simulate(problem, schedule=Buffered(rule, clock, concurrency, staleness_bins),
    rounds=steps, record_x=False, ...)``.

    Args:
      problem, rule, clock, concurrency, staleness_bins: the problem and the
        :class:`Buffered` schedule's settings.
      local_steps: Q, each client's local steps.
      stepsize: the clients' local stepsize: a number, T values or a schedule u -> alpha_u
        of the server version u a client starts from.
      steps: T, server steps.
      trials, key, x0, oracle, algorithm, record_every, dtype, metrics, generator, progress,
        pad_trials: as :func:`fedjax_abc.simulate` (the algorithm's clients keep no state and
        send their local model: FedAvg's local SGD by default, FedProx's proximal steps).
        A few trials cost as many as their padding to 8 a device: ``pad_trials=False`` runs
        exactly those asked for (one trial about 3 times faster), whose last bits may then
        depend on their number.

    Returns:
      A :class:`~fedjax_abc.SimResult` whose ``rounds`` are server steps u = 0, k, 2k, ...,
      T, with the metrics ``time`` (the simulated time of each recorded step:
      ``result.plot(x="time")``, ``result.on_time_grid(...)``) and ``staleness`` (the
      delivered updates counted by staleness so far, a column a bin: :func:`staleness`,
      :func:`staleness_distribution`).

    Example:
      >>> import jax, jax.numpy as jnp, fedjax_abc as fa
      >>> p = fa.problems.quadratics(jax.random.key(0), n=20, d=2)
      >>> out = fa.timing.simulate_async(
      ...     p, fa.timing.FedBuff(buffer=2), fa.timing.Clock(fa.timing.Exponential(1.0)),
      ...     concurrency=4, local_steps=2, stepsize=0.1, steps=30, trials=3,
      ...     key=jax.random.key(1), x0=jnp.ones(2))
      >>> out.gap.shape, fa.timing.staleness(out).shape
      ((3, 31), (3, 17))
    """
    schedule = Buffered(rule, clock, concurrency, staleness_bins)
    if isinstance(trials, int) and not isinstance(trials, bool) and trials >= 1:
        d = problem.dim
        _check_memory(trials, schedule.concurrency, problem.num_clients, d,
                      8 if dtype == "float64" else 4)
    return simulate(problem, local_steps=local_steps, stepsize=stepsize, rounds=steps,
                    trials=trials, key=key, x0=x0, oracle=oracle, algorithm=algorithm,
                    record_every=record_every, dtype=dtype, metrics=metrics,
                    generator=generator, progress=progress, record_x=False, schedule=schedule,
                    pad_trials=pad_trials)
