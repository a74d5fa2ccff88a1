"""The compressors' constants in closed form, and the ABC constants of a compressed oracle.

Each compressor gives its own constants (its ``omega``, ``delta`` and ``error`` methods,
None where it knows none); the functions here check the arguments and read them, so that
a compressor of your own gets them by defining the methods.

- :func:`compressor_omega`: the variance factor omega of an unbiased compressor,
  E ||C(v) - v||^2 <= omega ||v||^2 for every v (RandK d/k - 1, QSGD min(d/s^2, sqrt(d)/s),
  Natural 1/8);
- :func:`compressor_delta`: the contraction of a biased one,
  ||C(v) - v||^2 <= (1 - delta) ||v||^2 (TopK k/d, Sign 1/d);
- :func:`compression_error`: E ||C(v) - v||^2 at a given v, exactly;
- :func:`compressed_abc`: the constants (eq. 8) of g -> C(g) from those of g.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fedjax_abc._algorithms._compress import AbstractCompressor
from fedjax_abc._problems._args import check_count

__all__ = ["CompressedABC", "compressed_abc", "compression_error", "compressor_delta",
           "compressor_omega"]


def _dim(d) -> int:
    return check_count("d (the dimension)", d)


def _compressor(c) -> AbstractCompressor:
    if not isinstance(c, AbstractCompressor):
        raise ValueError(f"compressor must be a fedjax_abc.transforms compressor, got "
                         f"{type(c).__name__}")
    return c


def compressor_omega(compressor, d: int) -> float:
    """omega of an unbiased compressor on d-vectors: sup_v E ||C(v) - v||^2 / ||v||^2, as
    the compressor gives it (its ``omega``; a compressor of your own by defining it).

    RandK(k): d/k - 1 (attained by every v); QSGD(s): min(d/s^2, sqrt(d)/s) (Alistarh et
    al. 2017, Lemma 3.1); Natural: 1/8 (Horvath et al. 2019); NoCompression: 0.

    Example:
      >>> import fedjax_abc as fa
      >>> fa.theory.compressor_omega(fa.transforms.RandK(5), 20)
      3.0
    """
    d, c = _dim(d), _compressor(compressor)
    omega = c.omega(d)
    if omega is not None:
        return float(omega)
    if c.delta(d) is not None:
        raise ValueError(f"{type(c).__name__} is biased: it has no variance factor omega; "
                         "see compressor_delta")
    raise ValueError(f"no closed-form omega for {type(c).__name__} (a compressor gives one "
                     "through its omega method)")


def compressor_delta(compressor, d: int) -> float:
    """delta of a contraction on d-vectors: ||C(v) - v||^2 <= (1 - delta) ||v||^2, as the
    compressor gives it (its ``delta``).

    TopK(k): k/d; Sign (scaled): 1/d (||v||_1^2 >= ||v||^2); an unbiased compressor
    scaled by 1/(1 + omega) is a contraction with delta = 1/(1 + omega), returned for
    RandK, QSGD and Natural (in expectation); NoCompression: 1.

    Example:
      >>> import fedjax_abc as fa
      >>> fa.theory.compressor_delta(fa.transforms.TopK(5), 20)
      0.25
    """
    d, c = _dim(d), _compressor(compressor)
    delta = c.delta(d)
    if delta is None:
        raise ValueError(f"no closed-form delta for {type(c).__name__} (a compressor gives "
                         "one through its delta or omega method)")
    return float(delta)


def compression_error(compressor, v) -> float:
    """E ||C(v) - v||^2 at the vector v, exactly (over the compressor's randomness), as the
    compressor gives it (its ``error``).

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
    c = _compressor(compressor)
    error = c.error(v)
    if error is None:
        raise ValueError(f"no closed form of E||C(v) - v||^2 for {type(c).__name__} (a "
                         "compressor gives one through its error method)")
    return float(error)


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
