"""Compressors of a client's update, as message transforms, with the bits each sends.

Each counts the bits of the message it implies, exactly (statistic ``bits``), with every
value sent as a float of ``value_bits`` bits (32 by default) and every index of a d-vector
in ceil(log2 d) bits:

- unbiased (E C(v) = v, E ||C(v) - v||^2 <= omega ||v||^2, ``fa.theory.compressor_omega``):
  :class:`RandK`, :class:`QSGD`, :class:`Natural`;
- biased: :class:`TopK`, :class:`Sign` (both contractions, ``fa.theory.compressor_delta``);
- with memory kept as client state: :class:`ErrorFeedback`, :class:`EF21`;
- :class:`NoCompression`: the update as it is, for the bits of an uncompressed baseline.

A compressor's random words are the client's words of the round (stream 3), so ``mask``
and ``gather`` send the same messages.
"""

from __future__ import annotations

import abc
import math
from typing import Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from fedjax_abc._algorithms._checks import check_leaf
from fedjax_abc._algorithms._transforms import AbstractTransform
from fedjax_abc._problems._args import check_count
from fedjax_abc._problems._local_work import _unit_interval
from fedjax_abc._problems._oracles import AbstractOracle
from fedjax_abc._problems._samplers import UniformWithoutReplacement

__all__ = ["AbstractCompressor", "CompressedOracle", "EF21", "ErrorFeedback", "NoCompression",
           "Natural", "QSGD", "RandK", "Sign", "TopK", "index_bits"]


def index_bits(d: int) -> int:
    """ceil(log2 d): the bits of one index into a d-vector (0 for d = 1)."""
    return (int(d) - 1).bit_length()


def check_k(name: str, k: int, d: int) -> int:
    if k > d:
        raise ValueError(f"{name} keeps k={k} coordinates of a d={d} update: k must be <= d")
    return k


def _bits(value, like: Array) -> Array:
    return jnp.asarray(value, like.dtype)


class AbstractCompressor(AbstractTransform):
    """A stateless compressor C of one update: ``compress(words, v) -> (C(v), bits)``.

    ``apply`` sends C(Delta_i) and reports ``bits``; a subclass gives ``num_words``
    (default none) and ``compress``.
    """

    @abc.abstractmethod
    def compress(self, words: Array, v: Array) -> tuple[Array, Array]:
        """(C(v), the bits of the message) for one update v of shape (d,)."""

    def omega(self, d: int) -> Optional[float]:
        """The variance factor of an unbiased compressor on d-vectors, sup_v
        E ||C(v) - v||^2 / ||v||^2, in closed form; None where none is known or the
        compressor is biased (the default). ``fa.theory.compressor_omega`` reads it."""
        return None

    def delta(self, d: int) -> Optional[float]:
        """The contraction on d-vectors, ||C(v) - v||^2 <= (1 - delta) ||v||^2 (in
        expectation); by default 1 / (1 + omega), an unbiased compressor scaled by
        1 / (1 + omega), where omega is known, else None (``fa.theory.compressor_delta``)."""
        omega = self.omega(d)
        return None if omega is None else 1.0 / (1.0 + omega)

    def error(self, v: np.ndarray) -> Optional[float]:
        """E ||C(v) - v||^2 at the float64 vector v, exactly (over the compressor's
        randomness); None where no closed form is known (``fa.theory.compression_error``)."""
        return None

    def apply(self, words, update, state, info):
        sent, bits = self.compress(words, update)
        return sent, state, {"bits": _bits(bits, update)}


class NoCompression(AbstractCompressor):
    """C(v) = v: d values of ``value_bits`` bits (the baseline of a plot against bits).

    Example:
      >>> import jax.numpy as jnp, fedjax_abc as fa
      >>> fa.transforms.NoCompression().compress(None, jnp.ones(10))[1]
      320
    """

    value_bits: int = eqx.field(static=True, default=32)

    def __check_init__(self):
        check_count("value_bits", self.value_bits)

    def omega(self, d):
        return 0.0

    def delta(self, d):
        return 1.0

    def error(self, v):
        return 0.0

    def compress(self, words, v):
        return v, v.shape[-1] * self.value_bits


class RandK(AbstractCompressor):
    """Rand-k: k of the d coordinates uniformly without replacement, scaled by d / k.

    C(v)_j = (d / k) v_j for the k chosen j, else 0: unbiased with
    E ||C(v) - v||^2 = (d / k - 1) ||v||^2 (omega = d / k - 1). The k indices by Floyd's
    algorithm from k words. Bits: k (value_bits + ceil(log2 d)) (the values and their
    indices).

    Example:
      >>> import jax, jax.numpy as jnp, fedjax_abc as fa
      >>> c = fa.transforms.RandK(2)
      >>> w = jax.random.bits(jax.random.key(0), (c.num_words(4),), jnp.uint32)
      >>> v, bits = c.compress(w, jnp.arange(1.0, 5.0))
      >>> int(jnp.count_nonzero(v)), bits
      (2, 68)
    """

    k: int = eqx.field(static=True)
    value_bits: int = eqx.field(static=True, default=32)

    def __check_init__(self):
        check_count("RandK's k", self.k)
        check_count("value_bits", self.value_bits)

    def num_words(self, d):
        check_k("RandK", self.k, d)
        return UniformWithoutReplacement(self.k).num_words(d)

    def omega(self, d):
        return d / check_k("RandK", self.k, d) - 1.0

    def error(self, v):
        return self.omega(v.size) * float(v @ v)

    def compress(self, words, v):
        d = v.shape[-1]
        check_k("RandK", self.k, d)
        idx, _ = UniformWithoutReplacement(self.k).from_words(words, d)
        sent = jnp.zeros_like(v).at[idx].set(v[idx] * (d / self.k))
        return sent, self.k * (self.value_bits + index_bits(d))


class TopK(AbstractCompressor):
    """Top-k: the k coordinates of largest magnitude (ties to the lower index), unscaled.

    Biased; a contraction: ||C(v) - v||^2 <= (1 - k / d) ||v||^2. Bits:
    k (value_bits + ceil(log2 d)).

    Example:
      >>> import jax.numpy as jnp, fedjax_abc as fa
      >>> fa.transforms.TopK(2).compress(None, jnp.array([1.0, -4.0, 3.0, 2.0]))
      (Array([ 0., -4.,  3.,  0.], dtype=float64), 68)
    """

    k: int = eqx.field(static=True)
    value_bits: int = eqx.field(static=True, default=32)

    def __check_init__(self):
        check_count("TopK's k", self.k)
        check_count("value_bits", self.value_bits)

    def delta(self, d):
        return check_k("TopK", self.k, d) / d

    def error(self, v):
        keep = np.argsort(-np.abs(v), kind="stable")[:check_k("TopK", self.k, v.size)]
        rest = np.delete(v, keep)
        return float(rest @ rest)

    def compress(self, words, v):
        d = v.shape[-1]
        check_k("TopK", self.k, d)
        _, idx = jax.lax.top_k(jnp.abs(v), self.k)
        return jnp.zeros_like(v).at[idx].set(v[idx]), self.k * (self.value_bits + index_bits(d))


class Sign(AbstractCompressor):
    """Scaled sign: C(v) = (||v||_1 / d) sign(v) (Karimireddy et al. 2019's EF-SignSGD).

    Biased; ||C(v) - v||^2 = ||v||^2 - ||v||_1^2 / d <= (1 - 1/d) ||v||^2. Bits: one sign
    per coordinate and the scale, d + value_bits.

    Example:
      >>> import jax.numpy as jnp, fedjax_abc as fa
      >>> fa.transforms.Sign().compress(None, jnp.array([1.0, -3.0]))
      (Array([ 2., -2.], dtype=float64), 34)
    """

    value_bits: int = eqx.field(static=True, default=32)

    def __check_init__(self):
        check_count("value_bits", self.value_bits)

    def delta(self, d):
        return 1.0 / d

    def error(self, v):
        return float(v @ v) - float(np.sum(np.abs(v))) ** 2 / v.size

    def compress(self, words, v):
        d = v.shape[-1]
        return jnp.sum(jnp.abs(v)) / d * jnp.sign(v), d + self.value_bits


class QSGD(AbstractCompressor):
    """QSGD with s levels (Alistarh et al. 2017): stochastic rounding of |v_j| / ||v||.

    C(v)_j = ||v|| sign(v_j) xi_j / s, xi_j = l + 1 with probability s |v_j| / ||v|| - l
    (else l), l = floor(s |v_j| / ||v||): unbiased, with E ||C(v) - v||^2 =
    (||v|| / s)^2 sum_j p_j (1 - p_j) <= min(d / s^2, sqrt(d) / s) ||v||^2 (p_j the
    fractional parts). One word a coordinate. Bits, a fixed-length code: the norm
    (value_bits) and each signed level in {-s, ..., s} in ceil(log2(2 s + 1)) bits.

    Attributes:
      levels: s >= 1, an integer-valued array leaf (a new value compiles nothing new).

    Example:
      >>> import jax, jax.numpy as jnp, fedjax_abc as fa
      >>> q = fa.transforms.QSGD(4)
      >>> v, bits = q.compress(jax.random.bits(jax.random.key(0), (3,), jnp.uint32),
      ...                      jnp.array([3.0, 0.0, -4.0]))
      >>> v.tolist(), int(bits)  # s |v_j| / ||v|| = 2.4, 0, 3.2: levels 2 or 3, 0, 3 or 4
      ([2.5, 0.0, -3.75], 44)
    """

    levels: Float[Array, ""]
    value_bits: int = eqx.field(static=True, default=32)

    def __init__(self, levels, value_bits: int = 32):
        self.levels = jnp.asarray(check_count("QSGD's levels (s)", levels), float)
        self.value_bits = value_bits

    def __check_init__(self):
        check_leaf("QSGD's levels (s)", self.levels, 1.0, strict=False)
        s = np.asarray(self.levels) if not isinstance(self.levels, jax.core.Tracer) else None
        if s is not None and np.any(s != np.round(s)):
            raise ValueError(f"QSGD's levels (s) must be an integer, got {s.tolist()}")
        check_count("value_bits", self.value_bits)

    def num_words(self, d):
        return d

    def omega(self, d):
        s = float(self.levels)
        return min(d / s ** 2, math.sqrt(d) / s)

    def error(self, v):
        s, norm = float(self.levels), math.sqrt(float(v @ v))
        if norm == 0:
            return 0.0
        r = s * np.abs(v) / norm
        p = r - np.floor(r)
        return float((norm / s) ** 2 * np.sum(p * (1 - p)))

    def compress(self, words, v):
        s = self.levels.astype(v.dtype)
        norm = jnp.sqrt(jnp.sum(v * v))
        r = s * jnp.abs(v) / jnp.where(norm > 0, norm, 1)
        low = jnp.floor(r)
        up = _unit_interval(words[: v.shape[-1]]).astype(v.dtype) < r - low
        sent = norm * jnp.sign(v) * (low + up) / s
        # ceil(log2(2 s + 1)) = floor(log2 s) + 2 = e + 1 for an integer s = m 2^e >= 1,
        # m in [1/2, 1) (frexp is exact where a floating-point log2 need not be)
        level_bits = jnp.frexp(s)[1].astype(v.dtype) + 1
        return sent, self.value_bits + v.shape[-1] * level_bits


class Natural(AbstractCompressor):
    """Natural compression (Horvath et al. 2019): each |v_j| stochastically to a power of 2.

    For 2^a <= |v_j| < 2^(a+1): C(v)_j = sign(v_j) 2^(a+1) with probability
    (|v_j| - 2^a) / 2^a, else sign(v_j) 2^a; unbiased, E (C(v)_j - v_j)^2 =
    (2^(a+1) - |v_j|) (|v_j| - 2^a) <= v_j^2 / 8 (omega = 1/8). One word a coordinate.
    Bits: a sign and an 8-bit exponent per coordinate (float32's), 9 d.

    Example:
      >>> import jax, jax.numpy as jnp, fedjax_abc as fa
      >>> c = fa.transforms.Natural()
      >>> v, bits = c.compress(jax.random.bits(jax.random.key(0), (3,), jnp.uint32),
      ...                      jnp.array([4.0, -3.0, 0.0]))
      >>> v[0], jnp.abs(v[1]) in (2.0, 4.0), v[2], bits
      (Array(4., dtype=float64), True, Array(0., dtype=float64), 27)
    """

    def num_words(self, d):
        return d

    def omega(self, d):
        return 0.125

    def error(self, v):
        a = np.abs(v)
        _, e = np.frexp(a)
        low = np.ldexp(1.0, e - 1)
        return float(np.sum(np.where(a > 0, (2 * low - a) * (a - low), 0.0)))

    def compress(self, words, v):
        mag = jnp.abs(v)
        _, e = jnp.frexp(mag)  # mag = m 2^e, m in [1/2, 1)
        low = jnp.ldexp(jnp.ones_like(mag), e - 1)
        up = _unit_interval(words[: v.shape[-1]]).astype(v.dtype) < mag / low - 1
        return jnp.sign(v) * low * (1 + up), 9 * v.shape[-1]


def _inner(name: str, inner) -> AbstractTransform:
    """``inner`` if it is a compressor (its memory is what the compressor left out: a clip
    or noise has no such meaning)."""
    if not isinstance(inner, AbstractCompressor):
        raise ValueError(f"{name} wraps a fedjax_abc.transforms compressor (TopK, RandK, QSGD, "
                         f"...), got {type(inner).__name__}")
    return inner


class _AbstractMemory(AbstractTransform):
    """A compressor with a vector of memory per client (client state, 0 at t = 0)."""

    inner: AbstractTransform

    def __init__(self, inner):
        self.inner = _inner(type(self).__name__, inner)

    def init(self, x):
        return jnp.zeros_like(x), self.inner.init(x)

    def num_words(self, d):
        return self.inner.num_words(d)


class ErrorFeedback(_AbstractMemory):
    """Error feedback (Seide et al. 2014; Karimireddy et al. 2019) around a compressor.

    Client memory e_i (client state, e_i = 0 at t = 0): the client sends
    c_i = C(Delta_i + e_i) and keeps e_i <- Delta_i + e_i - c_i; only participants update
    their memory. Stats and words: the compressor's.

    Example:
      >>> import jax.numpy as jnp, fedjax_abc as fa
      >>> ef = fa.transforms.ErrorFeedback(fa.transforms.TopK(1))
      >>> state = ef.init(jnp.zeros(2))
      >>> sent, state, _ = ef.apply(None, jnp.array([2.0, 1.0]), state, fa.transforms.no_info())
      >>> sent, state[0]
      (Array([2., 0.], dtype=float64), Array([0., 1.], dtype=float64))
    """

    def apply(self, words, update, state, info):
        memory, inner_state = state
        corrected = update + memory
        sent, inner_state, stats = self.inner.apply(words, corrected, inner_state, info)
        return sent, (corrected - sent, inner_state), stats


class EF21(_AbstractMemory):
    """EF21 (Richtarik et al. 2021) around a compressor: compressed differences.

    Client state g_i (g_i = 0 at t = 0): the client sends c_i = C(Delta_i - g_i) and both
    sides move g_i <- g_i + c_i; the update the server averages is the new g_i (which it
    rebuilds from c_i and its copy of g_i). Only participants update g_i. Stats and
    words: the compressor's.

    Example:
      >>> import jax.numpy as jnp, fedjax_abc as fa
      >>> ef = fa.transforms.EF21(fa.transforms.TopK(1))
      >>> g, state, _ = ef.apply(None, jnp.array([2.0, 1.0]), ef.init(jnp.zeros(2)),
      ...                        fa.transforms.no_info())
      >>> g  # g = 0 + TopK([2, 1])
      Array([2., 0.], dtype=float64)
    """

    def apply(self, words, update, state, info):
        g, inner_state = state
        sent, inner_state, stats = self.inner.apply(words, update - g, inner_state, info)
        g = g + sent
        return g, (g, inner_state), stats


class CompressedOracle(AbstractOracle):
    """g_i(x; xi) compressed: C(g) of an inner oracle's estimate g, one draw of C a step.

    For the theory of compressed gradients: with an unbiased C (omega) and an inner oracle
    with ABC constants (C, D) (eq. 8), var C(g) = E ||C(g) - g||^2 + var g <=
    omega ||grad f_i||^2 + (1 + omega) var g, so the compressed oracle has constants
    ((1 + omega) C + 2 L omega, (1 + omega) D) on an L-smooth problem
    (``fa.theory.compressed_abc``).
    """

    inner: AbstractOracle
    compressor: AbstractCompressor

    def __init__(self, inner, compressor):
        if not isinstance(inner, AbstractOracle):
            raise ValueError(f"CompressedOracle's inner must be an oracle, got "
                             f"{type(inner).__name__}")
        if not isinstance(compressor, AbstractCompressor):
            raise ValueError("CompressedOracle's compressor must be a stateless compressor "
                             f"(fedjax_abc.transforms), got {type(compressor).__name__}")
        self.inner, self.compressor = inner, compressor

    def validate(self, problem):
        self.inner.validate(problem)

    def _split(self, shape) -> tuple[int, int]:
        return self.inner.num_words(shape), shape[0] * self.compressor.num_words(shape[-1])

    def num_words(self, shape):
        return sum(self._split(shape))

    def noise(self, key, shape, dtype):
        k1, k2 = jax.random.split(key)
        words = jax.random.bits(k2, (shape[0], self.compressor.num_words(shape[-1])),
                                jnp.uint32)
        return self.inner.noise(k1, shape, dtype), words

    def noise_from_words(self, words, shape, dtype):
        a, b = self._split(shape)
        return (self.inner.noise_from_words(words[:a], shape, dtype),
                words[a:a + b].reshape(shape[0], -1))

    def step_noise(self, noise, step, shape, dtype):
        return self.inner.step_noise(noise[0], step, shape, dtype), noise[1][step]

    def gradient(self, problem, client, x, noise):
        g = self.inner.gradient(problem, client, x, noise[0])
        return self.compressor.compress(noise[1], g)[0]

