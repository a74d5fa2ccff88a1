"""Plain-array descriptions of the benchmarked problems, shared by the baselines.

Each is a frozen dataclass of NumPy arrays; the baselines implement the objectives and the
oracles themselves, from the paper, without importing ``fedjax_abc``:

- :class:`HuberOffsets`: problem (27), f_i(x) = sum_j Huber(x_j - d_ij), oracle
  g_i = grad f_i + eps sqrt(f_i - f_i*) / sqrt(d), eps uniform on {-1, +1}^d (f_i* = 0).
  For d = 1 this is the oracle of Section IV-B (variance f_i - f_i*).
- :class:`SoftplusHuber`: problem (25) with oracle (26), Section IV-A: client 1 is Huber(x)
  with magnitude sqrt(|x|), clients i >= 2 are ln(1 + e^{x - i + 1}) with magnitude
  sqrt(f_i(x)); the sign is +/- 1 with probability 1/2.
- :class:`Quadratics`: f_i(x) = 1/2 sum_j a_ij (x_j - c_ij)^2 with Gaussian noise
  z sqrt((C (f_i - f_i*) + D) / d), z ~ N(0, I_d): total variance C (f_i - f_i*) + D.
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["HuberOffsets", "Quadratics", "SoftplusHuber"]


@dataclasses.dataclass(frozen=True)
class HuberOffsets:
    """Problem (27). ``offsets``: d_i, shape (n, d)."""

    offsets: np.ndarray
    kind = "huber27"

    def __post_init__(self):
        off = np.asarray(self.offsets, dtype=np.float64)
        if off.ndim == 1:
            off = off[:, None]
        object.__setattr__(self, "offsets", off)

    @property
    def num_clients(self) -> int:
        return self.offsets.shape[0]

    @property
    def dim(self) -> int:
        return self.offsets.shape[1]


@dataclasses.dataclass(frozen=True)
class SoftplusHuber:
    """Problem (25) with oracle (26); d = 1. Client 1 (index 0) is the Huber client."""

    n: int = 16
    kind = "softplus_huber"

    @property
    def shifts(self) -> np.ndarray:
        """i - 1 for client i (1-based), shape (n, 1)."""
        return np.arange(self.n, dtype=np.float64)[:, None]

    @property
    def is_huber(self) -> np.ndarray:
        """True for client 1, shape (n, 1)."""
        h = np.zeros((self.n, 1), dtype=bool)
        h[0] = True
        return h

    @property
    def num_clients(self) -> int:
        return self.n

    @property
    def dim(self) -> int:
        return 1


@dataclasses.dataclass(frozen=True)
class Quadratics:
    """Diagonal quadratics with curvatures ``a`` and centres ``c``, both (n, d)."""

    a: np.ndarray
    c: np.ndarray
    C: float = 1.0
    D: float = 0.1
    kind = "quadratics"

    def __post_init__(self):
        object.__setattr__(self, "a", np.asarray(self.a, dtype=np.float64))
        object.__setattr__(self, "c", np.asarray(self.c, dtype=np.float64))
        if self.a.shape != self.c.shape or self.a.ndim != 2:
            raise ValueError(f"a and c must both be (n, d), got {self.a.shape} and {self.c.shape}")

    @property
    def num_clients(self) -> int:
        return self.a.shape[0]

    @property
    def dim(self) -> int:
        return self.a.shape[1]
