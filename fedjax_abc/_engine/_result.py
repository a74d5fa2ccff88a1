"""Typed results of :func:`fedjax_abc.simulate` and their reductions over trials."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Optional

import numpy as np

__all__ = ["SimResult", "Summary", "summarize"]

Z95 = 1.959963984540054  # standard normal 97.5% quantile


class Summary(NamedTuple):
    """Mean over trials with its standard error and a normal 95% interval.

    Every field has the shape of the summarised quantity without its trials axis.
    ``ci_low, ci_high = mean -/+ 1.96 stderr`` (normal approximation, stderr = sample standard
    deviation / sqrt(trials); stderr is NaN for a single trial).
    """

    mean: np.ndarray
    stderr: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray

    @property
    def ci95(self) -> np.ndarray:
        """Half width of the 95% interval, 1.96 stderr."""
        return Z95 * self.stderr


def summarize(values, axis: int = 0) -> Summary:
    """:class:`Summary` of ``values`` over ``axis`` (the trials axis by default)."""
    values = np.asarray(values, dtype=float)
    m = values.shape[axis]
    mean = values.mean(axis=axis)
    if m > 1:
        se = values.std(axis=axis, ddof=1) / np.sqrt(m)
    else:
        se = np.full_like(mean, np.nan)
    return Summary(mean, se, mean - Z95 * se, mean + Z95 * se)


@dataclasses.dataclass(frozen=True)
class SimResult:
    """What :func:`fedjax_abc.simulate` returns (NumPy arrays on the host).

    Attributes:
      rounds: Int[ndarray, "records"], the recorded rounds t = 0, k, 2k, ..., T.
      gap: Float[ndarray, "trials records"], f(x_t) - f*.
      grad_norm_sq: Float[ndarray, "trials records"], ||grad f(x_t)||^2.
      x: Float[ndarray, "trials records d"] or None (``record_x=False``), the iterates x_t.
      x_final: Float[ndarray, "trials d"], x_T.
      config: every parameter of the run, the seed key's data, dtype, versions and devices.
    """

    rounds: np.ndarray
    gap: np.ndarray
    grad_norm_sq: np.ndarray
    x: Optional[np.ndarray]
    x_final: np.ndarray
    config: dict[str, Any]

    @property
    def trials(self) -> int:
        return int(self.gap.shape[0])

    def summary(self, name: str = "gap") -> Summary:
        """:class:`Summary` over trials of ``gap``, ``grad_norm_sq`` or ``x``, per record."""
        return summarize(self._field(name), axis=0)

    def final(self, name: str = "gap") -> Summary:
        """:class:`Summary` over trials of the last record (t = T) of a field."""
        value = self._field(name)
        return summarize(value if name == "x_final" else value[:, -1], axis=0)

    def _field(self, name):
        if name not in ("gap", "grad_norm_sq", "x", "x_final"):
            raise ValueError(f"name ({name!r}) must be one of 'gap', 'grad_norm_sq', 'x', 'x_final'")
        value = getattr(self, name)
        if value is None:
            raise ValueError(f"{name} was not recorded (record_x=False)")
        return value
