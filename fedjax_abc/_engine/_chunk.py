"""The chunk runner that ``simulate`` and ``sweep`` share: one chunk of trials, segment by segment.

A chunk's work is the same whether it belongs to one run or to a group of grid points of
one shape: the trials' start at t = 0, then the plan's segments, each a compiled program
over blocks of rounds, the records of each copied to the host once, progress after each
and (for one run) a checkpoint's position. What differs is the program a segment calls and
the axes before the trials: :class:`OneRun` calls the run's compiled segment; :class:`Grid`
calls it ``vmap``-ped over a leading axis of G grid points whose differing array leaves are
stacked (:func:`stack`). :func:`run_chunk` is written once for both.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Callable, NamedTuple, Optional, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from fedjax_abc._engine import _checkpoint
from fedjax_abc._engine._checkpoint import Position
from fedjax_abc._engine._jit import flat_jit
from fedjax_abc._engine._metrics import record_trials as _record_trials
from fedjax_abc._engine._plan import Plan, Segment
from fedjax_abc._engine._round import Parts, Program
from fedjax_abc._engine._run import Call, CheckedRun
from fedjax_abc._engine._threefry import fold_in_data
from fedjax_abc._problems._host import method

__all__ = ["AbstractChunk", "Grid", "OneRun", "Program", "run_chunk", "stack"]


def _start_state(parts: Parts, program: Program, x0, trial_keys, alpha):
    """The state at t = 0 of trials started at x0 (R, d) with key data (2, R) (the
    schedule's start given the stepsize ``alpha``), and their records at t = 0 (the
    transform's statistics, zero, after the metrics)."""
    state = parts.schedule.init(parts, program, x0, trial_keys, alpha)
    return state, _records(parts, program, x0, state)


def _records(parts: Parts, program: Program, x, state) -> tuple:
    """A record of the trials: (gap, grad_norm_sq, *metrics) of the schedule's models x
    (R, d), the schedule's :meth:`~AbstractSchedule.records` of ``state``, and with
    ``program.record_clients`` every client's own model and loss; x_t, where recorded, is
    the caller's to append."""
    schedule = parts.schedule
    values = _record_trials(parts.problem, parts.metrics, x, program.groups) + \
        schedule.records(parts, program, state)
    if not program.record_clients:
        return values
    return values + schedule.clients(parts, program, state)


def _segment(parts: Parts, program: Program, state, trial_ids, key, t0, stepsizes):
    """Rounds t0 .. t0 + s*b - 1 of every trial in s blocks of b rounds; a record per block.

    state: the trials' RoundState (leaves with a trials axis of m); trial_ids: (m,);
    stepsizes: (s, b). Returns the state at the end and the records (gap, grad_norm_sq,
    *metrics, *transform statistics[, x]) of shape (m, s[, d]). Only blocks
    b * (i + 1) = k (i + 1) rounds after t = 0 (k = per_record * b, t0 a multiple of b)
    evaluate f and grad f; the records of the other blocks are zeros, for the caller to drop.
    """
    b = stepsizes.shape[1]
    per_record = program.per_record
    trial_keys = fold_in_data(jax.random.key_data(key), trial_ids)  # (2, m): fold_in(key, r)

    def block(state_t, inputs):
        j, alphas = inputs
        state_next = parts.schedule.advance(parts, program, state_t, trial_keys, t0 + j * b,
                                            alphas)
        x_next = parts.schedule.model(state_next)

        def record(x):
            return _records(parts, program, x, state_next)

        if per_record == 1:
            values = record(x_next)
        else:  # every trial's f(x) costs a pass over all n clients: only where it is kept
            kept = (t0 // b + j) % per_record == per_record - 1
            values = jax.lax.cond(kept, record, lambda x: jax.tree_util.tree_map(
                jnp.zeros_like, jax.eval_shape(record, x)), x_next)
        return state_next, values + (x_next,) if program.record_x else values

    steps = jnp.arange(stepsizes.shape[0], dtype=jnp.int32)
    state, records = jax.lax.scan(block, state, (steps, stepsizes))
    return state, tuple(jnp.moveaxis(r, 0, 1) for r in records)


def _first_segment(parts: Parts, program: Program, x0, ints, alpha, stepsizes, per_call,
                   sharding):
    """:func:`_start_state` and the first :func:`_segment` of a chunk as one program: ``(state,
    records at t = 0 (x_0 too where record_x), the segment's records)``.

    A named optimisation of a chunk of one segment (a short run), which takes a tenth to a
    fifth off a call of 1-10 trials (``docs/performance.md``): one program instead of
    two, and three small host arrays passed (x_0, ``ints``, the stepsizes) where the two
    programs take five (the trials' ids and x_0, the key, t0, the stepsizes). ``ints`` =
    (the key's two words, the chunk's first trial id) as uint32; ``x0`` is either one
    starting point (d,), shared by every trial, or the chunk's (per_call, d), sharded. The
    ids and the broadcast x_0 are made on the devices, laid out as ``sharding``; the same
    numbers as the two programs.
    """
    ids = ints[2].astype(jnp.int32) + jnp.arange(per_call, dtype=jnp.int32)
    x_c = jnp.broadcast_to(x0, (per_call,) + x0.shape) if x0.ndim == 1 else x0
    if program.groups > 1:
        ids, x_c = jax.lax.with_sharding_constraint((ids, x_c), sharding)
    # seen through, a broadcast x_0 lets XLA reorder the sums of the records at t = 0
    x_c = jax.lax.optimization_barrier(x_c)
    key = jax.random.wrap_key_data(ints[:2], impl="threefry2x32")
    state, first = _start_state(parts, program, x_c, fold_in_data(ints[:2], ids), alpha)
    state, records = _segment(parts, program, state, ids, key, 0, stepsizes)
    return state, first + ((x_c,) if program.record_x else ()), records


def _grid_start(axes: Parts, parts: Parts, program: Program, x0, trial_keys, alpha):
    """:func:`_start_state` of G grid points: ``vmap`` over the leading axis of the leaves
    ``axes`` marks (0), of x0 (G, m, d) and of the start's stepsizes (G,); equinox's
    ``filter_vmap`` passes the static leaves (functions, Q) through."""
    return eqx.filter_vmap(lambda p, x, a: _start_state(p, program, x, trial_keys, a),
                           in_axes=(axes, 0, 0))(parts, x0, alpha)


def _grid_segment(axes: Parts, parts: Parts, program: Program, state, trial_ids, key, t0,
                  stepsizes):
    """:func:`_segment` of G grid points: ``vmap`` over the leading grid axis of the marked
    leaves, the states and the stepsizes (the trials' axis inside)."""
    def one(p, state, stepsizes):
        return _segment(p, program, state, trial_ids, key, t0, stepsizes)

    return eqx.filter_vmap(one, in_axes=(axes, 0, 0))(parts, state, stepsizes)


# the engine's compiled programs: each under the one jit wrapper (flat_jit)
_run_start = flat_jit(_start_state)
_run_segment = flat_jit(_segment)
_run_first = flat_jit(_first_segment)
_run_grid_start = flat_jit(_grid_start)
_run_grid_segment = flat_jit(_grid_segment)


def stack(trees: list):
    """One pytree with the leaves that differ between ``trees`` stacked on a leading axis,
    and the ``in_axes`` tree saying which (0) and which are shared (None)."""
    flat = [jax.tree_util.tree_flatten(t) for t in trees]
    treedef = flat[0][1]
    leaves, axes = [], []
    for column in zip(*(f[0] for f in flat)):
        first = column[0]
        if isinstance(first, (jax.Array, np.ndarray)) and any(
                not np.array_equal(np.asarray(first), np.asarray(a)) for a in column[1:]):
            leaves.append(jnp.stack([jnp.asarray(a) for a in column]))
            axes.append(0)
        else:
            leaves.append(first)
            axes.append(None)
    return treedef.unflatten(leaves), treedef.unflatten(axes)


def _put(values: Sequence[np.ndarray], dtypes: Sequence, sharding) -> list:
    """Host arrays onto the trials' sharding (one, or one per array), cast on the host and
    copied in one call (over other processes' devices too, from the same values in every
    process)."""
    return jax.device_put([np.asarray(v).astype(t) for v, t in zip(values, dtypes)], sharding)


def _host(arrays: Sequence[jax.Array]) -> list:
    """Device arrays on the host, their copies started together; gathered from every
    process where one spans several."""
    if all(a.is_fully_addressable for a in arrays):
        return jax.device_get(list(arrays))
    from jax.experimental import multihost_utils
    return [np.asarray(multihost_utils.process_allgather(a, tiled=True)) for a in arrays]


def _chunk_rows(call: Call, plan: Plan, start: int) -> np.ndarray:
    """x_0 of the chunk's trials from ``start``, padded to ``plan.per_call`` with its first."""
    m = min(call.chunk, call.trials - start)
    x_c = np.zeros((plan.per_call, call.x0.shape[1]))
    x_c[:m] = call.x0[start:start + m]
    x_c[m:] = call.x0[start]
    return x_c


class AbstractChunk(abc.ABC):
    """What a chunk runs: the points (one run, or a grid group) and their compiled programs.

    Arrays of one chunk have ``points`` leading axes before the trials' (none for one run,
    one of G for a grid group); the settings common to every point are ``run``'s.
    """

    run: CheckedRun
    lead: int  # axes before the trials' axis in states and records: 0 or 1

    @property
    @abc.abstractmethod
    def points(self) -> int:
        """How many runs the chunk advances at once (counted in the progress)."""

    @abc.abstractmethod
    def rows(self, plan: Plan, start: int) -> np.ndarray:
        """x_0 of the chunk from trial ``start``: (lead axes, per_call, d) on the host."""

    @abc.abstractmethod
    def stepsizes(self, seg: Segment) -> np.ndarray:
        """The segment's stepsizes: (lead axes, blocks, block) in the run's dtype."""

    @abc.abstractmethod
    def start(self, plan: Plan, x_c: jax.Array, ids: jax.Array):
        """The state at t = 0 and the records at t = 0 of trials ``ids`` started at ``x_c``."""

    @abc.abstractmethod
    def segment(self, plan: Plan, seg: Segment, state, ids: jax.Array, stepsizes):
        """``(state, records)`` after the segment's rounds."""

    def first_segment(self, plan: Plan, seg: Segment, start: int, stepsizes):
        """The start and the only segment of a chunk as one program (:func:`_first_segment`):
        ``(state, records at t = 0, the segment's records)``; None where the chunk has none."""
        return None


@dataclasses.dataclass(frozen=True)
class OneRun(AbstractChunk):
    """The chunks of one run (``simulate``, ``Simulation.run``)."""

    run: CheckedRun
    lead: int = 0

    @property
    def points(self) -> int:
        return 1

    def rows(self, plan, start):
        return _chunk_rows(self.run.call, plan, start)

    def stepsizes(self, seg):
        return self.run.step_alphas[seg.start: seg.stop].reshape(seg.blocks, seg.block).astype(
            self.run.dtype)

    def start(self, plan, x_c, ids):
        r = self.run
        return _run_start(r.parts(), _program((r,), plan, 1), x_c,
                          fold_in_data(jax.random.key_data(r.call.key), ids), _start_alpha(r))

    def segment(self, plan, seg, state, ids, stepsizes):
        r = self.run
        return _run_segment(r.parts(), _program((r,), plan, seg.per_record), state, ids,
                            r.call.key, np.int32(seg.start), stepsizes)

    def first_segment(self, plan, seg, start, stepsizes):
        r, call = self.run, self.run.call
        if call.x0.strides[0] == 0:  # one x0 broadcast to every trial (check_call makes it so)
            x0 = call.x0[0].astype(r.dtype)
        else:
            x0 = _put([_chunk_rows(call, plan, start)], [r.dtype], plan.sharding)[0]
        return _run_first(r.parts(), _program((r,), plan, seg.per_record), x0,
                          np.array(call.key_words + (call.first_trial + start,), np.uint32),
                          _start_alpha(r), stepsizes, plan.per_call,
                          plan.sharding)


@dataclasses.dataclass(frozen=True)
class Grid(AbstractChunk):
    """The chunks of G grid points of one shape: the differing array leaves of their
    components stacked (:func:`stack`), the run's segment ``vmap``-ped over them."""

    runs: tuple
    stacked: Parts  # the parts of every point, their differing leaves stacked
    axes: Parts     # the in_axes tree of ``stacked``: 0 where the leaf has the grid axis
    lead: int = 1

    @property
    def run(self) -> CheckedRun:
        return self.runs[0]

    @property
    def points(self) -> int:
        return len(self.runs)

    def rows(self, plan, start):
        return np.stack([_chunk_rows(r.call, plan, start) for r in self.runs])

    def stepsizes(self, seg):
        return np.stack([r.step_alphas[seg.start: seg.stop].reshape(seg.blocks, seg.block)
                         for r in self.runs]).astype(self.run.dtype)

    def start(self, plan, x_c, ids):
        return _run_grid_start(self.axes, self.stacked, _program(self.runs, plan, 1), x_c,
                               fold_in_data(jax.random.key_data(self.run.call.key), ids),
                               np.asarray([r.start_alpha for r in self.runs], self.run.dtype))

    def segment(self, plan, seg, state, ids, stepsizes):
        r = self.run
        return _run_grid_segment(self.axes, self.stacked,
                                 _program(self.runs, plan, seg.per_record),
                                 state, ids, r.call.key, jnp.asarray(seg.start, jnp.int32),
                                 jnp.asarray(stepsizes))


def _start_alpha(run: CheckedRun):
    """The stepsize a run's schedule starts with, as the compiled start takes it: None for a
    schedule that keeps the default ``stepsizes`` (its start reads none: no array to pass
    each call)."""
    return None if run.call.start_alpha is None else np.asarray(run.call.start_alpha, run.dtype)


def _program(runs: tuple, plan: Plan, per_record: int) -> Program:
    """The :class:`Program` of a segment of ``runs`` (one, or a grid's points) under
    ``plan``: the capacity is the largest of theirs (None if any has none)."""
    spec = runs[0].spec
    capacities = [r.call.capacity for r in runs]
    capacity = None if None in capacities else max(capacities)
    return Program(spec.execution.mode, spec.record.x, per_record, spec.execution.generator, plan.client_block,
                   plan.groups, capacity, spec.record.clients)


def _rows_sharding(sharding, lead: int):
    """The trials' sharding of arrays with ``lead`` axes before the trials'."""
    if lead and isinstance(sharding, NamedSharding):
        return NamedSharding(sharding.mesh, PartitionSpec(*((None,) * lead), "trials"))
    return sharding


def run_chunk(chunk: AbstractChunk, plan: Plan, c: int, progress, done_before: int = 0,
              resume: Optional[Position] = None,
              commit: Optional[Callable[[Position], None]] = None) -> dict:
    """Chunk c: trials c * chunk ... (padded to plan.per_call), segment by segment.

    ``progress(rounds_done)`` is told after each segment (rounds of every point,
    ``done_before`` counted before this chunk); ``resume``: a saved
    position inside chunk c to continue from; ``commit(position)`` is called after every
    segment (with ``done`` left for the caller to fill). Returns the chunk's kept records,
    x_final too, with the chunk's lead axes before the trials'.
    """
    run, lead, G = chunk.run, chunk.lead, chunk.points
    run_model = method(run.components.schedule, "model")
    call = run.call
    start = c * call.chunk
    m = min(call.chunk, call.trials - start)
    names = run.record_names
    segments = plan.segments()
    time_axis = lead + 1
    records, next_segment = {}, 0  # records filled from the first segment's copy (t = 0 too)
    whole = None  # a chunk of one segment: its start and segment as one program, where it has one
    if len(segments) == 1 and (resume is None or resume.state is None):
        whole = chunk.first_segment(plan, segments[0], start, chunk.stepsizes(segments[0]))
    if whole is None:
        ids, x_c = _put([np.arange(call.first_trial + start,
                                   call.first_trial + start + plan.per_call),
                         chunk.rows(plan, start)], [np.int32, run.dtype],
                        [plan.sharding, _rows_sharding(plan.sharding, lead)])
        state, first = chunk.start(plan, x_c, ids)
        first = list(first) + ([x_c] if run.spec.record.x else [])
        if resume is not None and resume.state is not None:
            state, first = _checkpoint.restored(state, resume.state), []
            records, next_segment = dict(resume.records), resume.segment
    x_final = None
    for i in range(next_segment, len(segments)):
        seg = segments[i]
        if whole is not None:  # the chunk's only segment, run already
            state, first, rec = whole
            first = list(first)
        else:
            state, rec = chunk.segment(plan, seg, state, ids, chunk.stepsizes(seg))
        # one copy to the host per segment: the records at t = 0 with the first segment's,
        # the final iterates with the last's
        last = i == len(segments) - 1
        got = _host(first + list(rec) + ([run_model(state)] if last else []))
        # the device's copies go now: the host holds a segment's records once, not twice,
        # while they are joined (the memory check counts the records twice, see _memory)
        rec = whole = None
        if first:
            records = {name: (np.expand_dims(r, time_axis),) for name, r in zip(names, got)}
            got = got[len(first):]
            first = []
        if last:
            x_final = got.pop()
        records = {name: records[name] + (r[(slice(None),) * time_axis + (seg.keep,)],)
                   for name, r in zip(names, got)}  # the kept blocks along the time axis
        if commit is not None:
            commit(Position(c, i + 1, state, records, None))
        progress(done_before + G * (c * run.spec.rounds + seg.stop))
    trials = (slice(None),) * lead + (slice(0, m),)
    out = {name: np.concatenate(parts, axis=time_axis)[trials]
           for name, parts in records.items()}
    out["x_final"] = (_host([run_model(state)])[0] if x_final is None else x_final)[trials]
    return out
