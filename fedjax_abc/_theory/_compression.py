"""The compressors' constants in closed form, and the ABC constants of a compressed oracle.

- :func:`compressor_omega`: the variance factor omega of an unbiased compressor,
  E ||C(v) - v||^2 <= omega ||v||^2 for every v (RandK d/k - 1, QSGD min(d/s^2, sqrt(d)/s),
  Natural 1/8);
- :func:`compressor_delta`: the contraction of a biased one,
  ||C(v) - v||^2 <= (1 - delta) ||v||^2 (TopK k/d, Sign 1/d);
- :func:`compression_error`: E ||C(v) - v||^2 at a given v, exactly;
- :func:`compressed_abc`: the constants (eq. 8) of g -> C(g) from those of g.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from fedjax_abc._algorithms._compress import (NoCompression, Natural, QSGD, RandK, Sign,
                                              TopK, check_k)
from fedjax_abc._problems._args import check_count

__all__ = ["CompressedABC", "compressed_abc", "compression_error", "compressor_delta",
           "compressor_omega"]


def _dim(d) -> int:
    return check_count("d (the dimension)", d)


def _k(c, d: int) -> int:
    return check_k(type(c).__name__, c.k, d)


def compressor_omega(compressor, d: int) -> float:
    """omega of an unbiased compressor on d-vectors: sup_v E ||C(v) - v||^2 / ||v||^2.

    RandK(k): d/k - 1 (attained by every v); QSGD(s): min(d/s^2, sqrt(d)/s) (Alistarh et
    al. 2017, Lemma 3.1); Natural: 1/8 (Horvath et al. 2019); NoCompression: 0.

    Example:
      >>> import fedjax_abc as fa
      >>> fa.theory.compressor_omega(fa.transforms.RandK(5), 20)
      3.0
    """
    d = _dim(d)
    c = compressor
    if isinstance(c, NoCompression):
        return 0.0
    if isinstance(c, RandK):
        return d / _k(c, d) - 1.0
    if isinstance(c, QSGD):
        s = float(c.levels)
        return min(d / s ** 2, math.sqrt(d) / s)
    if isinstance(c, Natural):
        return 0.125
    if isinstance(c, (TopK, Sign)):
        raise ValueError(f"{type(c).__name__} is biased: it has no variance factor omega; "
                         "see compressor_delta")
    raise ValueError(f"no closed-form omega for {type(c).__name__}")


def compressor_delta(compressor, d: int) -> float:
    """delta of a contraction on d-vectors: ||C(v) - v||^2 <= (1 - delta) ||v||^2.

    TopK(k): k/d; Sign (scaled): 1/d (||v||_1^2 >= ||v||^2); an unbiased compressor
    scaled by 1/(1 + omega) is a contraction with delta = 1/(1 + omega), returned for
    RandK, QSGD and Natural (in expectation); NoCompression: 1.

    Example:
      >>> import fedjax_abc as fa
      >>> fa.theory.compressor_delta(fa.transforms.TopK(5), 20)
      0.25
    """
    d = _dim(d)
    c = compressor
    if isinstance(c, TopK):
        return _k(c, d) / d
    if isinstance(c, Sign):
        return 1.0 / d
    if isinstance(c, NoCompression):
        return 1.0
    return 1.0 / (1.0 + compressor_omega(c, d))


def compression_error(compressor, v) -> float:
    """E ||C(v) - v||^2 at the vector v, exactly (over the compressor's randomness).

    RandK: (d/k - 1) ||v||^2; QSGD: (||v|| / s)^2 sum_j p_j (1 - p_j), p_j the fractional
    part of s |v_j| / ||v||; Natural: sum_j (2^(a_j+1) - |v_j|) (|v_j| - 2^a_j) with
    2^a_j <= |v_j| < 2^(a_j+1); TopK, Sign: ||C(v) - v||^2 (deterministic).

    Example:
      >>> import fedjax_abc as fa
      >>> fa.theory.compression_error(fa.transforms.Natural(), [3.0, 4.0])  # (4-3)(3-2) + 0
      1.0
    """
    v = np.asarray(v, dtype=np.float64)
    if v.ndim != 1 or v.size == 0:
        raise ValueError(f"v must be a non-empty vector, got shape {v.shape}")
    d = v.size
    c = compressor
    sq = float(v @ v)
    if isinstance(c, NoCompression):
        return 0.0
    if isinstance(c, RandK):
        return (d / _k(c, d) - 1.0) * sq
    if isinstance(c, QSGD):
        s = float(c.levels)
        norm = math.sqrt(sq)
        if norm == 0:
            return 0.0
        r = s * np.abs(v) / norm
        p = r - np.floor(r)
        return float((norm / s) ** 2 * np.sum(p * (1 - p)))
    if isinstance(c, Natural):
        a = np.abs(v)
        _, e = np.frexp(a)
        low = np.ldexp(1.0, e - 1)
        return float(np.sum(np.where(a > 0, (2 * low - a) * (a - low), 0.0)))
    if isinstance(c, TopK):
        k = _k(c, d)
        keep = np.argsort(-np.abs(v), kind="stable")[:k]
        rest = np.delete(v, keep)
        return float(rest @ rest)
    if isinstance(c, Sign):
        return sq - float(np.sum(np.abs(v))) ** 2 / d
    raise ValueError(f"no closed form of E||C(v) - v||^2 for {type(c).__name__}")


class CompressedABC(NamedTuple):
    """The ABC constants (eq. 8: var <= C (f_i - f_i*) + D) of g -> C(g).

    Attributes:
      C, D: (1 + omega) C_g + 2 L omega and (1 + omega) D_g.
      omega: the compressor's variance factor.
    """

    C: float
    D: float
    omega: float


def compressed_abc(C: float, D: float, omega: float, L: float) -> CompressedABC:
    """The constants of an oracle's compressed estimates, from the oracle's (C, D).

    With E[C(g) | g] = g: var C(g) = E ||C(g) - g||^2 + var g <= omega E ||g||^2 + var g
    = omega ||grad f_i||^2 + (1 + omega) var g, and ||grad f_i||^2 <= 2 L (f_i - f_i*) for
    an L-smooth f_i: C' = (1 + omega) C + 2 L omega, D' = (1 + omega) D.

    Example:
      >>> import fedjax_abc as fa
      >>> fa.theory.compressed_abc(1.0, 0.5, omega=0.125, L=1.0)
      CompressedABC(C=1.375, D=0.5625, omega=0.125)
    """
    for name, value in (("C", C), ("D", D), ("omega", omega), ("L", L)):
        if not np.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {value}")
    return CompressedABC((1 + omega) * C + 2 * L * omega, (1 + omega) * D, float(omega))
