"""One JAX CPU device per core, so that ``simulate`` shards its trials over every core.

JAX's CPU backend is one device by default. XLA spreads a large array operation over the
cores by itself (``mask`` mode), but ``gather`` mode's small per-round operations run on
one; as several CPU devices, each runs its share of the trials on its own core, with no
exchange between devices during a run (measured on two cores, Table II's workload:
``gather`` mode 1.5-1.9x faster than on one core, ``mask`` mode 1.4-1.5x faster than one
device with XLA's threads). A device then has a core to itself, so its small loops may be
compiled as one native function (``native_loops``, see
:mod:`~fedjax_abc._engine._xla_loops`). Results do not depend on either.
"""

from __future__ import annotations

import os
from typing import Optional

import jax

from fedjax_abc._engine._xla_loops import set_loop_flags

__all__ = ["usable_cores", "use_cpu_cores"]


def usable_cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def use_cpu_cores(cores: Optional[int] = None, *, native_loops: bool = False) -> int:
    """Makes JAX's CPU backend ``cores`` devices (default: every usable core).

    Call it right after ``import jax`` / ``import fedjax_abc``, before any JAX computation:
    ``simulate`` then shards its trials over the CPU devices (its default ``devices`` are all
    local devices), with the same numbers as on one device. On a GPU or TPU machine it
    changes only the CPU platform.

    Args:
      cores: the number of CPU devices, >= 1; None for :func:`usable_cores`.
      native_loops: also let XLA:CPU compile loops that move under 4 MiB per iteration as
        one native function (:mod:`~fedjax_abc._engine._xla_loops`); the same numbers.
        Measured on Table II's workload: ``gather`` mode with ``generator="splitmix"`` 1.4x
        to 1.9x faster, but 0.8x with the default Threefry generator.

    Returns:
      The number of CPU devices set.

    Raises:
      ValueError: if ``cores`` is not a positive integer or ``native_loops`` not a bool.
      RuntimeError: if JAX has already run a computation (its backend is then fixed).

    Example:
      >>> import jax, fedjax_abc as fa
      >>> fa.use_cpu_cores(2)  # doctest: +SKIP
      2
    """
    n = usable_cores() if cores is None else cores
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"cores must be an integer >= 1, got {cores!r}")
    if not isinstance(native_loops, bool):
        raise ValueError(f"native_loops must be True or False, got {native_loops!r}")
    try:
        jax.config.update("jax_num_cpu_devices", n)
    except RuntimeError:
        raise RuntimeError("use_cpu_cores must be called before any JAX computation (right "
                           "after import); JAX's backend is already running") from None
    if native_loops:
        set_loop_flags()  # read when the backend starts, as the device count is
    return n
