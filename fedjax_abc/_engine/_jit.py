"""``flat_jit``: ``eqx.filter_jit``'s contract at a fraction of its cost per call.

Like ``eqx.filter_jit``, it traces the array leaves of the arguments (JAX and NumPy arrays
and scalars) and keys the compilation on everything else: the tree structure, static fields
included, and the other leaves (ints, strings, functions), compared by ``==``. It differs
in two ways that matter to a short run:

- the arguments are flattened once, by JAX's C++ pytree code, and the arrays passed to a
  ``jax.jit`` as a flat list, where ``filter_jit`` walks every module in Python to
  partition them at every call (``docs/performance.md`` has the cost);
  a static leaf is compared with its type (``1 == 1.0`` would share a program);
- the call returns at once, as ``jax.jit``'s does, so the host prepares the next step while
  the device runs (``filter_jit`` waits for the result).

The program is the same: the same traced function of the same shapes, so the same numbers.
The outputs must be arrays (as the simulator's states and records are).
"""

from __future__ import annotations

import functools
from typing import Callable

import jax
import numpy as np

__all__ = ["flat_jit"]

_ARRAY_TYPES = (jax.Array, np.ndarray, np.generic)


class _Traced:
    """Marks a traced leaf's place among the static ones."""

    def __repr__(self) -> str:
        return "<traced>"


_TRACED = _Traced()


def flat_jit(fn: Callable) -> Callable:
    """``fn`` compiled once per structure and static leaves of its positional arguments."""

    def compiled(treedef, static, *arrays):
        it = iter(arrays)
        leaves = [next(it) if typed is _TRACED else typed[1] for typed in static]
        return fn(*jax.tree_util.tree_unflatten(treedef, leaves))

    compiled.__name__ = compiled.__qualname__ = fn.__name__  # names the program (dumps, profiles)
    compiled = jax.jit(compiled, static_argnums=(0, 1))

    @functools.wraps(fn)
    def call(*args):
        leaves, treedef = jax.tree_util.tree_flatten(args)
        arrays = [leaf for leaf in leaves if isinstance(leaf, _ARRAY_TYPES)]
        # with its type: 1 == 1.0 == True, but they may trace differently
        static = tuple(_TRACED if isinstance(leaf, _ARRAY_TYPES) else (type(leaf), leaf)
                       for leaf in leaves)
        return compiled(treedef, static, *arrays)

    return call
