"""One round of a federated algorithm for a batch of trials, and a scan over rounds.

- :func:`batched_round`: one round of R trials of an algorithm (Algorithm 1 by default). In
  ``mask`` mode every client runs its virtual local trajectory x~_{i,t} (Section II-A), a
  ``vmap`` over all n; in ``gather`` mode only the sampled ones run. The server updates
  from the weighted mean of the sampled clients' messages (Algorithm 1, line 13: their
  average). The trials are the innermost ``vmap`` (see its docstring for why).
- :func:`fedavg_round`: one round of one trial of Algorithm 1.
- :func:`run_rounds`: rounds t0, ..., t0 + K - 1 of a batch of trials, a ``lax.scan``.

The randomness comes from :mod:`fedjax_abc._engine._random`: ``mask`` and ``gather`` make
the same draws, so their results agree bit for bit on the paper's problems (where XLA
orders a few floating-point operations differently in the two programs, to rounding).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional, Union

import jax
import jax.numpy as jnp
from jaxtyping import Array

from fedjax_abc._algorithms._base import AbstractAlgorithm, LocalInfo, LocalObjective, RoundInfo
from fedjax_abc._algorithms._fedavg import FedAvg
from fedjax_abc._algorithms._transforms import AbstractTransform, TransformInfo
from fedjax_abc._engine._aggregate import Aggregation, aggregate, members, needs_messages
from fedjax_abc._engine._components import (check_message, check_same, check_server,
                                            check_stats)
from fedjax_abc._engine._random import (SAMPLER_STREAM, STEPS_STREAM, TRANSFORM_STREAM,
                                        client_words, round_keys, stream_words)
from fedjax_abc._problems._local_work import AbstractLocalSteps
from fedjax_abc._problems._oracles import AbstractOracle
from fedjax_abc._problems._problem import Problem
from fedjax_abc._problems._samplers import AbstractSampler, SlotChunks
from fedjax_abc._robust._aggregators import AbstractAggregator, WeightedMean
from fedjax_abc._robust._byzantine import Byzantine

__all__ = ["Parts", "Program", "RoundState", "batched_round", "client_round", "fedavg_round",
           "init_state", "objective", "ordered_sum", "run_rounds", "steps_of", "transform_stats"]

MODES = ("mask", "gather")


class Parts(NamedTuple):
    """A run's components as its compiled program reads them: their array leaves are the
    program's data (a sweep stacks those that differ between its points), the rest is static.
    ``problem`` is the simulator's copy (see ``_run._run_problem``); ``local_steps`` Q or a
    law; ``metrics`` the user's metric functions; ``aggregator`` the server's rule,
    ``byzantine`` the Byzantine clients (or None), ``schedule`` how the run's steps go (the
    driver's; a round does not read it)."""

    problem: Problem
    oracle: AbstractOracle
    sampler: AbstractSampler
    algorithm: AbstractAlgorithm
    transform: Optional[AbstractTransform]
    local_steps: Union[int, AbstractLocalSteps]
    metrics: tuple = ()
    aggregator: AbstractAggregator = WeightedMean()
    byzantine: Optional[Byzantine] = None
    schedule: Any = None  # the run's AbstractSchedule (``_schedule``); None inside a round


class Program(NamedTuple):
    """What a compiled segment does besides its arrays' shapes (static: a new value is a new
    program): the mode, whether x_t is recorded, the blocks between records, the words'
    hash, the client block (None: all clients at once, see :func:`_over_clients`), the
    devices the trials are sharded over, the sampler's capacity (:func:`batched_round`)
    and whether every client's own model and loss are recorded."""

    mode: str
    record_x: bool = False
    per_record: int = 1
    generator: str = "threefry"
    client_block: Optional[int] = None
    groups: int = 1
    capacity: Optional[int] = None
    record_clients: bool = False


class RoundState(NamedTuple):
    """The state a batch of R trials carries from round to round.

    Attributes:
      server: the algorithm's server state, every leaf with leading axis R (trials).
      clients: every client's state, leaves with leading axes (n, R); ``()`` when stateless.
      sampler: the sampler's state, leaves with leading axis R; ``()`` when stateless.
      transform: every client's message-transform state, leaves (n, R, ...); ``()`` when
        there is none or it is stateless.
      totals: the transform's statistics summed over participants and rounds so far, a dict
        of name -> (R,); empty without a transform.
      transform_server: the transform's server state, leaves with leading axis R; ``()``
        when there is none.
    """

    server: Any
    clients: Any
    sampler: Any = ()
    transform: Any = ()
    totals: Any = ()
    transform_server: Any = ()


def _per_client(fn, x0: Array, num_clients: int):
    """``fn(x)`` for every client of R trials started at x0 (R, d): leaves (n, R, ...).

    A state without leaves keeps its structure (a chain of stateless transforms: a tuple
    of ``()``), so that ``apply`` receives the state it gave."""
    shape = jax.eval_shape(fn, x0[0])
    if not jax.tree_util.tree_leaves(shape):
        return shape
    return jax.vmap(jax.vmap(fn), in_axes=(None,), axis_size=num_clients)(x0)


def transform_stats(transform, d: int, dtype) -> tuple:
    """The names of a transform's statistics, sorted (``()`` without a transform)."""
    if transform is None:
        return ()
    x = jax.ShapeDtypeStruct((d,), dtype)
    words = jax.ShapeDtypeStruct((transform.num_words(d),), jnp.uint32)
    state = jax.eval_shape(transform.init, x)
    server = jax.eval_shape(transform.server_init, x)
    _, _, stats = jax.eval_shape(lambda w, v, s, m, srv: transform.apply(
        w, v, s, TransformInfo(m, 1, srv)), words, x, state, jax.ShapeDtypeStruct((), dtype),
        server)
    return tuple(sorted(stats))


def init_state(algorithm, x0: Array, num_clients: int, sampler=None,
               transform=None) -> RoundState:
    """The state at t = 0 of R trials started at x0, shape (R, d)."""
    server = jax.vmap(algorithm.init)(x0)
    check_server(type(algorithm).__name__, server, x0.shape[1], x0.dtype, lead=1)
    clients = _per_client(algorithm.init_client, x0, num_clients)
    R = x0.shape[0]
    sampler_state = ()
    if sampler is not None and jax.tree_util.tree_leaves(
            jax.eval_shape(lambda: sampler.init_state(num_clients))):
        one = sampler.init_state(num_clients)
        sampler_state = jax.tree_util.tree_map(
            lambda a: jnp.broadcast_to(a, (R,) + jnp.shape(a)), one)
    tstate, totals, tserver = (), (), ()
    if transform is not None:
        tstate = _per_client(transform.init, x0, num_clients)
        # the running totals in float64 where enabled (bit counts stay exact to 2^53 also
        # in float32 runs), else float32
        totals = {name: jnp.zeros((R,), jnp.result_type(float))
                  for name in transform_stats(transform, x0.shape[1], x0.dtype)}
        if jax.tree_util.tree_leaves(jax.eval_shape(transform.server_init, x0[0])):
            tserver = jax.vmap(transform.server_init)(x0)
    return RoundState(server, clients, sampler_state, tstate, totals, tserver)


def fedavg_round(problem, oracle, sampler, x: Array, t, stepsize, trial_key: Array, *,
                 local_steps=1, mode: str = "mask", algorithm=None,
                 generator: str = "threefry") -> Array:
    """One round of Algorithm 1 (or an ``algorithm`` without client states) for one trial.

    Args:
      problem, oracle, sampler: the problem, its oracle and the client sampler; a sampler
        with state gives its first round (from its initial state), so t must be 0 then.
      x: x_t, shape (d,).
      t: round index (may be traced).
      stepsize: alpha_t.
      trial_key: the trial's key.
      local_steps: Q (an int), or a :class:`~fedjax_abc.AbstractLocalSteps`.
      mode: "mask" (all n virtual trajectories) or "gather" (only the sampled clients).
      algorithm: default :class:`~fedjax_abc.algorithms.FedAvg` (Algorithm 1).
      generator: the random words' hash, "threefry" or "splitmix" (see ``_random``).

    Returns:
      x_{t+1} = sum_j w_j x^Q_{idx_j,t} / sum_j w_j over the sampler's slots; x_t if the
      round has no participant.
    """
    algorithm = FedAvg() if algorithm is None else algorithm
    if not sampler.normalised() and not algorithm.reads_scale:
        raise ValueError(f"{type(algorithm).__name__} does not apply RoundInfo.scale: it "
                         f"cannot combine the unbiased weights of {type(sampler).__name__}")
    stateful = jax.tree_util.tree_leaves(
        jax.eval_shape(lambda: sampler.init_state(problem.num_clients)))
    if stateful and not isinstance(t, jax.core.Tracer) and int(t) != 0:
        raise ValueError(f"fedavg_round gives {type(sampler).__name__}'s first round only (it "
                         f"carries state from round to round): t must be 0, got {int(t)}; "
                         "simulate runs later rounds")
    if mode not in MODES:
        raise ValueError(f"mode ({mode!r}) must be one of {MODES}")
    k_t = round_keys(jax.random.key_data(trial_key), t, generator)
    state = init_state(algorithm, x[None], problem.num_clients)
    parts = Parts(problem, oracle, sampler, algorithm, None, local_steps)
    program = Program(mode, generator=generator, capacity=sampler.capacity(problem.num_clients))
    return batched_round(parts, program, state, k_t[:, None], stepsize).server.x[0]


# Per-trial gathers and scatters along the client axis, written as a vmap over the trials
# (axis 1): XLA's partitioner then sees the trial axis as a batch axis and keeps each
# device's trials on that device. Indexed as a[idx, arange(R)] instead, the arrays of all
# devices would be gathered to every device at each round.
_take = jax.vmap(lambda a, i: a[i], in_axes=(1, 1), out_axes=1)
_put = jax.vmap(lambda a, i, v: a.at[i].set(v), in_axes=(1, 1, 1), out_axes=1)
_add = jax.vmap(lambda a, i, v: a.at[i].add(v), in_axes=(1, 1, 1), out_axes=1)


def _at_slots(tree, idx: Array):
    """Leaves (n, R, ...) -> the sampled slots' (m, R, ...), slot j of trial r at idx[j, r]."""
    return jax.tree_util.tree_map(lambda a: _take(a, idx), tree)


def _weighted(messages, w: Array):
    """w_j m_j for every slot j of every leaf (m, R, ...)."""
    return jax.tree_util.tree_map(
        lambda a: w.reshape(w.shape + (1,) * (a.ndim - 2)).astype(a.dtype) * a, messages)


def _divided(sums, total: Array):
    """Every leaf (R, ...) of ``sums`` over the trials' total weights (R,) (1 where 0)."""
    safe = jnp.where(total > 0, total, 1)
    return jax.tree_util.tree_map(
        lambda a: a / safe.reshape(safe.shape + (1,) * (a.ndim - 1)).astype(a.dtype), sums)


def _contributions(messages, stats: dict, w: Array, totals: dict):
    """What every slot adds to the round's sums: (w_j m_j, w_j, the statistics of the slots
    with a positive weight, the same cast to the running totals' dtype)."""
    kept = {name: jnp.where(w > 0, value, 0) for name, value in stats.items()}
    return (_weighted(messages, w), w, kept,
            {name: kept[name].astype(totals[name].dtype) for name in totals})


def _compact(idx: Array, w: Array) -> tuple[Array, Array]:
    """The slots (m, R) reordered in every trial: those with a nonzero weight first, in slot
    order, then the rest (a permutation of each trial's slots)."""
    take = w != 0
    first = jnp.cumsum(take, axis=0, dtype=jnp.int32) - 1
    rest = first[-1:] + jnp.cumsum(~take, axis=0, dtype=jnp.int32)
    order = _put(jnp.zeros_like(first), jnp.where(take, first, rest),
                 jnp.broadcast_to(jnp.arange(idx.shape[0], dtype=jnp.int32)[:, None],
                                  idx.shape))
    return _take(idx, order), _take(w, order)


def _chunk(idx: Array, w: Array, capacity: int, k):
    """Chunk k of compacted slots (m, R): slots k C, ..., k C + C - 1 (C = capacity); the
    last chunk ends at m, its slots of chunk k - 1 weightless (counted there)."""
    start = jnp.minimum(k * capacity, idx.shape[0] - capacity)
    fresh = (start + jnp.arange(capacity)) >= k * capacity
    return (jax.lax.dynamic_slice_in_dim(idx, start, capacity, 0),
            jnp.where(fresh[:, None], jax.lax.dynamic_slice_in_dim(w, start, capacity, 0), 0))


def _fold(total: Array, a: Array) -> Array:
    """total + the slots of a (C, R, ...) added one by one (pairwise sums beyond 64 slots,
    as :func:`ordered_sum`): with the participants first, the same sum in every program that
    adds them in this order, however many chunks they took."""
    if a.shape[0] > 64:
        return total + ordered_sum(a)
    for j in range(a.shape[0]):
        total = total + a[j]
    return total


def _chunked(idx: Array, w: Array, capacity: int) -> SlotChunks:
    """The slots (m, R) compacted (:func:`_compact`) as chunks of ``capacity``
    (:func:`_chunk`), for a sampler that does not draw its own (``slot_chunks`` None)."""
    idx, w = _compact(idx, w)
    count = jnp.sum(w != 0, axis=0, dtype=jnp.int32)
    return SlotChunks(count, count, _chunk(idx, w, capacity, 0),
                      lambda k: _chunk(idx, w, capacity, k))


def _slot_sums(chunk_fn, slots, carry):
    """The round's sums over its slots: ``chunk_fn(idx_c, w_c, carry)`` gives the
    contributions of some slots (leaves (c, R, ...)) and the next carry. Returns (their sums,
    carry). ``slots``: (idx, w), all m slots (m, R) at once, summed by :func:`ordered_sum`;
    or :class:`SlotChunks`, the participants first, taken a chunk at a time until every
    trial's participants are in (chunk 0 always)."""
    if not isinstance(slots, SlotChunks):
        contributions, carry = chunk_fn(*slots, carry)
        return jax.tree_util.tree_map(ordered_sum, contributions), carry
    capacity = slots.first[0].shape[0]
    needed = jnp.max(slots.span)  # the most slots of any trial
    contributions, carry = chunk_fn(*slots.first, carry)
    sums = jax.tree_util.tree_map(lambda a: _fold(jnp.zeros(a.shape[1:], a.dtype), a),
                                  contributions)

    def more(state):
        return state[0] * capacity < needed

    def chunk(state):
        k, sums, carry = state
        contributions, carry = chunk_fn(*slots.chunk(k), carry)
        return k + 1, jax.tree_util.tree_map(_fold, sums, contributions), carry

    _, sums, carry = jax.lax.while_loop(more, chunk, (jnp.ones((), jnp.int32), sums, carry))
    return sums, carry


def _keep_where(take: Array, new, old):
    """Leaves of ``new`` where ``take`` (leading axes of take), else those of ``old``."""
    return jax.tree_util.tree_map(
        lambda a, b: jnp.where(take.reshape(take.shape + (1,) * (a.ndim - take.ndim)), a, b),
        new, old)


def _over_clients(fn, args, block: Optional[int]):
    """``vmap(fn)`` over the leading (client or slot) axis of ``args``.

    With ``block`` smaller than that axis, ``block`` clients at a time, one block after the
    next (``lax.map``): their local models of all trials then stay in cache through the Q
    local steps, where a ``vmap`` over every client streams them all through memory at
    every step. The numbers agree to rounding (XLA may order a client's few products
    differently in the two programs); for a given block they do not depend on the trials.
    """
    size = jax.tree_util.tree_leaves(args)[0].shape[0]
    if block is None or block >= size:
        return jax.vmap(fn)(*args)
    return jax.lax.map(lambda a: fn(*a), args, batch_size=block)


def steps_of(local_steps) -> int:
    """Q, or Q_max of a law of local steps: the length of the local scan."""
    return local_steps if isinstance(local_steps, int) else local_steps.max_steps


def client_round(parts: Parts, generator: str, i, server, client, transform_state, k: Array,
                 stepsize, *, participants=None, transform_server=(), limit=None,
                 origin: bool = False):
    """Client i's round in one trial with round key data k (2,): its local steps, message.

    The engine's part of every algorithm: the oracle's noise of the Q (or Q_max) steps from
    client i's words of stream 1; the local model y^0 = x_t and the algorithm's local state
    through a ``lax.scan`` of ``local_step``; with a law of local steps, K from client i's
    word of stream 2 and the steps after the K-th masked (they leave y and the local state
    as they are); the transform on Delta_i = y - x_t (words of stream 3); then
    ``client_final``. ``participants``: how many clients take part in the round, and
    ``transform_server`` the transform's server state (the transform's
    :class:`TransformInfo`). ``limit``: the most steps the client completes this round
    (the sampler's :meth:`step_limits`; partial work at a deadline), or None. Returns
    (message, client state, transform state, statistics); with ``origin``, the message is
    the pair (message, the message the client would send had its local model stayed at
    x_t), the origin a robust aggregation measures the updates from (``_aggregate``).
    """
    problem, oracle, algorithm = parts.problem, parts.oracle, parts.algorithm
    transform, local_steps = parts.transform, parts.local_steps
    x_t = server.x
    Q = steps_of(local_steps)
    shape = (Q,) + x_t.shape
    W = oracle.num_words(shape)
    words = client_words(k, i[None], W, generator)[0]
    noise = oracle.noise_from_words(words, shape, x_t.dtype)
    data = problem.client(i)
    if isinstance(local_steps, int):
        K = local_steps
    else:
        V = local_steps.num_words()
        who = jnp.zeros_like(i) if local_steps.same_for_all_clients() else i
        word = client_words(k, who[None], V, generator, STEPS_STREAM)[0, 0] if V else None
        K = local_steps.draw(word, i)
    if limit is not None:  # the steps after the limit are masked like a law's
        K = jnp.minimum(K, limit)

    def step(carry, l):
        y, local = carry
        z = oracle.step_noise(noise, l, shape, x_t.dtype)
        new = algorithm.local_step(server, y, local, lambda p: oracle.gradient(problem, data, p, z),
                                   stepsize)
        check_same(f"{type(algorithm).__name__}.local_step", (y, local), new)
        if not isinstance(K, int):  # steps after the K-th leave everything as it is
            new = jax.tree_util.tree_map(lambda a, b: jnp.where(l < K, a, b), new, (y, local))
        return new, None

    local = algorithm.client_init(server, client)
    (y, local), _ = jax.lax.scan(step, (x_t, local), jnp.arange(Q))
    stats = {}
    if transform is not None:
        d = x_t.shape[-1]
        V = transform.num_words(d)
        twords = client_words(k, i[None], V, generator, TRANSFORM_STREAM)[0] if V else \
            jnp.zeros((0,), jnp.uint32)
        tname = type(transform).__name__
        info = TransformInfo(jnp.ones((), x_t.dtype) if participants is None else
                             participants.astype(x_t.dtype), problem.num_clients,
                             transform_server)
        delta, new_tstate, stats = transform.apply(twords, y - x_t, transform_state, info)
        check_same(f"{tname}.apply's update", y, delta)
        check_same(f"{tname}.apply", transform_state, new_tstate)
        check_stats(tname, stats, 0)
        y, transform_state = x_t + delta, new_tstate
    name = type(algorithm).__name__
    info = LocalInfo(K, stepsize, objective(problem, data))
    message, new_client = algorithm.client_final(server, client, y, local, info)
    check_message(name, message, x_t.shape[-1], x_t.dtype, 0)
    check_same(f"{name}.client_final", client, new_client)
    if origin:
        unmoved, _ = algorithm.client_final(server, client, x_t,
                                            algorithm.client_init(server, client), info)
        message = (message, unmoved)
    return message, new_client, transform_state, stats


def objective(problem: Problem, data) -> LocalObjective:
    """Client ``data``'s :class:`LocalObjective`: its index, f_i and exact grad f_i (traced
    only where an algorithm calls them)."""
    return LocalObjective(data.index, lambda z: problem.local_value(data, z),
                          lambda z: problem.local_grad(data, z))


def _step_limits(sampler, state):
    """Every client's most steps this round (R, n), from the sampler's state after its draw
    (:meth:`~fedjax_abc.AbstractSampler.step_limits`); None where the sampler sets none."""
    if not jax.tree_util.tree_leaves(state):
        return None
    if jax.eval_shape(lambda s: sampler.step_limits(jax.tree_util.tree_map(lambda a: a[0], s)),
                      state) is None:
        return None
    return jax.vmap(sampler.step_limits)(state)


def _sample(sampler, sampler_words: Array, n: int, state):
    """The round's slots (m, R) each and the sampler's next state (leaves with axis R)."""
    if not jax.tree_util.tree_leaves(state):
        idx, w = sampler.from_words_batched(sampler_words, n)
        return idx, w, state
    return jax.vmap(sampler.sample, in_axes=(1, None, 0), out_axes=(1, 1, 0))(
        sampler_words, n, state)


def batched_round(parts: Parts, program: Program, state: RoundState, key_data: Array,
                  stepsize, sampler_words: Optional[Array] = None,
                  aggregation: Optional[Aggregation] = None) -> RoundState:
    """One round of R trials: their state and k_t (2, R) -> the state at t + 1.

    The trials are the innermost ``vmap`` and the second axis of every per-client array: a
    client's (or slot's) local models of all trials lie side by side in memory, shape (n or
    m, R, d), its random words too, shape (n or m, R, W), so the hashing and the local steps
    of ``gather`` mode run over long contiguous rows even when m is small. Client states
    (the algorithm's and the transform's) change only for clients with a positive weight
    this round. ``parts``: the components (:class:`Parts`: the local steps Q or a law, the
    message transform or None, ...); ``program``: the mode, the words' hash
    (:data:`~fedjax_abc._engine._random.GENERATORS`), the client block (how many clients
    run their local steps at once, None for all, see :func:`_over_clients`) and the
    sampler's capacity (:meth:`capacity`, a Python int, or None; below the number of slots
    m, each trial's participants go first and the round computes (``gather``) or adds up
    (``mask``) its slots that many at a time, as many times as the trial with the most
    participants needs: the same sums in both modes). ``sampler_words``: the sampler's
    words of the round, (num_words, R), if already hashed from k_t (see
    :func:`run_rounds`); None hashes them here. ``aggregation``: a rule that needs the
    round's messages at once, or Byzantine clients (see
    :mod:`~fedjax_abc._engine._aggregate`); None adds the weighted mean up slot by slot.
    """
    problem, oracle, sampler, algorithm = parts.problem, parts.oracle, parts.sampler, \
        parts.algorithm
    transform, local_steps = parts.transform, parts.local_steps
    mode, generator, client_block, capacity = program.mode, program.generator, \
        program.client_block, program.capacity
    if mode not in MODES:
        raise ValueError(f"mode ({mode!r}) must be one of {MODES}")
    n = problem.num_clients
    if sampler_words is None:
        sampler_words = stream_words(key_data, SAMPLER_STREAM, sampler.num_words(n), generator)
    held = aggregation is not None  # the round's messages held at once, every slot computed
    if held or capacity is not None and capacity >= sampler.num_slots(n):
        capacity = None
    # the slots: (idx, w), (m, R) each, all at once; or with a capacity, chunks of it with
    # the participants first, drawn by the sampler at their cost where it can
    slots = None
    if capacity is not None and not jax.tree_util.tree_leaves(state.sampler):
        slots = sampler.slot_chunks(sampler_words, n, capacity)
    if slots is None:
        idx, w, sampler_state = _sample(sampler, sampler_words, n, state.sampler)
        slots = (idx, w) if capacity is None else _chunked(idx, w, capacity)
    else:
        sampler_state = state.sampler
    server = _received(parts, program, state.server, state.clients, slots)
    x = server.x
    per_client = (state.clients, state.transform)
    if transform is None:
        count = jnp.zeros(x.shape[:1], x.dtype)
    elif isinstance(slots, SlotChunks):
        count = slots.count.astype(x.dtype)
    else:  # (R,): each trial's participants
        count = ordered_sum((slots[1] > 0).astype(x.dtype))
    tserver = state.transform_server
    limits = _step_limits(sampler, sampler_state)  # (R, n) or None

    def local(i, server_r, c, k, m, ts, lim):  # client i of one trial with round key data k
        message, client, tstate, stats = client_round(
            parts, generator, i, server_r, c[0], c[1], k, stepsize, participants=m,
            transform_server=ts, limit=None if lim is None else lim[i], origin=held)
        if held and aggregation.poisoned is not None:  # the same work on the poisoned data
            message = message + (client_round(
                parts._replace(problem=aggregation.poisoned), generator, i, server_r, c[0],
                c[1], k, stepsize, participants=m, transform_server=ts,
                limit=None if lim is None else lim[i])[0],)
        return message, (client, tstate), stats

    totals = state.totals

    def contributions(slot_messages, slot_stats, slot_w):
        if held:  # the weighted sum of the messages themselves
            slot_messages = slot_messages[0]
        return _contributions(slot_messages, slot_stats, slot_w.astype(x.dtype), totals)

    def computed(slot_idx, slot_w, per_client):  # the slots' clients run, their states put
        messages, new_slots, stats = _over_clients(
            lambda i, c: jax.vmap(local, in_axes=(0, 0, 0, 1, 0, 0, 0))(
                i, server, c, key_data, count, tserver, limits),
            (slot_idx, _at_slots(per_client, slot_idx)), client_block)  # (m or C, R, ...)
        if jax.tree_util.tree_leaves(per_client):
            new_slots = _keep_where(slot_w > 0, new_slots, _at_slots(per_client, slot_idx))
            per_client = jax.tree_util.tree_map(lambda c, s: _put(c, slot_idx, s), per_client,
                                                new_slots)
        return messages, stats, per_client

    def gathered(slot_idx, slot_w, per_client):
        messages, stats, per_client = computed(slot_idx, slot_w, per_client)
        return contributions(messages, stats, slot_w), per_client

    slot_messages = None  # (m, R, ...) each, where the round holds them
    if mode == "mask":  # every client, for every trial (the same client data for all trials)
        messages, new_clients, stats = _over_clients(
            lambda i, c: jax.vmap(local, in_axes=(None, 0, 0, 1, 0, 0, 0))(
                i, server, c, key_data, count, tserver, limits),
            (jnp.arange(n, dtype=jnp.int32), per_client), client_block)  # (n, R, ...)
        states = bool(jax.tree_util.tree_leaves(per_client))

        def sampled(i, cw, weight):  # the sampled: (m or C, R, ...); each client's weight
            return (contributions(*_at_slots((messages, stats), i), cw),
                    _add(weight, i, cw) if states else weight)

        weight = jnp.zeros((n, x.shape[0]), jnp.result_type(float)) if states else ()
        sums, weight = _slot_sums(sampled, slots, weight)
        if held:
            slot_messages = _at_slots(messages, idx)
        if states:
            per_client = _keep_where(weight > 0, new_clients, per_client)
    elif held:  # every slot's client, the messages kept side by side
        slot_messages, stats, per_client = computed(idx, w, per_client)
        sums, _ = _slot_sums(lambda i, cw, _: (contributions(slot_messages, stats, cw), ()),
                             (idx, w), ())
    else:  # the sampled clients only (with a capacity, the participants, that many at a time)
        sums, per_client = _slot_sums(gathered, slots, per_client)
    message_sum, total, stat_sums, stat_totals = sums
    if totals:
        totals = {name: totals[name] + stat_totals[name] for name in totals}
    if jax.tree_util.tree_leaves(tserver):  # after a round with participants, from its sums
        new_tserver = jax.vmap(lambda s, sm, m: transform.server_update(
            s, sm, TransformInfo(m, n, s)))(tserver, stat_sums, count)
        check_same(f"{type(transform).__name__}.server_update", tserver, new_tserver)
        tserver = _keep_where(total > 0, new_tserver, tserver)
    if held:
        mean = aggregate(aggregation, slot_messages, idx, w, total, key_data, generator)
    else:
        mean = _divided(message_sum, total)
    normalised = sampler.normalised()
    new_server = jax.vmap(lambda s, m, tw: algorithm.server_update(
        s, m, RoundInfo(tw, n, stepsize, steps_of(local_steps),
                        None if normalised else tw)))(server, mean, total)
    check_same(f"{type(algorithm).__name__}.server_update", server, new_server)
    return RoundState(_keep_where(total > 0, new_server, state.server), per_client[0],
                      sampler_state, per_client[1], totals, tserver)


def _received(parts: Parts, program: Program, server, clients, slots):
    """The server state after the round's first communication (``algorithm.query``): every
    client's query in ``mask`` mode (the sampled ones' are kept), the sampled clients' in
    ``gather`` mode, their weighted mean handed to ``algorithm.receive``. ``server`` as it
    is when the algorithm's ``query`` gives None. ``slots``: as :func:`_slot_sums` takes
    them."""
    problem, algorithm = parts.problem, parts.algorithm
    mode, client_block = program.mode, program.client_block

    def query(i, s, c):
        data = problem.client(i)
        return algorithm.query(s, c, lambda z: problem.local_grad(data, z))

    one_server = jax.tree_util.tree_map(lambda a: a[0], server)  # one trial, one client
    one_client = jax.tree_util.tree_map(lambda a: a[0, 0], clients)
    if jax.eval_shape(query, jnp.zeros((), jnp.int32), one_server, one_client) is None:
        return server
    if mode == "mask":
        queries = _over_clients(lambda i, c: jax.vmap(query, in_axes=(None, 0, 0))(i, server, c),
                                (jnp.arange(problem.num_clients, dtype=jnp.int32), clients),
                                client_block)

        def slot_queries(slot_idx):
            return _at_slots(queries, slot_idx)
    else:
        def slot_queries(slot_idx):
            return _over_clients(lambda i, c: jax.vmap(query)(i, server, c),
                                 (slot_idx, _at_slots(clients, slot_idx)), client_block)

    def contributions(slot_idx, slot_w, carry):
        slot_w = slot_w.astype(server.x.dtype)
        return (_weighted(slot_queries(slot_idx), slot_w), slot_w), carry

    sums, _ = _slot_sums(contributions, slots, ())
    mean = _divided(*sums)
    received = jax.vmap(algorithm.receive)(server, mean)
    check_same(f"{type(algorithm).__name__}.receive", server, received)
    return received


def ordered_sum(a: Array) -> Array:
    """Sum over the leading (slot) axis in an order fixed by the number of slots alone.

    Up to 64 slots they are added one by one in slot order, beyond that pairwise. A
    reduction left to XLA may be ordered differently in ``mask`` and ``gather`` programs,
    which would break their bit-for-bit agreement.
    """
    if a.shape[0] <= 64:
        total = a[0]
        for j in range(1, a.shape[0]):
            total = total + a[j]
        return total
    while a.shape[0] > 1:
        half = a.shape[0] // 2
        a = jnp.concatenate([a[:half] + a[half: 2 * half], a[2 * half:]])
    return a[0]


def run_rounds(parts: Parts, program: Program, state: RoundState, trial_key_data: Array, t0,
               stepsizes: Array) -> RoundState:
    """Rounds t0, ..., t0 + K - 1 of R trials with stepsizes alpha_{t0..t0+K-1}, shape (K,).

    state: the trials' :class:`RoundState`; trial_key_data: (2, R), the key data of each
    trial's key (a column each); parts, program: see :func:`batched_round` (the aggregator,
    None or the weighted mean, and the Byzantine clients: see
    :mod:`~fedjax_abc._engine._aggregate`).
    """
    problem, sampler, generator = parts.problem, parts.sampler, program.generator
    aggregation = None
    if needs_messages(parts.aggregator, parts.byzantine):
        byzantine = parts.byzantine
        mask = None if byzantine is None else members(byzantine, trial_key_data,
                                                      problem.num_clients, generator)
        aggregation = Aggregation(parts.aggregator, byzantine, mask,
                                  None if byzantine is None else byzantine.attack.poisoned(problem))

    def keys(t):
        return round_keys(trial_key_data, t, generator)

    def sampler_words(k):  # the sampler's words of a round from its k_t (2, R): (words, R)
        return stream_words(k, SAMPLER_STREAM, sampler.num_words(problem.num_clients), generator)

    # The random words that several computations read travel in the loop state, hashed
    # from memory one round ahead: k_{t+1}, and the sampler's words of round t + 1 (from
    # k_{t+1} of the state, so that round t hashes k_{t+2}). Computed in place, XLA fuses
    # a hash into every consumer and every element that reads it: k_t into each fusion
    # that uses it, and the sampler's word j into the slots j, ..., m - 1 of Floyd's
    # algorithm, each of which checks the slots before it (m (m + 1) / 2 hashes a trial
    # instead of m). The same words, the same results.
    def body(carry, inputs):
        state_t, k_t, words_t, k_next = carry
        t, alpha = inputs
        state_next = batched_round(parts, program, state_t, k_t, alpha, words_t, aggregation)
        return (state_next, k_next, sampler_words(k_next), keys(t + 2)), None

    ts = t0 + jnp.arange(stepsizes.shape[0], dtype=jnp.int32)
    k_0 = keys(t0)
    (state, *_), _ = jax.lax.scan(body, (state, k_0, sampler_words(k_0), keys(t0 + 1)),
                                  (ts, stepsizes))
    return state
