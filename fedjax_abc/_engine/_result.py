"""Typed results of :func:`fedjax_abc.simulate` and their reductions over trials."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Optional

import numpy as np

__all__ = ["DivergenceWarning", "SimResult", "Summary", "divergence_rounds", "summarize"]

Z95 = 1.959963984540054  # standard normal 97.5% quantile

DIVERGED = ("exclude", "raise")


class DivergenceWarning(RuntimeWarning):
    """Some trials of a run became non-finite; see :attr:`SimResult.diverged_at`."""


class Summary(NamedTuple):
    """Mean over trials with its standard error and a normal 95% interval.

    Every field but ``excluded`` has the shape of the summarised quantity without its trials
    axis. ``ci_low, ci_high = mean -/+ 1.96 stderr`` (normal approximation, stderr = sample
    standard deviation / sqrt(trials); stderr is NaN for a single trial). ``excluded``: how
    many diverged trials were left out (:meth:`SimResult.summary`); 0 from :func:`summarize`.
    """

    mean: np.ndarray
    stderr: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    excluded: int = 0

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


def divergence_rounds(rounds, gap, grad_norm_sq, x, x_final) -> np.ndarray:
    """Per trial, the first recorded round with a non-finite gap, grad_norm_sq or x; -1 if none.

    Args:
      rounds: (records,), the recorded rounds.
      gap, grad_norm_sq: (trials, records).
      x: (trials, records, d) or None.
      x_final: (trials, d), x_T: a non-finite x_T counts at the last record, t = T.

    Returns:
      Int[ndarray, "trials"].
    """
    bad = ~(np.isfinite(gap) & np.isfinite(grad_norm_sq))
    if x is not None:
        bad |= ~np.isfinite(x).all(axis=2)
    bad[:, -1] |= ~np.isfinite(x_final).all(axis=1)
    first = np.argmax(bad, axis=1)
    return np.where(bad.any(axis=1), np.asarray(rounds)[first], -1).astype(np.int64)


@dataclasses.dataclass(frozen=True)
class SimResult:
    """What :func:`fedjax_abc.simulate` returns (NumPy arrays on the host).

    A trial whose iterate or records become non-finite (a stepsize too large, say) has
    *diverged*: it is counted in ``diverged_at`` and left out of :meth:`summary` and
    :meth:`final` (which say how many they left out), never averaged into a NaN.

    Attributes:
      rounds: Int[ndarray, "records"], the recorded rounds t = 0, k, 2k, ..., T (the last
        interval shorter where k does not divide T).
      gap: Float[ndarray, "trials records"], f(x_t) - f*.
      grad_norm_sq: Float[ndarray, "trials records"], ||grad f(x_t)||^2.
      x: Float[ndarray, "trials records d"] or None (``record_x=False``), the iterates x_t.
      x_final: Float[ndarray, "trials d"], x_T.
      config: every parameter of the run, the seed key's data, dtype, versions and devices.
      diverged_at: Int[ndarray, "trials"], the first recorded round t at which the trial's
        gap, grad_norm_sq or x (x_final at t = T) is not finite; -1 if it never is.
        Computed from the arrays when not given.
    """

    rounds: np.ndarray
    gap: np.ndarray
    grad_norm_sq: np.ndarray
    x: Optional[np.ndarray]
    x_final: np.ndarray
    config: dict[str, Any]
    diverged_at: Optional[np.ndarray] = None

    def __post_init__(self):
        if self.diverged_at is None:
            object.__setattr__(self, "diverged_at", divergence_rounds(
                self.rounds, self.gap, self.grad_norm_sq, self.x, self.x_final))

    @property
    def trials(self) -> int:
        return int(self.gap.shape[0])

    @property
    def diverged(self) -> np.ndarray:
        """Bool[ndarray, "trials"]: which trials diverged."""
        return self.diverged_at >= 0

    @property
    def num_diverged(self) -> int:
        """How many trials diverged."""
        return int(np.count_nonzero(self.diverged))

    def divergence(self) -> str:
        """One line: how many trials diverged, of how many, and the earliest round ('' if none)."""
        k = self.num_diverged
        if not k:
            return ""
        first = int(self.diverged_at[self.diverged].min())
        return (f"{k} of {self.trials} trials diverged (non-finite gap, grad_norm_sq or x), "
                f"the first from round t={first}")

    def summary(self, name: str = "gap", diverged: str = "exclude") -> Summary:
        """:class:`Summary` over trials of ``gap``, ``grad_norm_sq`` or ``x``, per record.

        Args:
          name: the field.
          diverged: "exclude" (default) leaves the diverged trials out (``excluded`` says
            how many); "raise" raises ValueError if any trial diverged.

        Raises:
          ValueError: for ``diverged="raise"`` when a trial diverged, or when all did.
        """
        value, excluded = self._finite(self._field(name), diverged)
        return summarize(value, axis=0)._replace(excluded=excluded)

    def final(self, name: str = "gap", diverged: str = "exclude") -> Summary:
        """:class:`Summary` over trials of the last record (t = T) of a field (see :meth:`summary`)."""
        value = self._field(name)
        value, excluded = self._finite(value if name == "x_final" else value[:, -1], diverged)
        return summarize(value, axis=0)._replace(excluded=excluded)

    def _finite(self, value: np.ndarray, diverged: str):
        """``value`` without the diverged trials, and how many were left out."""
        if diverged not in DIVERGED:
            raise ValueError(f"diverged ({diverged!r}) must be one of {DIVERGED}")
        k = self.num_diverged
        if not k:
            return value, 0
        if diverged == "raise":
            raise ValueError(f"{self.divergence()}; pass diverged='exclude' to summarise the others")
        if k == self.trials:
            raise ValueError(f"{self.divergence()}: no finite trial to summarise")
        return value[~self.diverged], k

    def _field(self, name):
        if name not in ("gap", "grad_norm_sq", "x", "x_final"):
            raise ValueError(f"name ({name!r}) must be one of 'gap', 'grad_norm_sq', 'x', 'x_final'")
        value = getattr(self, name)
        if value is None:
            raise ValueError(f"{name} was not recorded (record_x=False)")
        return value
