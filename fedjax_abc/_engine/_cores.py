"""One JAX CPU device per core, so that ``simulate`` shards its trials over every core.

JAX's CPU backend is one device by default. XLA spreads a large array operation over the
cores by itself (``mask`` mode), but ``gather`` mode's small per-round operations run on
one; as several CPU devices, each runs its share of the trials on its own core, with no
exchange between devices during a run, and the same results as on one device
(``simulate``'s docstring lists the known exceptions).

With more than one device, loops that move under 4 MiB per iteration are compiled as one
native function by default (``native_loops``, see :mod:`~fedjax_abc._engine._xla_loops`).
Run as XLA's sequence of calls per iteration, a loop's operations execute on a thread pool
that every device shares, and XLA splits the operations its cost model rates as large into
tasks on that pool (on Table II's workload, the Threefry hash of a round's 4 x 504 sampler
words); with every core busy with a device, a device's round then waits for the others'
tasks (measurements: ``docs/performance.md``, notes at the end). A native loop
runs on its device's thread; the numbers are the same bits either way. On a CPU with
AVX-512 the same call asks XLA:CPU for 512-bit vectors (:mod:`~fedjax_abc._engine._xla_loops`).

Importing the package changes no setting: the devices are the user's choice, made by
calling :func:`use_cpu_cores` right after the imports, before any JAX computation (as
``numpyro.set_host_device_count``), which is the one place that writes these settings
(``jax_num_cpu_devices`` and ``XLA_FLAGS``, read when JAX starts its backend).
:func:`warn_one_device` says so, once, where a run goes to JAX's single CPU device of a
machine with several cores and nobody chose.
"""

from __future__ import annotations

import os
import warnings
from typing import Optional

import jax

from fedjax_abc._engine._xla_loops import remove_loop_flags, set_loop_flags, set_vector_flags

__all__ = ["CORES_VARIABLE", "usable_cores", "use_cpu_cores", "warn_one_device"]

CORES_VARIABLE = "FEDJAX_ABC_CPU_CORES"


def usable_cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def use_cpu_cores(cores: Optional[int] = None, *, native_loops: Optional[bool] = None) -> int:
    """Makes JAX's CPU backend ``cores`` devices (default: every usable core).

    Call it right after ``import jax`` / ``import fedjax_abc``, before any JAX computation
    (importing the package makes none, and sets nothing):
    ``simulate`` then shards its trials over the CPU devices (its default ``devices`` are all
    local devices), with the same numbers as on one device. On a GPU or TPU machine it
    changes only the CPU platform.

    Args:
      cores: the number of CPU devices, >= 1; None for the environment variable
        ``FEDJAX_ABC_CPU_CORES`` where set (a job's share of a node), else
        :func:`usable_cores`.
      native_loops: also let XLA:CPU compile loops that move under 4 MiB per iteration as
        one native function (:mod:`~fedjax_abc._engine._xla_loops`), unless ``XLA_FLAGS``
        already sets that limit; None (the default) for True when there is more than one
        device (see the module's docstring). The same numbers either way.

    On a CPU with AVX-512 it also asks XLA:CPU for 512-bit vectors, unless ``XLA_FLAGS``
    names a width (:mod:`~fedjax_abc._engine._xla_loops`): the same numbers on the paper's
    problems, the last bits of a ``mask``-mode sum over d > 1 entries may differ.

    Returns:
      The number of CPU devices set.

    Raises:
      ValueError: if ``cores`` (or ``FEDJAX_ABC_CPU_CORES``) is not a positive integer or
        ``native_loops`` not a bool or None.
      RuntimeError: if JAX has already run a computation (its backend is then fixed).

    Example:
      >>> import jax, fedjax_abc as fa
      >>> fa.use_cpu_cores(2)  # doctest: +SKIP
      2
    """
    n = _cores_chosen() if cores is None else cores
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"cores must be an integer >= 1, got {cores!r}")
    if native_loops is not None and not isinstance(native_loops, bool):
        raise ValueError(f"native_loops must be True, False or None, got {native_loops!r}")
    try:
        jax.config.update("jax_num_cpu_devices", n)
    except RuntimeError:
        raise RuntimeError("use_cpu_cores must be called before any JAX computation (right "
                           "after import); JAX's backend is already running") from None
    if native_loops or (native_loops is None and n > 1):  # by default with several devices
        set_loop_flags()  # read when the backend starts, as the device count is
    else:
        remove_loop_flags()  # as an earlier call may have set them
    set_vector_flags()
    return n


def _cores_chosen() -> int:
    """``FEDJAX_ABC_CPU_CORES`` where set (ValueError unless a positive integer), else every
    usable core."""
    chosen = os.environ.get(CORES_VARIABLE)
    if chosen is None:
        return usable_cores()
    try:
        cores = int(chosen)
    except ValueError:
        cores = 0
    if cores < 1:
        raise ValueError(f"{CORES_VARIABLE} must be an integer >= 1, got {chosen!r}")
    return cores


def warn_one_device(devices) -> None:
    """Warns where a run goes to JAX's single CPU device on a machine with several usable
    cores and nobody chose the devices (no :func:`use_cpu_cores`, ``jax_num_cpu_devices`` or
    device count in ``XLA_FLAGS``): once a process under Python's default warning filter,
    the warning being raised from this one place."""
    if len(devices) != 1 or devices[0].platform != "cpu":
        return
    cores = usable_cores()
    if cores < 2 or jax.config.jax_num_cpu_devices != -1 or \
            "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
        return
    warnings.warn(f"fedjax_abc runs on one CPU device of {cores} usable cores: call "
                  "fa.use_cpu_cores() right after the imports, before any JAX computation, to "
                  "shard the trials over every core (the same numbers)", UserWarning,
                  stacklevel=1)
