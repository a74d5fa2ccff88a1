"""Stochastic gradient oracles g_i(x; xi) satisfying the ABC condition (eq. 4 / eq. 8).

An oracle draws all the noise one client needs for its Q local steps of one round in one
call (``noise``), then turns one step's noise into a gradient estimate (``gradient``). This
split keeps randomness explicit: the simulator derives the key of client i in round t from
the trial key, so a client's noise does not depend on which other clients were sampled.

Write your own in a few lines::

    class Laplace(fa.AbstractOracle):
        scale: float
        def noise(self, key, shape, dtype):
            return jax.random.laplace(key, shape, dtype)
        def gradient(self, problem, client, x, z):
            return problem.local_grad(client, x) + self.scale * z
"""

from __future__ import annotations

import abc
from typing import Any, Callable, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

__all__ = [
    "AbstractOracle",
    "ExactOracle",
    "GaussianOracle",
    "RademacherOracle",
    "objective_gap_magnitude",
]


class AbstractOracle(eqx.Module):
    """Unbiased stochastic gradient oracle of one client (Assumption 2)."""

    @abc.abstractmethod
    def noise(self, key: Array, shape: tuple[int, ...], dtype) -> Any:
        """All noise of one client's Q local steps in one draw.

        Args:
          key: the client's key for this round.
          shape: (Q, d).
          dtype: floating dtype of the simulation.

        Returns:
          An array or pytree whose leaves have leading axis Q; step l receives leaf[l].
        """

    @abc.abstractmethod
    def gradient(self, problem, client, x: Array, noise) -> Array:
        """g_i(x; xi) for one step, given that step's slice of ``noise``."""


class ExactOracle(AbstractOracle):
    """Noise-free oracle g_i(x) = grad f_i(x) (C = D = 0)."""

    def noise(self, key, shape, dtype):
        return jnp.zeros(shape[:1], dtype)

    def gradient(self, problem, client, x, noise):
        return problem.local_grad(client, x)


class GaussianOracle(AbstractOracle):
    """g_i(x) = grad f_i(x) + z sqrt((C (f_i(x) - f_i*) + D) / d), z ~ N(0, I_d).

    Its variance E||g - grad f_i||^2 equals C (f_i(x) - f_i*) + D: the ABC bound (4) with
    equality.
    """

    C: Float[Array, ""]
    D: Float[Array, ""]

    def __init__(self, C=1.0, D=0.0):
        if not (float(C) >= 0 and float(D) >= 0):
            raise ValueError(f"GaussianOracle needs C >= 0 and D >= 0, got C={C}, D={D}")
        self.C = jnp.asarray(C, float)
        self.D = jnp.asarray(D, float)

    def noise(self, key, shape, dtype):
        return jax.random.normal(key, shape, dtype)

    def gradient(self, problem, client, x, noise):
        f, g = problem.local_value_and_grad(client, x)
        var = self.C * jnp.maximum(f - client.local_min, 0) + self.D
        return g + noise * jnp.sqrt(var / x.shape[-1])


def objective_gap_magnitude(problem, client, x, value):
    """sqrt(f_i(x) - f_i*): the magnitude of the oracle of problem (27)."""
    return jnp.sqrt(jnp.maximum(value - client.local_min, 0))


class RademacherOracle(AbstractOracle):
    """g_i(x; eps) = grad f_i(x) + eps m_i(x) / sqrt(d), eps uniform on {-1, +1}^d.

    Unbiased with variance m_i(x)^2. With the default magnitude m_i = sqrt(f_i - f_i*) this
    is the oracle of Section IV-B (variance f_i - f_i*, so C = 1, D = 0); the oracle (26)
    of Section IV-A uses another magnitude (see ``problems.softplus_huber``).

    The signs come from raw random bits, 32 per uint32 word, so one round of one client
    costs one small draw.

    Attributes:
      magnitude: static ``magnitude(problem, client, x, f_i(x)) -> m_i(x)``.
    """

    magnitude: Callable = eqx.field(static=True, default=objective_gap_magnitude)

    def noise(self, key, shape, dtype):
        count = 1
        for s in shape:
            count *= s
        words = jax.random.bits(key, ((count + 31) // 32,), jnp.uint32)
        positions = jnp.arange(count, dtype=jnp.uint32)
        bit = (words[positions // 32] >> (positions % 32)) & jnp.uint32(1)
        return (2 * bit.astype(dtype) - 1).reshape(shape)

    def gradient(self, problem, client, x, noise):
        f, g = problem.local_value_and_grad(client, x)
        m = self.magnitude(problem, client, x, f)
        return g + noise * m / jnp.sqrt(jnp.asarray(x.shape[-1], g.dtype))
