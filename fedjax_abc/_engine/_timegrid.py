"""Records against simulated time: each trial's values on a common time grid.

Trials on a clock reach their records at different times. For means and bands over trials,
each trial's value at time tau is that of its last record at or before tau (the model the
server held then), on a grid common to all trials.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from fedjax_abc._problems._args import check_count

__all__ = ["OnTimeGrid", "on_time_grid"]


class OnTimeGrid(NamedTuple):
    """Values on a common time grid.

    Attributes:
      times: Float[ndarray, "points"], the grid.
      values: Float[ndarray, "trials points"], each trial's value at each time.
    """

    times: np.ndarray
    values: np.ndarray


def on_time_grid(clock: np.ndarray, values: np.ndarray,
                 times: Optional[np.ndarray] = None, points: int = 200) -> OnTimeGrid:
    """Each trial's ``values`` (trials, records) at ``times``: the value of its last record
    at a clock (trials, records; nondecreasing along records) at or before each time.

    Raises:
      ValueError: a clock that decreases, shapes that differ, a time before a trial's
        first record or after its last (the value there is unknown), or a grid whose
        values would not fit in the memory available (checked before anything of its size
        is made).
    """
    clock, values = np.asarray(clock, np.float64), np.asarray(values)
    if clock.shape != values.shape or clock.ndim != 2:
        raise ValueError(f"clock {clock.shape} and values {values.shape} must be the same "
                         "(trials, records) shape")
    if np.any(np.diff(clock, axis=1) < 0) or not np.all(np.isfinite(clock)):
        raise ValueError("the recorded time must be finite and nondecreasing along records")
    if times is None:  # from 0 to the earliest of the trials' last recorded times
        points = check_count("points", points)
        _check_size(clock.shape[0], points, values.dtype.itemsize)
        times = np.linspace(0.0, float(np.min(clock[:, -1])), points)
    else:
        _check_size(clock.shape[0], np.size(times), values.dtype.itemsize)
    times = np.asarray(times, np.float64)
    if times.ndim != 1 or not np.all(np.isfinite(times)):
        raise ValueError(f"times must be a one-dimensional array of finite numbers, got "
                         f"{times!r}"[:200])
    if times.size and (times.min() < clock[:, 0].max() or times.max() > clock[:, -1].min()):
        raise ValueError(f"times must lie in [{clock[:, 0].max():g}, {clock[:, -1].min():g}], "
                         "the span every trial's records cover")
    at = np.stack([np.searchsorted(c, times, side="right") - 1 for c in clock])
    return OnTimeGrid(times, np.take_along_axis(values, at, axis=1))


def _check_size(trials: int, points: int, itemsize: int) -> None:
    """ValueError (one line) where a grid of ``points`` times for ``trials`` trials would not
    fit in the memory available: its times, each trial's value and the index of its record
    at each time."""
    from fedjax_abc._engine._memory import available_bytes, format_bytes

    need = points * (8 + trials * (max(itemsize, 1) + 8))
    available = available_bytes()
    if available is not None and need > available:
        raise ValueError(f"a time grid of {points:,} points for {trials} trials needs about "
                         f"{format_bytes(need)}, more than the {format_bytes(available)} "
                         "available: ask for fewer points (200 draw a smooth curve)")
