"""The plan of a run: stepsizes, record and progress blocks, lane padding, sharding.

A pure function of the checked settings and the devices: which rounds are recorded, how
the rounds are cut into compiled blocks and segments, and how many trials each call runs.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

__all__ = ["Plan", "Segment", "client_block", "closed_form_gradient", "default_record_every",
           "make_plan", "num_records", "recorded_rounds", "segment_records", "stepsize_array",
           "trial_work"]

# trials per device come in multiples of _TRIAL_LANES: whole 256-bit SIMD registers (XLA:CPU's
# preferred vector width on x86: 8 float32 lanes, two registers of 4 float64) and whole
# batches of the records (_metrics._POOLED_TRIALS). In mask mode, where the local steps of all
# n clients run in one loop, XLA vectorises a float32 sum over d entries 16 trials at a time,
# so mask mode takes multiples of _MASK_LANE_BYTES (16 float32 trials, 8 float64).
_TRIAL_LANES = 8
_MASK_LANE_BYTES = 64
# On a CPU, models of at least _BLOCKED_MODEL_BYTES run their local steps a block of clients
# at a time, a block's models taking about _CLIENT_BLOCK_BYTES per trial (see client_block).
_BLOCKED_MODEL_BYTES = 2048
_CLIENT_BLOCK_BYTES = 4096
# A call's trials go to a second device (a third, ...) only where each gets at least this
# much work, counted in client-steps times d (trial_work): below it, the device's share of
# the call's dispatch costs more than the time its share of the trials saves (the crossover
# is in docs/performance.md).
_DEVICE_WORK = 3 * 2 ** 17


def stepsize_array(stepsize, rounds: int) -> np.ndarray:
    """alpha_0, ..., alpha_{T-1} as a float64 array from a number, an array or a schedule.

    A schedule is any ``t -> alpha_t`` (an optax schedule included); it is evaluated once,
    on all T rounds, before compilation.

    Raises:
      ValueError: if any alpha_t is not finite and positive, or an array has the wrong shape.
    """
    if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) or rounds < 1:
        raise ValueError(f"rounds (T) must be an integer >= 1, got {rounds!r}")
    if callable(stepsize):
        ts = jnp.arange(rounds)
        try:
            alphas = np.asarray(jax.vmap(stepsize)(ts), dtype=np.float64)
        except Exception:  # a schedule written for Python numbers
            try:
                alphas = np.array([float(stepsize(t)) for t in range(rounds)], dtype=np.float64)
            except Exception as err:  # noqa: BLE001 - the user's function: one line
                first = (str(err).strip().splitlines() or [""])[0]
                raise ValueError(f"stepsize schedule t -> alpha_t cannot be evaluated on "
                                 f"t = 0, ..., {rounds - 1}: {type(err).__name__}: {first}") from None
        what = "stepsize schedule"
    else:
        what = "stepsize"
        alphas = np.asarray(stepsize) if not isinstance(stepsize, (str, bytes)) else None
        if alphas is None or alphas.dtype.kind not in "biuf":
            raise ValueError(f"stepsize must be a number, an array of T values or a schedule "
                             f"t -> alpha_t, got {stepsize!r}"[:200])
        alphas = alphas.astype(np.float64)
        if alphas.ndim == 0:
            alphas = np.full((rounds,), float(alphas))
    if alphas.shape != (rounds,):
        raise ValueError(f"{what} must give one value per round, shape ({rounds},), got {alphas.shape}")
    bad = ~(np.isfinite(alphas) & (alphas > 0))
    if bad.any():
        t = int(np.argmax(bad))
        raise ValueError(f"{what} must be finite and > 0 in every round; alpha_{t} = {alphas[t]}")
    return alphas


def _divisors(m: int) -> list[int]:
    """The divisors of m >= 1 in increasing order (trial division up to sqrt(m))."""
    small, large = [], []
    i = 1
    while i * i <= m:
        if m % i == 0:
            small.append(i)
            if i * i != m:
                large.append(m // i)
        i += 1
    return small + large[::-1]


def default_record_every(rounds: int, max_records: int = 1000, min_records: int = 100) -> int:
    """k for about ``max_records`` records t = 0, k, 2k, ..., T (the last interval may be shorter).

    The smallest divisor k of T with T / k <= 1000 when it still gives at least 100 records
    (the rule of earlier versions: their results do not change); otherwise, as for a prime
    T, k = ceil(T / 1000), which does not divide T: the records are t = 0, k, ..., and T.
    """
    if rounds <= max_records:
        return 1
    k0 = -(-rounds // max_records)
    for k in _divisors(rounds):
        if k >= k0:
            return k if rounds // k >= min_records else k0
    return k0


def record_spacing(rounds: int, steps_per_evaluation: Optional[float], participants: int,
                   local_steps: int) -> int:
    """The fewest rounds between records for records to cost no more than the training:
    a record evaluates f and grad f over all the data (``steps_per_evaluation`` oracle
    steps, None where unknown: 1), a round runs ``participants`` clients' ``local_steps``."""
    if steps_per_evaluation is None:
        return 1
    return int(min(rounds, max(1, math.ceil(steps_per_evaluation
                                            / (participants * local_steps)))))


def recorded_rounds(rounds: int, record_every: int) -> np.ndarray:
    """t = 0, k, 2k, ..., and T where k does not divide T."""
    t = np.arange(0, rounds + 1, record_every)
    return t if t[-1] == rounds else np.append(t, rounds)


def num_records(rounds: int, record_every: int) -> int:
    """``len(recorded_rounds(rounds, record_every))``, counted without the array (T may be
    absurd in a size check)."""
    return rounds // record_every + 1 + (rounds % record_every > 0)


def segment_records(records: int, pieces: int) -> int:
    """The largest divisor s of ``records`` with s <= records / ``pieces`` (1 if none)."""
    target = max(1, records // max(1, pieces))
    return max(s for s in _divisors(records) if s <= target)


def _progress_block(rounds: int, record_every: int, pieces: int = 50) -> int:
    """The largest divisor b of k with at least ``pieces`` blocks of b rounds in T."""
    for b in reversed(_divisors(record_every)):
        if rounds // b >= min(pieces, rounds):
            return b
    return 1


class Segment(NamedTuple):
    """One call of the compiled segment: ``blocks`` blocks of ``block`` rounds from ``start``.

    Attributes:
      start: the first round, t0.
      blocks: s, blocks in the call.
      block: b, rounds per block.
      per_record: blocks per record: the call keeps the record of every per_record-th block
        counted from t = 0 (see :attr:`keep`).
    """

    start: int
    blocks: int
    block: int
    per_record: int

    @property
    def stop(self) -> int:
        """The round after the segment's last."""
        return self.start + self.blocks * self.block

    @property
    def keep(self) -> slice:
        """Which of the call's block records are records of the run: those ending at a
        multiple of per_record blocks from t = 0."""
        p = self.per_record
        return slice((p - 1 - self.start // self.block) % p, None, p)


class Plan(NamedTuple):
    """How a run is cut up (every count static).

    Attributes:
      per_call: trials per compiled call: the chunk padded to whole SIMD registers per device.
      sharding: how a call's trial axis lies on the devices.
      block: b, rounds per compiled block (k, or a divisor of k to show progress often).
      blocks: (T - tail) / b.
      per_record: k / b, blocks per record.
      segment: blocks per call of the compiled segment (all of them unless segmented).
      tail: T mod k, the rounds of the last, shorter recorded interval (0 when k divides T).
      client_block: clients running their local steps at once (None: all of them); see
        :func:`client_block`.
    """

    per_call: int
    sharding: Any
    block: int
    blocks: int
    per_record: int
    segment: int
    tail: int = 0
    client_block: Optional[int] = None

    @property
    def groups(self) -> int:
        """The devices a call's trials are sharded over."""
        return len(self.sharding.device_set)

    def segments(self) -> tuple[Segment, ...]:
        """The calls of the compiled segment, in order; the tail, if any, is a call of its own."""
        b, s = self.block, self.segment
        calls = [Segment(j * b, s, b, self.per_record) for j in range(0, self.blocks, s)]
        if self.tail:
            calls.append(Segment(self.blocks * b, 1, self.tail, 1))
        return tuple(calls)


def closed_form_gradient(problem) -> bool:
    """Whether the problem's local gradient is a closed form (``grad_fn``) rather than
    ``jax.grad`` of the loss (a ``grad_fn``, a function, may say so with a ``closed_form``
    attribute, as a data set's ``DatasetGrad`` does)."""
    return bool(getattr(problem.grad_fn, "closed_form", problem.grad_fn is not None))


def client_block(num_clients: int, dim: int, dtype, platform: str,
                 closed_form: bool = True) -> Optional[int]:
    """How many clients run their local steps at once; None for all of them.

    On a CPU, a vmap over every client streams all their models (trials x n x d) through
    memory at each local step; a block of clients whose models take about 4 KiB per trial
    (100 trials: 400 KiB) stays in a core's cache through the Q steps instead. Models under
    2 KiB (the paper's d = 1, quadratics of d = 100), for which the vmap is as fast, run all
    at once, as do all models on an accelerator.

    The block depends on n, d and the dtype alone, not on the number of trials or devices:
    XLA compiles a block's local steps to the same operations whatever the trials beside
    it, so trial r's numbers stay its own. That holds for closed-form gradients
    (``closed_form``: softmax and logistic regression, the paper's problems); autodiff
    gradients (the MLP) run all clients at once, as XLA may hand their sums over a small
    block's rows to a library kernel whose order of operations depends on the trials.
    """
    model = dim * np.dtype(dtype).itemsize
    if platform != "cpu" or not closed_form or model < _BLOCKED_MODEL_BYTES:
        return None
    block = max(1, _CLIENT_BLOCK_BYTES // model)
    return None if block >= num_clients else int(block)


def trial_work(rounds: int, participants: int, local_steps: int, dim: int) -> int:
    """One trial's work in client-steps times d: T rounds of ``participants`` clients (n in
    ``mask`` mode, the sampler's m slots in ``gather`` mode) taking Q (or Q_max) steps in
    R^d. What :func:`make_plan` weighs against a device's dispatch."""
    return rounds * participants * local_steps * dim


def make_plan(rounds: int, record_every: int, chunk: int, dtype, devices,
              segmented: bool, *, num_clients: int = 1, dim: int = 1,
              closed_form: bool = True, mask: bool = False, every_device: bool = False,
              work: Optional[int] = None, pad: bool = True) -> Plan:
    """The :class:`Plan` of T = ``rounds`` rounds recorded every k, chunks of ``chunk`` trials.

    The trials are the innermost axis, so the compiled loops run along them in SIMD lanes; a
    trial that fell in a loop's scalar remainder could round differently. Each device gets a
    multiple of 8 trials (a 256-bit register of float32, two of float64; 16 in float32 when
    ``mask``), so that trial r's numbers do not depend on the chunking, the devices or its
    neighbours. A chunk goes to as many of the devices as it fills with its own trials
    (one device for up to 8 trials, two for 9 to 16; 16 a device in float32 mask mode) and
    as its ``work`` (one trial's, :func:`trial_work`; None: not counted) keeps busy, each
    at least ``_DEVICE_WORK`` client-steps times d: a device given only padding, or a sliver
    of a short call, would add its dispatch to the call and save less than it costs.
    ``every_device`` shards over all of them whatever the chunk (``sweep``, whose grid
    points run beside each chunk's trials), as do devices of several processes (each
    process must hold a share). ``pad`` False (``simulate(..., pad_trials=False)``) drops
    the padding: a call computes its own trials only (split evenly over the devices), whose
    last bits may then depend on their number.

    ``segmented`` (progress or a checkpoint) cuts the rounds into about 100 calls (at least
    50 blocks); the numbers do not change. Where k does not divide T, the last T mod k
    rounds run as one more call, with one record at T.
    """
    lanes = max(_TRIAL_LANES, _MASK_LANE_BYTES // np.dtype(dtype).itemsize if mask else 0)
    local = all(dv.process_index == jax.process_index() for dv in devices)
    ndev = len(devices)
    if local and not every_device:
        ndev = min(ndev, -(-chunk // lanes))
        if work is not None:
            ndev = max(1, min(ndev, chunk * work // _DEVICE_WORK))
    devices = devices[:ndev]
    unit = ndev * (lanes if pad else 1)
    per_call = int(math.ceil(chunk / unit)) * unit
    if ndev > 1:
        sharding = NamedSharding(Mesh(np.array(devices), ("trials",)), PartitionSpec("trials"))
    else:
        sharding = jax.sharding.SingleDeviceSharding(devices[0])
    tail = rounds % record_every
    main = rounds - tail
    b = _progress_block(main, record_every) if segmented else record_every
    blocks = main // b
    segment = segment_records(blocks, 100) if segmented else blocks
    block_of_clients = client_block(num_clients, dim, dtype, devices[0].platform, closed_form)
    return Plan(per_call, sharding, b, blocks, record_every // b, segment, tail, block_of_clients)
