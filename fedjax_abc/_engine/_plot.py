"""A result's mean curve with its 95% band, against rounds or against a recorded metric."""

from __future__ import annotations

import numpy as np

__all__ = ["plot_band", "plot_curve"]


# on a log axis, where a band's interval reaches 0 (which the axis cannot show), its lower
# edge is drawn this factor below the mean
LOG_BAND_FLOOR = 0.1


def plot_band(ax, xs, mean, half, label=None, log: bool = True, band: bool = True,
              **line_kwargs):
    """A mean curve and its band mean +- half. For a log axis (``log``) nothing reaches 0:
    where mean - half <= 0 the band's lower edge is drawn one decade below the mean
    (``LOG_BAND_FLOOR``), and the curve and band are clipped to 1e-3 of the smallest
    positive mean. Returns the line."""
    mean, half = np.asarray(mean, dtype=float), np.asarray(half, dtype=float)
    floor = -np.inf
    lower = mean - half
    if log:
        positive = mean[mean > 0]
        floor = positive.min() * 1e-3 if positive.size else 1e-300
        lower = np.where(lower > 0, lower, LOG_BAND_FLOOR * mean)
    line, = ax.plot(xs, np.maximum(mean, floor), label=label, **line_kwargs)
    if band:
        ax.fill_between(xs, np.maximum(lower, floor), np.maximum(mean + half, floor),
                        color=line.get_color(), alpha=0.2, lw=0)
    return line


def plot_curve(result, y: str = "gap", x: str = "rounds", ax=None, label=None,
               band: bool = True, log: bool = True, times=None, **line_kwargs):
    """Draws the mean over trials of ``y`` against ``x`` with a 95% band (see ``SimResult.plot``)."""
    if ax is None:
        import matplotlib.pyplot as plt

        ax = plt.gca()
    if times is not None and x != "time":
        raise ValueError(f"times (a grid of simulated times) goes with x='time', not x={x!r}")
    if x == "time":  # trials reach their records at different times: a common grid
        xs, s = result.summary_on_time_grid(y, times)
    else:
        s = result.summary(y)
    mean, half = np.asarray(s.mean, float), np.asarray(s.ci95, float)
    if mean.ndim != 1:
        raise ValueError(f"y ({y!r}) must be a field with one number per trial and record")
    if x == "rounds":
        xs = np.asarray(result.rounds, float)
    elif x != "time":
        xs = np.asarray(result.summary(x).mean, float)
        if xs.shape != mean.shape:
            raise ValueError(f"x ({x!r}) must be 'rounds' or a metric with one number per "
                             "trial and record")
    plot_band(ax, xs, mean, half, label, log=log, band=band, **line_kwargs)
    if log:
        ax.set_yscale("log")
    step = "server step t" if "rule" in result.config else "communication round t"  # async
    ax.set_xlabel({"rounds": step, "time": "simulated time"}.get(x, f"{x} (mean over trials)"))
    ax.set_ylabel(y)
    return ax
