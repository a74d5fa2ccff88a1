"""XLA:CPU may run a loop with little work per iteration as one compiled function.

On a CPU, XLA executes a while loop (``lax.scan``) as a sequence of calls per iteration: a
fusion, the loop-carry copies, the counter, a few microseconds each. A round of ``gather``
mode at Table II's size does only tens of microseconds of arithmetic, so this overhead is a
large part of its time. XLA can instead compile a loop whose iteration moves less than a
byte limit into one native function (its ``xla_cpu_small_while_loop_byte_threshold``
option, 1 kB by default); that function runs on one core, where a sequence of calls can
spread each large operation over all of them. ``fa.use_cpu_cores()``, which gives every
core its own device, raises the limit to :data:`LOOP_BYTES` per iteration when it makes
more than one device (``native_loops=None``; ``True`` or ``False`` choose), unless
``XLA_FLAGS`` already sets the option. XLA reads ``XLA_FLAGS`` once, when JAX starts its
backend. The option changes how loops are executed, not what they compute: results are
the same bits (tested).

On several devices a native loop also keeps each device's work on its own thread: run as
calls, XLA splits a large operation into tasks on the thread pool that all devices share
(:mod:`~fedjax_abc._engine._cores`). On one device it gives up XLA's spreading of large
operations over the cores, so it is not the default there.

The same flags turn off XLA:CPU's tiled emitter for copies (``xla_cpu_disable_tiled_emitter``).
It wraps a copy that changes an array's layout in a fusion of its own before the copies
that move no byte (a layout change of a dimension of size 1) become bitcasts, so such a
copy stays: in ``gather`` mode, the clients' data gathered for a round's local steps,
copied once more every round (2-3% of Table II's ``gather`` mode in float64). Without it,
XLA's simplifier removes the copy. A copy computes nothing: the numbers stay the same bits.

On a CPU with AVX-512, ``use_cpu_cores`` also asks XLA:CPU for 512-bit vectors
(``xla_cpu_prefer_vector_width=512``; its default, 256, is LLVM's choice for CPUs that slow
down on wide vectors). The trials are the innermost axis, so a loop over them takes 8
float64 or 16 float32 trials per instruction instead of 4 or 8. Element by element the
arithmetic is the same IEEE operations in either width, so the paper's problems (d = 1) give
the same bits in both modes (tested), as do the quadratics in ``gather`` mode; a sum over
d > 1 entries inside ``mask`` mode's local steps (the quadratics' with d = 5) may be cut
differently into the wider registers and round differently in its last bits, as it may on
another CPU. Each device's trials stay a multiple of 8, as the plan pads them (``_plan``).
A width in ``XLA_FLAGS`` already (``--xla_cpu_prefer_vector_width=256``, say) is kept.
"""

from __future__ import annotations

import os
import re
from typing import MutableMapping

__all__ = ["LOOP_BYTES", "cpu_vector_bits", "loop_flags", "remove_loop_flags",
           "set_loop_flags", "set_vector_flags", "vector_flags"]

LOOP_BYTES = 4 * 2**20
_OPTION = "xla_cpu_small_while_loop_byte_threshold"
_NO_TILED_COPIES = "xla_cpu_disable_tiled_emitter=true"
_EXTRA = re.compile(r"--xla_backend_extra_options=(\S*)")
_VECTOR = "xla_cpu_prefer_vector_width"
_WIDE = 512


def cpu_vector_bits(cpuinfo: str = "/proc/cpuinfo") -> int:
    """512 where the CPU has AVX-512 (``avx512f`` among the flags of ``cpuinfo``), else 256
    (also where the file cannot be read: another OS)."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("flags"):
                    return _WIDE if "avx512f" in line.split() else 256
    except OSError:
        pass
    return 256


def loop_flags(flags: str, limit: int = LOOP_BYTES) -> str:
    """``flags`` (an ``XLA_FLAGS`` value) with the loop limit set to ``limit`` bytes and the
    tiled emitter for copies turned off.

    A flags string that already names the loop option is returned unchanged (the user's
    setting wins); other backend options are kept.

    Example:
      >>> loop_flags("--xla_cpu_enable_fast_math=false", 1024)
      '--xla_cpu_enable_fast_math=false --xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold=1024,xla_cpu_disable_tiled_emitter=true'
    """
    if _OPTION in flags:
        return flags
    setting = f"{_OPTION}={int(limit)},{_NO_TILED_COPIES}"
    match = _EXTRA.search(flags)
    if match is None:
        return f"{flags} --xla_backend_extra_options={setting}".strip()
    value = f"{match.group(1)},{setting}" if match.group(1) else setting
    return flags[:match.start(1)] + value + flags[match.end(1):]


def vector_flags(flags: str, vector_bits: int) -> str:
    """``flags`` asking for 512-bit vectors where ``vector_bits`` is 512 and ``flags`` names
    no width of its own (the user's setting wins); otherwise ``flags`` unchanged.

    Example:
      >>> vector_flags("--x=1", 512)
      '--x=1 --xla_cpu_prefer_vector_width=512'
    """
    if vector_bits != _WIDE or f"--{_VECTOR}=" in flags:
        return flags
    return f"{flags} --{_VECTOR}={_WIDE}".strip()


def set_loop_flags(environ: MutableMapping[str, str] = os.environ) -> None:
    """Sets the loop limit in ``environ["XLA_FLAGS"]`` (see :func:`loop_flags`)."""
    environ["XLA_FLAGS"] = loop_flags(environ.get("XLA_FLAGS", ""))


def set_vector_flags(environ: MutableMapping[str, str] = os.environ) -> None:
    """Sets the vector width of this CPU (:func:`cpu_vector_bits`) in ``environ["XLA_FLAGS"]``
    where it is 512 (see :func:`vector_flags`)."""
    flags = vector_flags(environ.get("XLA_FLAGS", ""), cpu_vector_bits())
    if flags:
        environ["XLA_FLAGS"] = flags


def remove_loop_flags(environ: MutableMapping[str, str] = os.environ) -> None:
    """Takes out of ``environ["XLA_FLAGS"]`` the setting :func:`set_loop_flags` adds (exactly
    that one; a loop limit of the user's own stays)."""
    flags = environ.get("XLA_FLAGS")
    if not flags:
        return
    setting = f"{_OPTION}={LOOP_BYTES},{_NO_TILED_COPIES}"
    flags = flags.replace(f" --xla_backend_extra_options={setting}", "").replace(
        f"--xla_backend_extra_options={setting}", "").replace(f",{setting}", "").strip()
    if flags:
        environ["XLA_FLAGS"] = flags
    else:
        del environ["XLA_FLAGS"]
