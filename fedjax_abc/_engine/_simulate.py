"""``simulate``: many independent trials of a federated algorithm as one compiled XLA program.

Layout of the program: ``lax.scan`` over records of [``lax.scan`` over the k rounds between
records of [one round of all trials: ``vmap`` over clients of [``vmap`` over trials of
[``lax.scan`` over Q local steps]]]], under one ``jit``; the trials are the innermost
``vmap`` so that their copies of a client's model lie side by side in memory. On a CPU,
models of 2 KiB or more (a learning problem's) run a block of clients at a time instead
(``_plan.client_block``), so that a block's models stay in cache through the Q steps.
Shapes (n, S, Q, T/k, trials per chunk, mode) are static; the key, x0, the stepsizes, the problem's and
the algorithm's arrays are data, so a new key, stepsize or ``FedProx(mu)`` compiles nothing.

``simulate`` is ``Simulation(...).run(...)``, in four named steps:
:func:`~fedjax_abc._engine._run.build` and :func:`~fedjax_abc._engine._run.check_call` (every
argument validated before anything compiles: the Simulation's components and spec, then the
call's values, together a :class:`~fedjax_abc._engine._run.CheckedRun`),
:func:`~fedjax_abc._engine._plan.make_plan` (blocks, padding, sharding),
:func:`~fedjax_abc._engine._chunk.run_chunk` (one chunk of trials, segment by segment; the
runner ``sweep`` calls too) and :func:`_assemble` (the :class:`SimResult`).
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import sys
import warnings
from typing import Callable, Mapping, Optional, Sequence, Union

import equinox as eqx
import jax
import numpy as np

from fedjax_abc._algorithms._base import AbstractAlgorithm
from fedjax_abc._algorithms._transforms import AbstractTransform
from fedjax_abc._engine import _checkpoint, _memory
from fedjax_abc._engine._chunk import OneRun, run_chunk
from fedjax_abc._engine._progress import (AbstractProgressMeter, NoProgressMeter, Reporting,
                                          progress_meter)
from fedjax_abc._engine._run import (CheckedRun, Components, Spec, build as _build,
                                     check_call as _check_call, checked_path as _checked_path,
                                     local_work as _local_work, oracle_of as _oracle_of)
from fedjax_abc._engine._checkpoint import Position
from fedjax_abc._engine._plan import recorded_rounds
from fedjax_abc._engine._result import PendingGap, SimResult
from fedjax_abc._engine._schedule import AbstractSchedule
from fedjax_abc._engine._result import warn_divergence as _warn_divergence
from fedjax_abc._problems._args import check_real
from fedjax_abc._problems._local_work import AbstractLocalSteps
from fedjax_abc._problems._oracles import AbstractOracle
from fedjax_abc._problems._problem import Problem
from fedjax_abc._problems._samplers import AbstractSampler
from fedjax_abc._robust._aggregators import AbstractAggregator
from fedjax_abc._robust._byzantine import Byzantine

__all__ = ["Simulation", "simulate"]


def _assemble(run: CheckedRun, chunks: Sequence[dict]) -> SimResult:
    """The :class:`SimResult` of all chunks, in trial order."""
    def cat(name):
        if name not in chunks[0]:
            return None
        return chunks[0][name] if len(chunks) == 1 else np.concatenate([c[name] for c in chunks])

    spec = run.spec
    metrics = {name: cat(name) for name in spec.metric_names + spec.stat_names}
    gap = cat("gap")
    if run.call.gap_from is not None:  # the program recorded f(x_t)
        metrics["loss"] = gap
        gap = PendingGap(gap, run.call.gap_from.minima)
    return SimResult(rounds=recorded_rounds(spec.rounds, spec.record.every), gap=gap,
                     grad_norm_sq=cat("grad_norm_sq"), x=cat("x"), x_final=cat("x_final"),
                     config=run.call.config, metrics=metrics,
                     client_x=cat("client_x"), client_loss=cat("client_loss"),
                     _digests=functools.partial(_settings, run.parts(), run.call.alphas,
                                                spec.record.x, spec.record.clients))


def _settings(parts, alphas: np.ndarray, record_x: bool, record_clients: bool = False) -> dict:
    """SHA-256 digests of a run's settings that its config names but does not hold (the
    problem's data and loss, the components' values, the stepsizes), and record_x: what
    shares of one run's trials must have in common (``SimResult.concatenate``). The
    problem is digested without what the simulator's copy of it changes (its name, its
    minima), so that a share run on another machine digests the same."""
    problem = parts.problem
    named = dict(parts._asdict(), problem=(problem.loss, problem.params, problem.grad_fn,
                                           problem.pooled))
    return {**{name: _checkpoint.digest(part) for name, part in named.items()},
            "stepsize": _checkpoint.digest(alphas), "record_x": str(record_x),
            **({"record_clients": "True"} if record_clients else {})}


def _warn_unmoved(run: CheckedRun, result: SimResult) -> None:
    """Warns where no trial's model moved in its T rounds: most likely nobody took part in
    any round (an empty trace, a participation probability near 0), which runs silently."""
    if np.array_equal(result.x_final, run.call.x0.astype(result.x_final.dtype)):
        warnings.warn(f"no trial's model moved in its {run.spec.rounds} rounds: did any client "
                      "take part? (a round without participants leaves x as it is)",
                      RuntimeWarning, stacklevel=4)


def simulate(
    problem: Problem,
    *,
    num_sampled: Optional[int] = None,
    local_steps: Union[int, Sequence[int], AbstractLocalSteps],
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
    progress: Union[bool, Callable, AbstractProgressMeter] = False,
    devices: Optional[Sequence[jax.Device]] = None,
    checkpoint: Optional[Union[str, os.PathLike]] = None,
    checkpoint_every: float = 60.0,
    first_trial: int = 0,
    metrics: Optional[Mapping[str, Callable]] = None,
    generator: str = "threefry",
    transform: Optional[AbstractTransform] = None,
    pad_trials: bool = True,
    aggregator: Optional[AbstractAggregator] = None,
    byzantine: Optional[Byzantine] = None,
    record_clients: bool = False,
    schedule: Optional[AbstractSchedule] = None,
) -> SimResult:
    """Runs ``trials`` independent trials of a federated algorithm (Algorithm 1 by default).

    Each round the sampler picks the participants (default: S = ``num_sampled`` clients
    uniformly without replacement, Assumption 3), each runs Q = ``local_steps`` stochastic
    gradient steps from x_t with stepsize alpha_t, and the server averages their local
    models (Algorithm 1), or does what ``algorithm`` says.

    Args:
      problem: a :class:`~fedjax_abc.Problem` (see ``fedjax_abc.problems``).
      num_sampled: S in [1, n]; None with no ``sampler`` means full participation (S = n).
        Give ``num_sampled`` or ``sampler``, not both (both is a ValueError).
      local_steps: Q >= 1 (every client Q steps, Algorithm 1); an array of n counts Q_i
        (client i takes Q_i steps every round); or a law drawn for every client and round
        (:class:`~fedjax_abc.UniformSteps`, :class:`~fedjax_abc.GeometricSteps`,
        :class:`~fedjax_abc.PmfSteps`), run as one scan over Q_max steps with the steps
        after a client's K masked. New counts or a new law of the same Q_max compile
        nothing new; the algorithm reads K (``LocalInfo.steps``).
      stepsize: alpha > 0, an array of T values, or a schedule ``t -> alpha_t`` (optax too).
      rounds: T >= 1.
      x0: initial point, shape (d,) (or () when d = 1), or (trials, d) for one per trial.
      trials: number of independent trials (>= 1). Unless ``pad_trials=False``, each
        device runs a multiple of 8
        trials (16 for float32 in mask mode), the extra ones discarded, and a call goes to
        as many devices as its trials fill (one for up to 8, or 16 in float32 mask mode;
        every device of a run over several processes) and, unless ``devices`` is given, as
        its work keeps busy (a short call stays on one device): trial r's numbers
        are then the same bit for bit whatever the number of trials, the chunks or the
        devices (known exceptions, to rounding: an autodiff model, the MLP, in ``gather``
        mode with few slots, where XLA may pick a matrix kernel by the batch's size; in
        ``mask`` mode, a loss summing over d > 1 entries inside the local steps, as the
        quadratics' with d = 10 and n = 20, whose x_T differ in the last bit between 3 and
        21 trials).
      key: a JAX PRNG key of the default threefry2x32 generator; trial r uses
        ``fold_in(key, r)`` whatever the number of trials.
      record_every: k, recording t = 0, k, ..., T; must divide T. Default: about 1000
        records: the smallest k dividing T with T / k <= 1000 if that leaves at least 100
        records, else (a prime T, say) k = ceil(T / 1000) with a shorter last interval,
        records at t = 0, k, 2k, ... and T. For a learning problem whose oracle says what a
        step costs (``MinibatchOracle``), at least as many rounds apart as make the records
        (passes over all the data) cost no more than the training: with 100 clients of
        about 120 rows, S = 10, Q = 5 and b = 32, every 8th round.
      mode: "mask" runs all n virtual local trajectories (Section II-A) and averages the
        sampled ones; "gather" runs only the sampled clients. Same key, same draws: the
        same numbers bit for bit on the paper's problems, to rounding in general.
      sampler: an :class:`~fedjax_abc.AbstractSampler`, in place of ``num_sampled`` (which
        must then be None).
      oracle: overrides ``problem.oracle``.
      algorithm: a :class:`~fedjax_abc.algorithms.AbstractAlgorithm`; None is Algorithm 1
        (:class:`~fedjax_abc.algorithms.FedAvg`). Algorithms with client states (SCAFFOLD)
        need a sampler whose slots are distinct clients.
      dtype: "float64" (default; use it for anything compared with the paper) or "float32"
        (faster, biases small gaps).
      trial_chunk: run the trials in chunks of this many (bounds memory); same results.
      record_x: keep the iterates x_t (memory trials x T/k x d); gaps are always kept.
      progress: True for a progress bar on stderr, a ``callback(rounds_done, total, secs)``,
        or a progress meter (``fa.TextProgressMeter()`` for plain lines in a log; see
        :class:`~fedjax_abc.AbstractProgressMeter`). Any of them cuts the run into about
        100 segments per chunk, with the same numbers.
      devices: devices to shard the trials over (as many of them as the trials fill, see
        ``trials``); default all local devices, as many as the call's work keeps busy.
      checkpoint: a file path: the run is cut into about 100 segments per chunk (same
        numbers) and saved there at segment boundaries, every ``checkpoint_every`` seconds
        and whenever it stops (Ctrl-C included: one line on stderr says where it will
        resume). A later call with
        the same arguments and path resumes from the file and returns the uninterrupted
        run's result bit for bit. The file is kept when the run completes and then holds
        its result: the same call again returns it without running (delete the file to
        run again). A file written by a call with other settings is a ValueError naming
        them. Format: see ``fedjax_abc._engine._checkpoint`` (``.npz``, no pickle).
      checkpoint_every: seconds between the checkpoint's saves while the run goes on (at
        the first segment boundary after; 0 saves at every one). It sets how much work a
        hard kill (no chance to save) loses, not the numbers.
      first_trial: the global index of the first trial: the call runs trials first_trial,
        ..., first_trial + trials - 1 of a larger run (their keys ``fold_in(key, index)``),
        so that processes or hosts can each run a share of one run's trials;
        :meth:`SimResult.concatenate` joins the shares into the whole run's result, bit
        for bit. x0 of shape (trials, d) gives the share's own starting points.
      metrics: name -> function of the server's model x (shape (d,), the run's dtype)
        returning a number, recorded at every record beside the gap, inside the compiled
        program (held-out accuracy, a distance, ...): ``SimResult.metrics[name]``, shape
        (trials, records). The functions must be traceable by JAX; their values do not
        count towards divergence.
      generator: the hash of the random words (sampling and oracle noise): "threefry"
        (Threefry-2x32-20, the default) or "splitmix" (SplitMix64 for the round keys and
        the words, about a quarter of the arithmetic per word; tested against a battery of
        statistical tests).
        Both keep every contract above (mask = gather, trials independent of their
        neighbours); the numbers of the two differ, their distributions do not.
      transform: a :class:`~fedjax_abc.transforms.AbstractTransform` applied to every
        participant's update Delta_i = y_i - x_t before its message is formed (clipping,
        compression, noise), with per-client state where it keeps one; its statistics,
        summed over participants and rounds, are recorded as ``SimResult.metrics[name]``.
        None (the default) leaves every number as it is.
      pad_trials: True (the default) pads each device's trials to a multiple of 8 (16 for
        float32 in mask mode) as ``trials`` says, so that a trial's numbers are the same
        bits whatever runs beside it. False computes only the trials asked for: one trial
        costs one trial's work (on a learning problem, 4-5x less than the 8 padded ones), the
        same law and the same numbers to rounding, but a trial's last bits may then depend
        on how many trials run with it (an MLP's x_T after 100 rounds: about 1e-15
        relative). Each new number of trials is then a program of its own shape.
      aggregator: the server's rule from the round's messages to its update (a
        :class:`~fedjax_abc.robust.AbstractAggregator`): None (the default) is the weighted
        mean, added up slot by slot, every number as before; a robust rule
        (``fa.robust.Median()``, ``Krum(f)``, ``compose(NNM(f), TrimmedMean(f))``, ...)
        holds the round's messages at once and aggregates the participants' updates
        (messages relative to x_t, see ``fedjax_abc._engine._aggregate``); it needs a
        sampler whose participants have weight 1.
      byzantine: a :class:`~fedjax_abc.robust.Byzantine`: f clients whose messages, when
        sampled, are replaced by its attack's vector (computed from the round's honest
        updates); None (the default): every client is honest.
      record_clients: keep every client's own model (``algorithm.personal``: x_t for an
        algorithm without personal models) and its loss f_i there at every record,
        ``SimResult.client_x`` (trials x records x n x d) and ``client_loss`` (trials x
        records x n); memory-checked like ``record_x``.
      schedule: how the run's steps go, an :class:`~fedjax_abc.AbstractSchedule`: None
        (the default) is :class:`~fedjax_abc.Rounds`, the synchronous rounds of
        Algorithm 1; :class:`~fedjax_abc.decentral.Gossip` trains without a server.

    Returns:
      A :class:`~fedjax_abc.SimResult`. Trials that became non-finite are counted there
      (``diverged_at``) and left out of its summaries; a :class:`~fedjax_abc.DivergenceWarning`
      says how many. For a problem whose f* is computed on demand (a learning problem's),
      the run records the loss f(x_t) (``metrics["loss"]``) and ``gap`` is formed from it
      when first read (computing f* then, unless the oracle's steps read f_i*, which are
      then computed before the run).

    Raises:
      ValueError: on invalid input, before anything is compiled; when the run's estimated
        memory exceeds what is available (saying what to change); on a checkpoint of
        another run (also one started on the same path while this one runs).
      OSError: before the run, where the checkpoint cannot be written (an unwritable path,
        a disk without room for two copies of it).

    Example:
      >>> import jax, fedjax_abc as fa
      >>> p = fa.problems.huber_offsets(jax.random.key(0), n=10, d_max=20.0)
      >>> res = fa.simulate(p, num_sampled=2, local_steps=5, stepsize=1e-2, rounds=100,
      ...                   x0=p.x_star + 1.0, trials=8, key=jax.random.key(1), record_every=10)
      >>> res.gap.shape, res.x_final.shape
      ((8, 11), (8, 1))

    Reference: Algorithm 1 and Section IV of the paper.
    """
    settings = dict(locals())  # the arguments by name: the signature above is their list
    call = {name: settings.pop(name) for name in _CALL}
    # the Simulation checks its components as it is built: its run does not check them again
    return _run(Simulation(**settings), True, **call)


def _run(sim: "Simulation", fresh: bool, *, progress, checkpoint, checkpoint_every,
         **call) -> SimResult:
    """``sim.run`` with these arguments (``fresh``: its components were just built and
    checked, see ``_run.check_call``), chunk by chunk (resumed from and saved to the
    checkpoint if given)."""
    meter = progress_meter(progress)
    path = _checked_path(checkpoint)
    every = check_real("checkpoint_every", checkpoint_every, low=0.0)
    run = _check_call(sim.components, sim.spec, fresh=fresh, **call)
    spec, call, problem = run.spec, run.call, run.components.problem
    plan = run.plan(not isinstance(meter, NoProgressMeter) or path is not None)
    _memory.check_run(run, plan)
    chunks = math.ceil(call.trials / call.chunk)
    checked, run = run, run.on_devices(plan.groups, chunks * len(plan.segments()))
    position, tracker = Position(0, 0, None, {}, ()), None
    if path is not None:
        fingerprint = _checkpoint.fingerprint(run, plan)
        saved = _checkpoint.load(path, fingerprint)
        if saved is not None:
            position, complete = saved
            if complete:
                result = _assemble(checked, position.done)
                _warn_divergence(result)
                return result
        tracker = _checkpoint.Tracker(path, fingerprint, position,
                                      _memory.checkpoint_bytes(run, plan), every)
    done = position.done
    label = "fedavg" if chunks == 1 else f"fedavg, {chunks} chunks of {call.chunk} trials"
    bar = Reporting(meter, spec.rounds * chunks, label,  # rounds of each chunk in turn
                    position.chunk * spec.rounds + _checkpoint.resume_round(plan, position))
    try:
        for c in range(position.chunk, chunks):
            commit = None if tracker is None else (
                lambda inside, finished=done: tracker.commit(inside._replace(done=finished)))
            out = run_chunk(OneRun(run), plan, c, bar, 0,
                            position if c == position.chunk else None, commit)
            done = done + (out,)
            if tracker is not None:
                tracker.commit(Position(c + 1, 0, None, {}, done))
    except BaseException:
        if tracker is not None:
            tracker.save()
            at = tracker.position
            print(f"fedjax_abc.simulate: stopped at round {_checkpoint.resume_round(plan, at)} of "
                  f"chunk {at.chunk + 1} of {chunks}; the same call resumes there from the "
                  f"checkpoint {path}", file=sys.stderr)
        raise
    finally:
        bar.close()
    if tracker is not None:
        tracker.save(complete=True)
    result = _assemble(checked, done)  # its components, not their copies on every device
    _warn_divergence(result)
    _warn_unmoved(run, result)
    return result


class Simulation(eqx.Module):
    """A run's components and the static spec of its compiled program, to run many times.

    ``Simulation(problem, local_steps=..., rounds=..., ...)`` takes every argument of
    :func:`simulate` except the per-call ones, which :meth:`run` takes: the key, x0, the
    trials, the stepsize, the first trial, progress and a checkpoint. :func:`simulate` is
    ``Simulation(...).run(...)``. A second ``run`` with a new key, x0 or stepsize of the same
    T compiles nothing new and checks only what it was given. A new number of trials compiles
    nothing where it keeps the shape of one call: its trials padded to a multiple of 8 per
    device (16 float32 trials per device in mask mode), on as many devices as before (one
    for up to 8 trials; more only where the call's work keeps each busy). So 1 to 8 trials
    share one program; each new shape compiles once (with ``pad_trials=False``, each new
    number of trials).

    A Simulation is a value: ``run`` runs its components as they are. An array leaf changed
    with ``eqx.tree_at`` (``lambda s: s.algorithm.mu``, a sampler's probabilities, a
    compressor's levels, a noise multiplier) is what runs, compiles nothing new, and is
    checked as its class's constructor checks it (its ``__check_init__``: the same one-line
    ValueError); a component replaced by one of another class or shape is checked and
    compiled as a new Simulation of it would be. What sets the program's shapes (n, S, Q,
    T, the mode, the dtype) is static: ``spec``, and the static fields of the components.

    Attributes:
      components: the run's :class:`Components` (problem, oracle, sampler, algorithm,
        transform, local_steps, aggregator, byzantine), cast to its dtype; also readable
        as ``sim.problem``,
        ``sim.algorithm``, ....
      spec: the static :class:`Spec`: rounds, Q, dtype, what is recorded and when
        (``spec.record``: every, x, clients), how the trials are computed
        (``spec.execution``: mode, trial_chunk, devices, generator, pad_trials), the user's
        metrics, and the components' structure it was checked with.

    Example:
      >>> import equinox as eqx, jax, fedjax_abc as fa
      >>> p = fa.problems.huber_offsets(jax.random.key(0), n=10, d_max=20.0)
      >>> sim = fa.Simulation(p, num_sampled=2, local_steps=5, rounds=100, record_every=10,
      ...                     algorithm=fa.algorithms.FedProx(mu=0.1))
      >>> a = sim.run(key=jax.random.key(1), x0=p.x_star + 1.0, trials=8, stepsize=1e-2)
      >>> stronger = eqx.tree_at(lambda s: s.algorithm.mu, sim, 0.5)
      >>> b = stronger.run(key=jax.random.key(1), x0=p.x_star + 1.0, trials=8, stepsize=1e-2)
      >>> a.gap.shape, bool((a.x_final != b.x_final).any())
      ((8, 11), True)
    """

    components: Components
    spec: Spec = eqx.field(static=True)

    def __init__(self, problem: Problem, *, num_sampled: Optional[int] = None,
                 local_steps: Union[int, Sequence[int], AbstractLocalSteps], rounds: int,
                 record_every: Optional[int] = None, mode: str = "mask",
                 sampler: Optional[AbstractSampler] = None,
                 oracle: Optional[AbstractOracle] = None,
                 algorithm: Optional[AbstractAlgorithm] = None, dtype: str = "float64",
                 trial_chunk: Optional[int] = None, record_x: bool = True,
                 devices: Optional[Sequence[jax.Device]] = None,
                 metrics: Optional[Mapping[str, Callable]] = None, generator: str = "threefry",
                 transform: Optional[AbstractTransform] = None, pad_trials: bool = True,
                 aggregator: Optional[AbstractAggregator] = None,
                 byzantine: Optional[Byzantine] = None, record_clients: bool = False,
                 schedule: Optional[AbstractSchedule] = None):
        settings = dict(locals())  # the arguments by name: the signature above is their list
        del settings["self"]
        self.components, self.spec = _build(**settings)

    @property
    def problem(self) -> Problem:
        return self.components.problem

    @property
    def oracle(self) -> AbstractOracle:
        return _oracle_of(self.components)

    @property
    def sampler(self) -> AbstractSampler:
        return self.components.sampler

    @property
    def algorithm(self) -> AbstractAlgorithm:
        return self.components.algorithm

    @property
    def transform(self) -> Optional[AbstractTransform]:
        return self.components.transform

    @property
    def aggregator(self) -> AbstractAggregator:
        return self.components.aggregator

    @property
    def byzantine(self) -> Optional[Byzantine]:
        return self.components.byzantine

    @property
    def schedule(self) -> AbstractSchedule:
        return self.components.schedule

    @property
    def local_steps(self) -> Union[int, AbstractLocalSteps]:
        """Q, or the law of local steps (per-client counts too)."""
        return _local_work(self.components, self.spec)

    def run(self, *, key: jax.Array, x0, stepsize: Union[float, Callable, np.ndarray],
            trials: int = 1, first_trial: int = 0,
            progress: Union[bool, Callable, AbstractProgressMeter] = False,
            checkpoint: Optional[Union[str, os.PathLike]] = None,
            checkpoint_every: float = 60.0) -> SimResult:
        """The run's result for these per-call arguments (as :func:`simulate`'s), with the
        components as they are now."""
        call = dict(locals())  # the arguments by name: the signature above is their list
        del call["self"]
        return _run(self, False, **call)


# simulate's arguments: the settings a Simulation takes besides the problem, and those of
# its run (the per-call ones)
_SETTINGS = tuple(inspect.signature(Simulation.__init__).parameters)[2:]
_CALL = tuple(inspect.signature(Simulation.run).parameters)[1:]
