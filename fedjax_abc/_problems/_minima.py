"""A problem's infima: the clients' f_i*, the global f* and a minimiser x*.

A :class:`~fedjax_abc.Problem` holds them in one of two forms:

- :class:`Minima`: arrays, given or computed when the problem was built (the paper's
  problems, ``make_problem``);
- :class:`DeferredMinima`: computed the first time they are asked for (a learning problem,
  where they take a Newton or L-BFGS solve over every client: seconds to minutes), then kept.
  Asking means reading ``problem.f_star``, ``x_star``, ``local_minima`` or
  ``sigma_f_star``, a theory function, or a run's ``SimResult.gap``. Building the problem and
  training on it need none of them (the simulator records f(x_t) and forms the gap when it
  is read).

The deferred values are those of the data the problem was built with, as the arrays of a
:class:`Minima` are: a change of ``params`` made with ``eqx.tree_at`` does not recompute
either.
"""

from __future__ import annotations

import abc
import sys
import time
from typing import Callable, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

__all__ = ["AbstractMinima", "DeferredMinima", "Minima", "Solver"]

# a solve estimated above this many floating-point operations says when it starts and ends
_ANNOUNCE_FLOPS = 2e9


class AbstractMinima(eqx.Module):
    """f_i* (n,), f* () and x* (d,) of a problem, known or computed on demand."""

    deferred: ClassVar[bool]

    @property
    @abc.abstractmethod
    def dim(self) -> int:
        """d, known without computing anything."""

    @abc.abstractmethod
    def known(self) -> "Minima":
        """The values as arrays (computed and kept on first call where deferred)."""


class Minima(AbstractMinima):
    """f_i*, f* and x* as arrays (leaves: a sweep can stack them, ``eqx.tree_at`` set them)."""

    local_minima: Float[Array, " n"]
    f_star: Float[Array, ""]
    x_star: Float[Array, " d"]
    deferred: ClassVar[bool] = False

    def __check_init__(self):
        if np.ndim(self.x_star) != 1:
            raise ValueError(f"Problem.x_star must have shape (d,), got {np.shape(self.x_star)}")
        if np.shape(self.f_star) != ():
            raise ValueError(f"Problem.f_star must be a scalar, got shape {np.shape(self.f_star)}")

    @property
    def dim(self) -> int:
        return int(self.x_star.shape[0])

    def known(self) -> "Minima":
        return self


class Solver:
    """Computes a problem's :class:`Minima` once, on the host, and keeps them.

    ``solve()`` returns (f_i* (n,), f*, x* (d,)) in float64; ``what`` describes the work in
    a few words and ``flops`` estimates it: a solve estimated above about a second of
    arithmetic says on stderr when it starts and how long it took.
    """

    def __init__(self, solve: Callable[[], tuple], what: str, flops: float):
        self._solve = solve
        self.what = what
        self.flops = float(flops)
        self._minima = None

    @property
    def done(self) -> bool:
        """Whether the values are computed."""
        return self._minima is not None

    def __call__(self) -> Minima:
        if self._minima is None:
            loud = self.flops > _ANNOUNCE_FLOPS
            if loud:
                print(f"fedjax_abc: computing {self.what} ...", file=sys.stderr, flush=True)
            start = time.perf_counter()
            with jax.ensure_compile_time_eval():  # asked for while a program is traced
                local, f_star, x_star = self._solve()
                self._minima = Minima(jnp.asarray(local, jnp.float64),
                                      jnp.asarray(f_star, jnp.float64).reshape(()),
                                      jnp.asarray(x_star, jnp.float64))
            if loud:
                print(f"fedjax_abc: computed {self.what} in {time.perf_counter() - start:.1f} s",
                      file=sys.stderr, flush=True)
        return self._minima


class DeferredMinima(AbstractMinima):
    """f_i*, f* and x* computed by ``solver`` when first asked for, in ``dtype``.

    No array leaves: a problem holding these compiles and trains without them.
    """

    solver: Solver = eqx.field(static=True)
    num_clients: int = eqx.field(static=True)
    d: int = eqx.field(static=True)
    dtype: str = eqx.field(static=True, default="float64")
    deferred: ClassVar[bool] = True

    @property
    def dim(self) -> int:
        return self.d

    def known(self) -> Minima:
        minima = self.solver()
        if self.dtype == "float64":
            return minima
        with jax.ensure_compile_time_eval():  # arrays, also while a program is traced
            return Minima(*(a.astype(self.dtype) for a in (
                minima.local_minima, minima.f_star, minima.x_star)))

    def placeholder(self) -> Minima:
        """Zeros of the values' shapes and dtype: what a run that does not read them carries
        in their place (the same compiled program as for the values)."""
        with jax.ensure_compile_time_eval():
            return Minima(jnp.zeros((self.num_clients,), self.dtype),
                          jnp.zeros((), self.dtype), jnp.zeros((self.d,), self.dtype))
