"""How much memory a run needs, checked against what the machine has before any work starts.

:func:`estimate` adds up the large allocations of a run (an estimate, not an exact count):

- results on the host: trials x records x (2 + d if ``record_x``) values, plus x_T, twice
  (the chunks' parts and the joined arrays);
- stepsizes: T float64 values (the array, the schedule's evaluation, a copy);
- per call of the compiled loop (``per_call`` trials, the chunk padded to SIMD lanes): the
  carry (server state, and n client states for algorithms that keep them) twice, the
  records of one call, and one round's working set, ~ (n in mask mode, the sampler's m
  slots in gather mode) x per_call x (Q d noise values, their random words, and a few
  copies of the d-vector).

:func:`check` compares it with the memory available (``MemAvailable`` of /proc/meminfo,
else the physical memory; accelerators: their memory limit where JAX reports one) and
refuses a run that cannot fit, in one line that says what to change. :func:`check_sweep`
does the same for a whole grid of ``sweep`` from its first point, before the other points
are checked (each check takes about a millisecond, a grid of millions of points hours).
"""

from __future__ import annotations

import math
import os
from typing import Mapping, NamedTuple, Optional

import jax
import numpy as np

from fedjax_abc._engine._plan import default_record_every, num_records
from fedjax_abc._problems._host import method
from fedjax_abc._problems._problem import Problem

__all__ = ["MEMORY_VARIABLE", "Estimate", "StateSizes", "available_bytes", "check", "check_run",
           "check_points", "check_sweep", "checkpoint_bytes", "estimate", "format_bytes",
           "state_sizes"]

_WORKING_COPIES = 6  # copies of a client's d-vector alive in a round (model, gradient, messages)
_POINT_BYTES = 8000  # a grid point's bookkeeping on the host: its checked run, its SimResult


class Estimate(NamedTuple):
    """Bytes a run needs, by what needs them.

    Attributes:
      results: the records and x_T on the host (twice: parts and joined arrays).
      stepsizes: the T stepsizes.
      states: the loop carry of one call (server and client states), twice.
      call: the records of one call and the working set of one round.
      host_only: whether ``states`` and ``call`` live on an accelerator (not host memory).
    """

    results: int
    stepsizes: int
    states: int
    call: int
    host_only: bool = False

    @property
    def host(self) -> int:
        return self.results + self.stepsizes + (0 if self.host_only else self.states + self.call)

    @property
    def device(self) -> int:
        return self.states + self.call


def format_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000


MEMORY_VARIABLE = "FEDJAX_ABC_MEMORY_BYTES"


def available_bytes(environ: Mapping[str, str] = os.environ) -> Optional[int]:
    """Host memory available now: ``FEDJAX_ABC_MEMORY_BYTES`` where set (a share of a node
    whose other jobs the kernel does not count, or a limit of a container), else
    /proc/meminfo MemAvailable, else physical memory, else None.

    Raises:
      ValueError: where the variable is set to anything but a positive integer.
    """
    value = environ.get(MEMORY_VARIABLE)
    if value is not None:
        if not value.strip().isdigit() or int(value) < 1:
            raise ValueError(f"{MEMORY_VARIABLE} must be a number of bytes >= 1, got {value!r}")
        return int(value)
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def device_bytes(device) -> Optional[int]:
    """An accelerator's memory limit as JAX reports it; None on CPU or when unknown."""
    if getattr(device, "platform", "cpu") == "cpu":
        return None
    try:
        stats = device.memory_stats() or {}
    except Exception:  # not every backend implements it
        return None
    limit = stats.get("bytes_limit")
    return int(limit) if limit else None


def estimate(*, trials: int, records: int, dim: int, itemsize: int, record_x: bool, rounds: int,
             client_values: int = 0, per_call: int = 0, call_records: int = 0, participants: int = 0,
             local_steps: int = 0, noise_words: int = 0, server_bytes: int = 0,
             client_bytes: int = 0, num_clients: int = 0, host_only: bool = False) -> Estimate:
    """The :class:`Estimate` of a run (counts as in :func:`fedjax_abc.simulate`).

    Args:
      trials, records, dim, itemsize, record_x, rounds: R, the recorded rounds, d, bytes per
        value, whether x_t is kept, T.
      client_values: values a record keeps of the clients (n (d + 1) with
        ``record_clients``: every client's model and loss), 0 without.
      per_call: trials per compiled call; call_records: records one call returns.
      participants: clients that compute in a round (n in mask mode, m slots in gather).
      local_steps: Q; noise_words: uint32 words of one client's round of noise.
      server_bytes, client_bytes: one trial's server state, one client's state.
      num_clients: n (client states are kept for all of them).
      host_only: the calls run on an accelerator with memory of its own.
    """
    per_record = 2 + (dim if record_x else 0) + client_values
    results = 2 * itemsize * trials * (records * per_record + dim)
    stepsizes = 3 * 8 * rounds
    states = 2 * per_call * (server_bytes + num_clients * client_bytes)
    one_round = participants * per_call * (local_steps * dim * itemsize + 4 * noise_words
                                           + _WORKING_COPIES * dim * itemsize)
    call = per_call * call_records * per_record * itemsize + one_round
    return Estimate(results, stepsizes, states, call, host_only)


def _advice(est: Estimate, record_x: bool, rounds: int, trials: int, chunk: int,
            record_every: Optional[int]) -> str:
    parts = {"results": est.results, "stepsizes": est.stepsizes,
             "working set": est.states + est.call}
    largest = max(parts, key=parts.get)
    if largest == "results":
        return ("record_x=False (x_t takes trials x records x d values; record_clients "
                "n x d more), " if record_x else "") + \
            f"a larger record_every (now k={record_every or 'default'} for T={rounds}), or " \
            f"fewer trials (now {trials})"
    if largest == "stepsizes":
        return f"fewer rounds (now T={rounds})"
    return f"a smaller trial_chunk (now {chunk} trials per call)"


def check(est: Estimate, *, record_x: bool, rounds: int, trials: int, chunk: int,
          record_every: Optional[int] = None, device_available: Optional[int] = None) -> None:
    """Raises ValueError (one line: the estimate and what to change) if the run cannot fit.

    Args:
      est: the run's :class:`Estimate`.
      record_x, rounds, trials, chunk, record_every: the run's settings, named in the advice.
      device_available: an accelerator's bytes (``est.device`` is checked against it).

    The host's bytes are :func:`available_bytes` (no check where unknown).
    """
    available = available_bytes()
    if available is not None and est.host > available:
        breakdown = (f"results {format_bytes(est.results)}, stepsizes {format_bytes(est.stepsizes)}, "
                     f"working set {format_bytes(est.states + est.call)}")
        raise ValueError(f"memory: the run needs about {format_bytes(est.host)} ({breakdown}), "
                         f"more than the {format_bytes(available)} available; pass "
                         f"{_advice(est, record_x, rounds, trials, chunk, record_every)}")
    if device_available is not None and est.device > device_available:
        raise ValueError(f"memory: one call needs about {format_bytes(est.device)} on the device, "
                         f"more than its {format_bytes(device_available)}; pass a smaller "
                         f"trial_chunk (now {chunk} trials per call)")


# ------------------------------------------------------------------ a run of simulate


class StateSizes(NamedTuple):
    """Bytes of one trial's server state and of one client's state; whether clients keep one."""

    server_bytes: int
    client_bytes: int
    client_states: bool


def state_sizes(algorithm, x, transform=None) -> StateSizes:
    """An algorithm's state sizes in R^d (a client's transform state counted with its own),
    from its states at x0 = x, a point of shape (d,) in the run's dtype (a few small
    operations: cheaper than tracing them; the sizes do not depend on the point)."""
    def size(tree):
        return sum(math.prod(np.shape(a)) * np.dtype(a.dtype).itemsize
                   for a in jax.tree_util.tree_leaves(tree))

    server = method(algorithm, "init")(x)
    client = method(algorithm, "init_client")(x)
    extra = () if transform is None else transform.init(x)
    return StateSizes(size(server), size(client) + size(extra),
                      bool(jax.tree_util.tree_leaves(client)))


def client_values(spec, problem) -> int:
    """The values a record keeps of the clients: n (d + 1) with ``record_clients`` (every
    client's own model and its loss), else 0."""
    return problem.num_clients * (problem.dim + 1) if spec.record.clients else 0


def check_run(run, plan) -> None:
    """:func:`check` of a checked run (``_run.CheckedRun``) cut up by ``plan``."""
    spec, call, problem = run.spec, run.call, run.components.problem
    n, d = problem.num_clients, problem.dim
    sizes = spec.state_sizes
    steps = run.max_steps
    est = estimate(
        trials=call.trials, records=num_records(spec.rounds, spec.record.every), dim=d,
        itemsize=np.dtype(run.dtype).itemsize, record_x=spec.record.x, rounds=spec.rounds,
        client_values=client_values(spec, problem), per_call=plan.per_call, call_records=plan.segment + 1,
        participants=run.participants,
        local_steps=steps,
        noise_words=method(run.parts().oracle, "num_words")((steps, d)),
        server_bytes=sizes.server_bytes, client_bytes=sizes.client_bytes,
        num_clients=n, host_only=call.devices[0].platform != "cpu")
    check(est, record_x=spec.record.x, rounds=spec.rounds, trials=call.trials,
          chunk=call.chunk, record_every=spec.record.every,
          device_available=device_bytes(call.devices[0]))  # None on a CPU


def check_sweep(first, grid: dict) -> None:
    """Raises ValueError (one line) if the results of every point of ``grid`` cannot fit.

    Args:
      first: the checked run (``_run.CheckedRun``) of the grid's first point; every point
        keeps as many trials, records and stepsizes (a ``problem`` axis: of its largest d).
      grid: axis name -> list of values (checked by ``sweep``).
    """
    spec = first.spec
    dim = max([first.components.problem.dim]
              + [p.dim for p in grid.get("problem", ()) if isinstance(p, Problem)])
    check_points([len(values) for values in grid.values()], trials=first.call.trials,
                 rounds=spec.rounds, record_every=spec.record.every, dim=dim,
                 itemsize=np.dtype(first.dtype).itemsize, record_x=spec.record.x)


def check_points(sizes, *, trials: int, rounds: int, record_every: Optional[int], dim: int,
                 itemsize: int, record_x: bool) -> None:
    """:func:`check_sweep` from the axes' sizes and the settings every point shares (also
    for ``fedjax-abc run``, whose parts are sweeps kept until the grid is joined)."""
    points = math.prod(sizes)
    if record_every is None or rounds % record_every:
        record_every = default_record_every(rounds)
    est = estimate(trials=trials, records=num_records(rounds, record_every), dim=dim,
                   itemsize=itemsize, record_x=record_x, rounds=rounds)
    each = est.results + est.stepsizes + _POINT_BYTES
    available = available_bytes()
    if available is not None and points * each > available:
        shape = " x ".join(str(size) for size in sizes)
        raise ValueError(f"memory: the grid's {points:,} points ({shape}) need about "
                         f"{format_bytes(points * each)} for their results ({format_bytes(each)} "
                         f"each), more than the {format_bytes(available)} available; pass fewer "
                         "grid values, " + ("record_x=False, " if record_x else "")
                         + f"a larger record_every (now k={record_every} for T={rounds}) or "
                         f"fewer trials (now {trials})")


def checkpoint_bytes(run, plan) -> int:
    """About the bytes of a run's checkpoint file: every trial's records and x_T (a complete
    run's file holds them all) and one call's loop carry, 64 kB of headers beside."""
    spec, problem = run.spec, run.components.problem
    n, d = problem.num_clients, problem.dim
    sizes = spec.state_sizes
    per_record = 2 + len(spec.metric_names) + len(spec.stat_names) + \
        (d if spec.record.x else 0) + client_values(spec, problem)
    records = num_records(spec.rounds, spec.record.every)
    results = np.dtype(run.dtype).itemsize * run.call.trials * (records * per_record + d)
    carry = plan.per_call * (sizes.server_bytes + n * sizes.client_bytes)
    return int(results + carry + 64_000)
