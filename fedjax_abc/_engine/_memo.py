"""Host-side preparations remembered for the same objects, as ``jax.jit`` remembers traces.

Before anything is compiled, a call of ``simulate`` prepares its components on the host:
the problem cast to the run's dtype, the checks of the sampler and the oracle, the default
sampler and algorithm. Each is a pure function of immutable objects, and together they
cost a sizeable part of a short call (equinox builds a module for every bound method it
hands out; ``docs/performance.md``), all of it before the first round.
A second call with the same objects (a loop of short runs, a benchmark, a sweep) finds
them here.

:func:`remembered` keys a result on the identity of its objects and is sound for the same
reason as JAX's caches of traces: the objects are immutable ``eqx.Module`` pytrees, and a
leaf that could change in place (a NumPy array) or a tracer turns the memory off for
that call. An entry lives as long as its objects do (weak references), so a dropped
problem takes its prepared copy with it; while it lives, so does that copy (for a float32
run of a float64 problem, a float32 copy of its arrays).
"""

from __future__ import annotations

import weakref
from typing import Callable, Sequence

import jax
import numpy as np

__all__ = ["remembered"]

_ENTRIES: dict = {}


def _immutable(obj) -> bool:
    """Whether no leaf of ``obj`` can change in place or is a tracer."""
    return not any(isinstance(leaf, (np.ndarray, jax.core.Tracer))
                   for leaf in jax.tree_util.tree_leaves(obj))


def remembered(fn: Callable, objects: Sequence, *args):
    """``fn(*objects, *args)``, computed once while every one of ``objects`` lives.

    ``objects`` are compared by identity, ``args`` by value (they must be hashable, or
    nothing is remembered). A call that raises remembers nothing.

    Example:
      >>> import fedjax_abc as fa
      >>> s = fa.UniformWithoutReplacement(3)
      >>> remembered(lambda sampler, n: sampler.num_slots(n), (s,), 10)
      3
    """
    try:
        key = (fn, tuple(map(id, objects)), args)
        entry = _ENTRIES.get(key)
    except TypeError:  # an unhashable argument
        return fn(*objects, *args)
    if entry is not None and all(ref() is obj for ref, obj in zip(entry[0], objects)):
        return entry[1]
    value = fn(*objects, *args)
    if all(_immutable(obj) for obj in objects):
        try:
            refs = tuple(weakref.ref(obj, lambda _, k=key: _ENTRIES.pop(k, None))
                         for obj in objects)
        except TypeError:  # an object without weak references
            return value
        _ENTRIES[key] = (refs, value)
    return value
