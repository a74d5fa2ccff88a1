"""Stochastic gradient oracles g_i(x; xi) satisfying the ABC condition (eq. 4 / eq. 8).

An oracle draws all the noise one client needs for its Q local steps of one round in one
call (``noise``), then turns one step's noise into a gradient estimate (``gradient``). This
split keeps randomness explicit: the simulator derives the randomness of client i in round t
from the trial key, the round and i alone, so a client's noise does not depend on which
other clients were sampled.

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
import numpy as np
from jaxtyping import Array, Float

__all__ = [
    "AbstractOracle",
    "ExactOracle",
    "GaussianOracle",
    "RademacherOracle",
    "normals_from_words",
    "objective_gap_magnitude",
    "signs_from_words",
]


class AbstractOracle(eqx.Module):
    """Unbiased stochastic gradient oracle of one client (Assumption 2).

    Subclasses implement ``noise`` (draw with a JAX key) and ``gradient``. The simulator
    calls ``noise_from_words`` with fresh counter-based random words of the client and
    round; by default it turns two words into a key and calls ``noise``. Built-in oracles
    override ``num_words``/``noise_from_words`` to use the words directly (faster).
    """

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

    def validate(self, problem) -> None:
        """Raises ValueError when the oracle does not fit ``problem`` (default: it fits any)."""

    def num_words(self, shape: tuple[int, ...]) -> int:
        """How many uint32 random words ``noise_from_words`` needs for noise of ``shape``."""
        return 2

    def noise_from_words(self, words: Array, shape: tuple[int, ...], dtype) -> Any:
        """The noise of one client's round from ``num_words(shape)`` random uint32 words."""
        return self.noise(jax.random.wrap_key_data(words[:2]), shape, dtype)

    def steps_per_evaluation(self, problem) -> Optional[float]:
        """How many of this oracle's steps cost as much as one evaluation of f and grad f
        over all the data (what a run's record computes), where the oracle knows; None
        (the default) where it does not. A learning run's default records are spaced by it
        (``simulate``'s ``record_every``)."""
        return None

    def variance(self, problem, i: Array, x: Array) -> Array:
        """E||g_i(x; xi) - grad f_i(x)||^2 of client i at x in closed form (a scalar).

        An oracle that knows it overrides this (``fa.theory.oracle_variance`` then gives it
        exactly; :func:`has_exact_variance`); the default raises NotImplementedError, and the
        theory estimates the variance by Monte Carlo.
        """
        raise NotImplementedError(f"{type(self).__name__} has no closed-form variance")

    def step_noise(self, noise, step: Array, shape: tuple[int, ...], dtype) -> Any:
        """Local step ``step``'s part of a round's noise (default: slice the leading axis).

        An oracle may keep its round noise packed (as random words, say) and unpack one
        step at a time here; the simulator only ever passes what ``noise``/``noise_from_words``
        returned.
        """
        return jax.tree_util.tree_map(lambda a: a[step], noise)


def has_exact_variance(oracle: AbstractOracle) -> bool:
    """Whether the oracle's class gives its variance in closed form (overrides
    :meth:`AbstractOracle.variance`)."""
    return type(oracle).variance is not AbstractOracle.variance


def _size(shape) -> int:
    count = 1
    for s in shape:
        count *= int(s)
    return count


def signs_from_words(words: Array, count: int, dtype) -> Array:
    """``count`` independent fair signs (+1/-1) from the bits of uint32 ``words`` (32 each)."""
    shifts = jnp.arange(32, dtype=jnp.uint32)
    bits = (words[:, None] >> shifts[None, :]) & jnp.uint32(1)
    return 2 * bits.reshape(-1)[:count].astype(dtype) - 1


_HALF = np.uint32(0x80000000)
_BELOW_2_32 = np.float32(2.0 ** 32 - 2.0 ** 8)  # the largest float32 below 2^32
_2_NEG_32 = np.float32(2.0 ** -32)


def _centred_uniform_float32(words: Array) -> Array:
    """u = (w + 1/2) / 2^31 - 1 rounded to float32, |u| clamped to 1 - 2^-24 (< 1).

    |u| 2^32 = |2 w + 1 - 2^32| is an odd integer below 2^32, formed in uint32 and rounded
    once to float32: the same float32 as rounding the exact u, without float64 arithmetic
    (so also with ``jax_enable_x64`` off). The 128 words whose u rounds to +-1 (where
    erfinv is infinite) get +-(1 - 2^-24) instead.
    """
    top = words >= _HALF
    twice = words << np.uint32(1)
    odd = jnp.where(top, twice | np.uint32(1), ~twice)  # |2 w + 1 - 2^32|
    mag = jnp.minimum(odd.astype(jnp.float32), _BELOW_2_32) * _2_NEG_32
    return jnp.where(top, mag, -mag)


def normals_from_words(words: Array, count: int, dtype) -> Array:
    """``count`` standard normals, one per uint32 word, by the inverse error function.

    u = (w + 1/2) / 2^31 - 1 lies strictly inside (-1, 1) and z = sqrt(2) erfinv(u); the
    32-bit resolution cuts the tails at |z| ~ 6.2, far beyond what a Monte Carlo run of
    practical length can see. In float64, u is exact. In other dtypes u is computed in
    float32 and kept at most 1 - 2^-24 in magnitude (float32 would round the outermost
    words to +-1 and erfinv to +-inf), so |z| <= 5.42 and every word gives a finite normal.

    Args:
      words: uint32 random words, at least ``count``.
      count: how many normals.
      dtype: floating dtype of the result.

    Returns:
      Shape (count,) array of ``dtype``.
    """
    if jnp.dtype(dtype) == jnp.float64:
        u = (words[:count].astype(jnp.float64) + 0.5) / 2147483648.0 - 1.0
        return (jnp.sqrt(2.0) * jax.lax.erf_inv(u.astype(dtype))).astype(dtype)
    u = _centred_uniform_float32(words[:count].astype(jnp.uint32))
    return (jnp.sqrt(2.0) * jax.lax.erf_inv(u)).astype(dtype)


class ExactOracle(AbstractOracle):
    """Noise-free oracle g_i(x) = grad f_i(x) (C = D = 0)."""

    def noise(self, key, shape, dtype):
        return jnp.zeros(shape[:1], dtype)

    def num_words(self, shape):
        return 0

    def noise_from_words(self, words, shape, dtype):
        return jnp.zeros(shape[:1], dtype)

    def gradient(self, problem, client, x, noise):
        return problem.local_grad(client, x)

    def variance(self, problem, i, x):
        return jnp.zeros((), x.dtype)


def _check_constants(C, D) -> None:
    """GaussianOracle's C and D: finite numbers >= 0 (ValueError naming both)."""
    from fedjax_abc._problems._args import check_real

    try:
        check_real("C", C, low=0.0)
        check_real("D", D, low=0.0)
    except ValueError as err:
        raise ValueError(f"GaussianOracle needs C >= 0 and D >= 0, got C={C!r}, D={D!r} "
                         f"({err})") from None


class GaussianOracle(AbstractOracle):
    """g_i(x) = grad f_i(x) + z sqrt((C (f_i(x) - f_i*) + D) / d), z ~ N(0, I_d).

    Its variance E||g - grad f_i||^2 equals C (f_i(x) - f_i*) + D: the ABC bound (4) with
    equality.
    """

    C: Float[Array, ""]
    D: Float[Array, ""]

    def __init__(self, C=1.0, D=0.0):
        _check_constants(C, D)
        self.C = jnp.asarray(C, float)
        self.D = jnp.asarray(D, float)

    def __check_init__(self):  # also for a value put in by eqx.tree_at (a sweep's axis)
        if not any(isinstance(v, jax.core.Tracer) for v in (self.C, self.D)):
            _check_constants(float(self.C), float(self.D))

    def noise(self, key, shape, dtype):
        return jax.random.normal(key, shape, dtype)

    def num_words(self, shape):
        return _size(shape)

    def noise_from_words(self, words, shape, dtype):
        return normals_from_words(words, _size(shape), dtype).reshape(shape)

    def gradient(self, problem, client, x, noise):
        f, g = problem.local_value_and_grad(client, x)
        var = self.C * nonnegative(like_model(f, x) - client.local_min) + self.D
        return g + noise * jnp.sqrt(var / x.shape[-1])

    def variance(self, problem, i, x):
        client = problem.client(i)
        return self.C * jnp.maximum(problem.local_value(client, x) - client.local_min, 0) + \
            self.D


class _PackedSigns(eqx.Module):
    """A round's Rademacher signs kept as random words (32 signs a word) until used."""

    words: Array


def nonnegative(a: Array) -> Array:
    """``a`` with its negative entries (rounding below a minimum) set to 0; NaN stays NaN.

    ``jnp.maximum(a, 0)`` up to the sign of a zero, in one comparison and one select on a
    CPU, where ``maximum`` also tests for NaN: 3% of a local step of problem (27).
    """
    return jnp.where(a < 0, jnp.zeros((), a.dtype), a)


def like_model(value: Array, x: Array) -> Array:
    """A client's number ``value`` (f_i(x), say) in the shape of x when x has one entry.

    XLA updates a local step's model in place only if every use of it keeps its shape. The
    value f_i(x) sums over the model's entries; for d = 1 the sum is a reshape, and put
    back in x's shape the whole step stays elementwise, so the loop needs no copy of the
    models at every step (a tenth of a local step of problem (27)). Larger models keep the
    scalar, which a broadcast would recompute d times.
    """
    return jnp.broadcast_to(value, x.shape) if x.size == 1 else value


def objective_gap_magnitude(problem, client, x, value):
    """sqrt(f_i(x) - f_i*): the magnitude of the oracle of problem (27)."""
    return jnp.sqrt(nonnegative(value - client.local_min))


class RademacherOracle(AbstractOracle):
    """g_i(x; eps) = grad f_i(x) + eps m_i(x) / sqrt(d), eps uniform on {-1, +1}^d.

    Unbiased with variance m_i(x)^2. With the default magnitude m_i = sqrt(f_i - f_i*) this
    is the oracle of Section IV-B (variance f_i - f_i*, so C = 1, D = 0); the oracle (26)
    of Section IV-A uses another magnitude (see ``problems.softplus_huber``).

    In a simulation the signs come from raw random bits, 32 per uint32 word, so one round
    of one client costs one counter-based hash.

    Attributes:
      magnitude: static ``magnitude(problem, client, x, f_i(x)) -> m_i(x)``.
    """

    magnitude: Callable = eqx.field(static=True, default=objective_gap_magnitude)

    def __check_init__(self):
        if not callable(self.magnitude):
            raise ValueError("RademacherOracle's magnitude must be a function "
                             f"(problem, client, x, f_i(x)) -> m_i(x), got {self.magnitude!r}")

    def noise(self, key, shape, dtype):
        return jax.random.rademacher(key, shape, dtype)

    def num_words(self, shape):
        return (_size(shape) + 31) // 32

    def noise_from_words(self, words, shape, dtype):
        return _PackedSigns(words)

    def step_noise(self, noise, step, shape, dtype):
        if isinstance(noise, _PackedSigns):  # unpack this step's d signs from the words
            d = _size(shape[1:])
            pos = (step * d + jnp.arange(d)).astype(jnp.uint32)
            if noise.words.shape[0] == 1:  # Q d <= 32: every sign is in one word
                bits = (noise.words[0] >> pos) & jnp.uint32(1)
            else:
                bits = (noise.words[pos // 32] >> (pos % 32)) & jnp.uint32(1)
            return (2 * bits.astype(dtype) - 1).reshape(shape[1:])
        return noise[step]

    def gradient(self, problem, client, x, noise):
        f, g = problem.local_value_and_grad(client, x)
        if self.magnitude is objective_gap_magnitude:  # elementwise in f: in x's shape (d = 1)
            f = like_model(f, x)
        m = self.magnitude(problem, client, x, f)
        return g + noise * m / jnp.sqrt(jnp.asarray(x.shape[-1], g.dtype))

    def variance(self, problem, i, x):
        client = problem.client(i)
        return self.magnitude(problem, client, x, problem.local_value(client, x)) ** 2
