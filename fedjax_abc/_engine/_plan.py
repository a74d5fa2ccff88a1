"""The plan of a run: stepsizes, record and progress blocks, lane padding, sharding.

A pure function of the checked settings and the devices: which rounds are recorded, how
the rounds are cut into compiled blocks and segments, and how many trials each call runs.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

__all__ = ["Plan", "make_plan", "stepsize_array"]

_LANE_BYTES = 64  # the widest SIMD register in common use (AVX-512)


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


def default_record_every(rounds: int) -> int:
    """The smallest k dividing T that keeps at most 1000 records."""
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


class Plan(NamedTuple):
    """How a run is cut up (every count static).

    Attributes:
      per_call: trials per compiled call: the chunk padded to whole SIMD registers per device.
      sharding: how a call's trial axis lies on the devices.
      block: b, rounds per compiled block (k, or a divisor of k to show progress often).
      blocks: T / b.
      per_record: k / b, blocks per record.
      segment: blocks per call of the compiled segment (all of them without progress).
    """

    per_call: int
    sharding: Any
    block: int
    blocks: int
    per_record: int
    segment: int

    @property
    def keep(self) -> slice:
        """Which block records are records of the run (every per_record-th)."""
        return slice(self.per_record - 1, None, self.per_record)


def make_plan(rounds: int, record_every: int, chunk: int, dtype, devices, progress: bool) -> Plan:
    """The :class:`Plan` of T = ``rounds`` rounds recorded every k, chunks of ``chunk`` trials.

    The trials are the innermost axis, so the compiled loops run along them in SIMD lanes; a
    trial that fell in a loop's scalar remainder could round differently. Each device gets a
    multiple of 64 bytes' worth of trials (8 in float64, 16 in float32), so that trial r's
    numbers do not depend on the chunking, the devices or its neighbours.
    """
    ndev = len(devices)
    lanes = _LANE_BYTES // np.dtype(dtype).itemsize
    per_call = int(math.ceil(chunk / (ndev * lanes))) * ndev * lanes
    if ndev > 1:
        sharding = NamedSharding(Mesh(np.array(devices), ("trials",)), PartitionSpec("trials"))
    else:
        sharding = jax.sharding.SingleDeviceSharding(devices[0])
    b = _progress_block(rounds, record_every) if progress else record_every
    blocks = rounds // b
    segment = _segment_records(blocks, 100) if progress else blocks
    return Plan(per_call, sharding, b, blocks, record_every // b, segment)
