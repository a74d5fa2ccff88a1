"""Typed results of :func:`fedjax_abc.simulate` and their reductions over trials."""

from __future__ import annotations

import dataclasses
import numbers
import warnings
from typing import Any, NamedTuple, Optional

import numpy as np

from fedjax_abc._engine import _labelled
from fedjax_abc._engine._names import coordinate_label
from fedjax_abc._problems._host import method

__all__ = ["DivergenceWarning", "PendingGap", "SimResult", "Summary", "SweepResult",
           "divergence_rounds", "load", "summarize", "warn_divergence"]

Z95 = 1.959963984540054  # standard normal 97.5% quantile

DIVERGED = ("exclude", "raise")
FIELDS = ("gap", "grad_norm_sq", "x", "x_final")  # what summary() and final() read besides metrics


class DivergenceWarning(RuntimeWarning):
    """Some trials of a run became non-finite; see :attr:`SimResult.diverged_at`."""


def warn_divergence(result: "SimResult", stacklevel: int = 3) -> None:
    """A :class:`DivergenceWarning` saying how many of the result's trials diverged, if any."""
    if result.num_diverged:
        warnings.warn(result.divergence() + "; SimResult.summary and .final leave them out "
                      "(see SimResult.diverged_at)", DivergenceWarning, stacklevel=stacklevel)


class Summary(NamedTuple):
    """Mean over trials with its standard error and a normal 95% interval.

    Every field but ``excluded`` has the shape of the summarised quantity without its trials
    axis. ``ci_low, ci_high = mean -/+ 1.96 stderr`` (normal approximation, stderr = sample
    standard deviation / sqrt(trials); stderr is NaN for a single trial). ``excluded``: how
    many diverged trials were left out (:meth:`SimResult.summary`); 0 from :func:`summarize`.
    ``ci95`` (a property) is the interval's half width, 1.96 stderr, so that
    ``mean +- ci95`` is the interval.

    Example:
      >>> import fedjax_abc as fa
      >>> fa.summarize([1.0, 2.0, 3.0])
      Summary(mean=2.0, stderr=0.5773502691896258, ci_low=0.8684..., ci_high=3.1315..., excluded=0)
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

    def __repr__(self) -> str:
        return "Summary(" + ", ".join(f"{k}={_plain(v)}" for k, v in self._asdict().items()) + ")"


def _plain(value) -> str:
    """A field as Python writes a number (``2.0``, not ``np.float64(2.0)``), or an array's
    values."""
    a = np.asarray(value)
    if a.ndim == 0:
        return repr(a.item())
    return np.array2string(a, separator=", ", threshold=20)


def summarize(values, axis: int = 0) -> Summary:
    """:class:`Summary` of ``values`` over ``axis`` (the trials axis by default)."""
    try:
        values = np.asarray(values, dtype=float) if not isinstance(values, (str, bytes)) else None
    except (TypeError, ValueError):
        values = None
    if values is None or values.ndim == 0:
        raise ValueError("summarize needs an array of numbers with a trials axis")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or \
            not -values.ndim <= axis < values.ndim:
        raise ValueError(f"axis ({axis!r}) must be an axis of the {values.ndim}-D values")
    m = values.shape[axis]
    mean = values.mean(axis=axis)
    se = values.std(axis=axis, ddof=1) / np.sqrt(m) if m > 1 else np.full_like(mean, np.nan)
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


class PendingGap(NamedTuple):
    """Records of f(x_t) whose gap f(x_t) - f* is formed when read: a run of a problem whose
    f* is computed on demand (a learning problem's) needs it only then.

    ``minima`` are the problem's (:class:`~fedjax_abc._problems._minima.DeferredMinima`):
    their f* (computed the first time it is asked for) is cast to the records' dtype, so that
    the gap is the same subtraction, bit for bit, the compiled run makes for a problem whose
    f* is known.
    """

    loss: np.ndarray
    minima: Any

    def formed(self) -> np.ndarray:
        """f(x_t) - f* (computing f* if it is not yet)."""
        return self.loss - np.asarray(method(self.minima, "known")().f_star, self.loss.dtype)


class _Gap:
    """The ``gap`` field of :class:`SimResult`: an array, or a :class:`PendingGap` formed each
    time it is read (the result itself is never changed)."""

    def __set_name__(self, owner, name):
        self.slot = name  # the instance's __dict__ entry of that name (vars(result) shows it)

    def __get__(self, obj, owner=None):
        if obj is None:
            raise AttributeError("gap")  # no class-level default for the dataclass
        value = obj.__dict__[self.slot]
        return value.formed() if isinstance(value, PendingGap) else value

    def __set__(self, obj, value):  # the dataclass's __init__ only: the class is frozen
        obj.__dict__[self.slot] = value


@dataclasses.dataclass(frozen=True)
class SimResult:
    """What :func:`fedjax_abc.simulate` returns (NumPy arrays on the host).

    A trial whose iterate or records become non-finite (a stepsize too large, say) has
    *diverged*: it is counted in ``diverged_at`` and left out of :meth:`summary` and
    :meth:`final` (which say how many they left out), never averaged into a NaN.

    Attributes:
      rounds: Int[ndarray, "records"], the recorded rounds t = 0, k, 2k, ..., T (the last
        interval shorter where k does not divide T).
      gap: Float[ndarray, "trials records"], f(x_t) - f*. For a problem whose f* is
        computed on demand (a learning problem's), formed when it is read (the run records
        f(x_t), which ``metrics["loss"]`` holds; f* is computed the first time).
      grad_norm_sq: Float[ndarray, "trials records"], ||grad f(x_t)||^2.
      x: Float[ndarray, "trials records d"] or None (``record_x=False``), the iterates x_t.
      x_final: Float[ndarray, "trials d"], x_T.
      config: every parameter of the run, the seed key's data, dtype, versions and devices.
      diverged_at: Int[ndarray, "trials"], the first recorded round t at which the trial's
        gap, grad_norm_sq or x (x_final at t = T) is not finite; -1 if it never is.
        Computed from the arrays when not given.
      metrics: name -> Float[ndarray, "trials records"], the user metrics of
        ``simulate(..., metrics=...)`` at every record (empty without them), and the loss
        f(x_t) where the gap is formed on demand. :meth:`summary` and :meth:`final` take
        their names.
      client_x: Float[ndarray, "trials records clients d"] or None (without
        ``record_clients=True``): every client's own model at every record (the
        algorithm's ``personal`` model; x_t for an algorithm without personal models).
      client_loss: Float[ndarray, "trials records clients"] or None: every client's loss
        f_i at its own model (:func:`fedjax_abc.stats.fairness` summarises it).
    """

    rounds: np.ndarray
    gap: np.ndarray = _Gap()
    grad_norm_sq: np.ndarray
    x: Optional[np.ndarray]
    x_final: np.ndarray
    config: dict[str, Any]
    diverged_at: Optional[np.ndarray] = None
    metrics: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    client_x: Optional[np.ndarray] = None
    client_loss: Optional[np.ndarray] = None
    # digests of the run's settings, or a function of no arguments computing them (see
    # _settings)
    _digests: Any = dataclasses.field(default=None, repr=False, compare=False)

    def __post_init__(self):
        if self.diverged_at is None:  # f(x_t) is finite where f(x_t) - f* is
            gap = self.__dict__["gap"]
            object.__setattr__(self, "diverged_at", divergence_rounds(
                self.rounds, gap.loss if isinstance(gap, PendingGap) else gap,
                self.grad_norm_sq, self.x, self.x_final))

    def __getstate__(self):
        # a pending gap formed and the settings' digests computed: the copy holds no
        # problem, no components
        return dict(self.__dict__, gap=self.gap, _digests=self._settings())

    def _settings(self) -> Optional[dict]:
        """Digests of what the run's numbers depend on besides its own trials (its
        components, stepsizes, record_x), name -> str, computed when asked for
        (``concatenate`` compares them, ``save`` keeps them); None where unknown (a result
        made by hand, or read from a file saved without them)."""
        return self._digests() if callable(self._digests) else self._digests

    def _replace(self, **changes) -> "SimResult":
        """This result with ``changes`` to fields other than ``gap``, a pending gap kept
        pending (``dataclasses.replace`` would read it)."""
        copy = object.__new__(SimResult)
        copy.__dict__.update(self.__dict__)
        copy.__dict__.update(changes)
        return copy

    @property
    def trials(self) -> int:
        return int(self.grad_norm_sq.shape[0])

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
        """:class:`Summary` over trials of ``gap``, ``grad_norm_sq``, ``x`` or a metric, per record.

        Args:
          name: the field, or the name of a metric.
          diverged: "exclude" (default) leaves the diverged trials out (``excluded`` says
            how many); "raise" raises ValueError if any trial diverged.

        Raises:
          ValueError: for ``diverged="raise"`` when a trial diverged, or when all did.
        """
        return self._summarize(self._field(name), diverged)

    def final(self, name: str = "gap", diverged: str = "exclude") -> Summary:
        """:class:`Summary` over trials of the last record (t = T) of a field (see :meth:`summary`)."""
        value = self._field(name)
        return self._summarize(value if name == "x_final" else value[:, -1], diverged)

    def _summarize(self, value: np.ndarray, diverged: str) -> Summary:
        """:class:`Summary` over trials of ``value`` without the diverged trials (``excluded``
        says how many were left out)."""
        if diverged not in DIVERGED:
            raise ValueError(f"diverged ({diverged!r}) must be one of {DIVERGED}")
        k = self.num_diverged
        if not k:
            return summarize(value)
        if diverged == "raise":
            raise ValueError(f"{self.divergence()}; pass diverged='exclude' to summarise the others")
        if k == self.trials:
            raise ValueError(f"{self.divergence()}: no finite trial to summarise")
        return summarize(value[~self.diverged])._replace(excluded=k)

    def _field(self, name):
        if name in self.metrics:
            return self.metrics[name]
        if name not in FIELDS:
            known = list(FIELDS) + list(self.metrics)
            raise ValueError(f"name ({name!r}) must be one of {', '.join(map(repr, known))}")
        value = getattr(self, name)
        if value is None:
            raise ValueError(f"{name} was not recorded (record_x=False)")
        return value

    def with_metrics(self, **values) -> "SimResult":
        """This result with more metrics, each of shape (records,) (the same for every
        trial, e.g. ``fa.theory.dp_epsilon`` at ``rounds``) or (trials, records).

        Example:
          >>> import jax, fedjax_abc as fa
          >>> p = fa.problems.quadratics(jax.random.key(0), n=4, d=2)
          >>> r = fa.simulate(p, local_steps=2, stepsize=0.1, rounds=4, trials=3,
          ...                 key=jax.random.key(1), x0=jax.numpy.ones(2))
          >>> r.with_metrics(t_squared=r.rounds ** 2).metrics["t_squared"][2]
          array([ 0.,  1.,  4.,  9., 16.])
        """
        shape = self.grad_norm_sq.shape
        metrics = dict(self.metrics)
        for name, value in values.items():
            if name in metrics or name in FIELDS:
                raise ValueError(f"the result already has a field or metric {name!r}")
            a = np.asarray(value, dtype=np.float64)
            if a.shape == shape[1:]:
                a = np.broadcast_to(a, shape).copy()
            if a.shape != shape:
                raise ValueError(f"metric {name!r} must have shape (records,) = {shape[1:]} or "
                                 f"(trials, records) = {shape}, got {a.shape}")
            metrics[name] = a
        return self._replace(metrics=metrics)

    def on_time_grid(self, name: str = "gap", times=None, points: int = 200,
                     clock: str = "time"):
        """Each trial's ``name`` against simulated time, on a grid common to all trials.

        Args:
          name: "gap", "grad_norm_sq" or a metric's name.
          times: the grid (default: ``points`` times from 0 to the earliest last recorded
            time of any trial).
          clock: the metric holding each record's simulated time (``"time"``, which a
            timed sampler or an asynchronous run records).

        Returns:
          :class:`~fedjax_abc.timing.OnTimeGrid` (times, values (trials, points)): a
          trial's value at time tau is that of its last record at or before tau;
          ``fa.summarize(grid.values)`` gives means and bands.
        """
        from fedjax_abc._engine._timegrid import on_time_grid

        if clock not in self.metrics:
            raise ValueError(f"this run recorded no simulated time (metric {clock!r}): run it "
                             "with a timed sampler (fa.timing.Timed) or fa.timing.simulate_async")
        if name in ("x", "x_final"):  # not one value a record
            raise ValueError(f"name ({name!r}) must be 'gap', 'grad_norm_sq' or a metric's name")
        return on_time_grid(self.metrics[clock], self._field(name), times, points)

    def summary_on_time_grid(self, name: str = "gap", times=None, points: int = 200,
                             diverged: str = "exclude") -> tuple[np.ndarray, Summary]:
        """(times, :class:`Summary` over trials at each time) of :meth:`on_time_grid`,
        diverged trials handled as in :meth:`summary`."""
        grid = self.on_time_grid(name, times, points)
        return grid.times, self._summarize(grid.values, diverged)

    def plot(self, y: str = "gap", x: str = "rounds", ax=None, label=None, band: bool = True,
             log: bool = True, times=None, **line_kwargs):
        """The mean over trials of ``y`` with its 95% band, against rounds or a metric.

        Args:
          y: "gap", "grad_norm_sq" or a metric's name.
          x: "rounds"; "time", the simulated time (each trial's values on a common time
            grid, :meth:`on_time_grid`); or a metric's name (its mean over trials at each
            record: the cumulative ``bits`` of a compressor, or ``epsilon`` added by
            :meth:`with_metrics`).
          ax: a matplotlib Axes (default: the current one).
          label, line_kwargs: for the line; band: draw the band; log: a log y-axis (where
            the band's interval reaches 0, its lower edge is drawn one decade below the
            mean: a log axis cannot show 0).
          times: with ``x="time"``, the grid of simulated times (default: 200 times up to
            the earliest last record of this run's trials, which differs between runs).
            Several runs on one plot end at one horizon with the same ``times``, e.g.
            ``np.linspace(0, min(r.metrics["time"][:, -1].min() for r in runs), 200)``.

        Returns:
          the Axes.
        """
        from fedjax_abc._engine._plot import plot_curve

        return plot_curve(self, y, x, ax, label, band, log, times, **line_kwargs)

    @classmethod
    def concatenate(cls, parts: "list[SimResult]") -> "SimResult":
        """The result of one run from the results of its shares of trials, in order.

        Each part was run with ``simulate(..., first_trial=...)`` (by a process, a host or a
        call of its own), the same settings otherwise and consecutive trial ranges. The
        arrays are joined along the trials axis; the config is the whole run's (``trials``
        summed, ``first_trial`` the first part's, left out when 0, ``devices`` all the
        parts' devices).

        The joined result equals the whole run's bit for bit, as trials do not depend on
        the trials beside them (to rounding for shares run with ``pad_trials=False``).

        Raises:
          ValueError: if the parts' settings differ (their configs, or the values the
            configs name: the problem's data, the components' values, the stepsizes,
            record_x; each share may have its own x0), or their trials do not follow each
            other.
        """
        parts = list(parts)
        if not parts:
            raise ValueError("concatenate needs at least one SimResult")
        bad = [type(p).__name__ for p in parts if not isinstance(p, SimResult)]
        if bad:
            raise TypeError(f"concatenate takes SimResults, got a {bad[0]}")
        skip = ("trials", "first_trial", "trial_chunk", "devices")
        first = parts[0].config
        start = first.get("first_trial", 0)
        settings = [p._settings() for p in parts]
        for p, its in zip(parts[1:], settings[1:]):
            diff = sorted(k for k in set(first) | set(p.config)
                          if k not in skip and first.get(k) != p.config.get(k))
            if not diff and its is not None and settings[0] is not None:  # the values too
                diff = sorted(k for k in set(its) | set(settings[0])
                              if its.get(k) != settings[0].get(k))
            if diff:
                raise ValueError(f"the parts were run with other settings: {diff}")
        at = start
        for p in parts:
            if p.config.get("first_trial", 0) != at:
                raise ValueError(f"the parts' trials must follow each other: expected a part from "
                                 f"trial {at}, got one from {p.config.get('first_trial', 0)}")
            at += p.trials
        whole = all(p.config.get("trial_chunk") == p.trials for p in parts)  # one chunk each
        config = dict(first, trials=at - start, trial_chunk=at - start if whole else max(
            p.config.get("trial_chunk", p.trials) for p in parts))
        config["devices"] = list(dict.fromkeys(d for p in parts for d in p.config.get("devices", [])))
        config.pop("first_trial", None)
        if start:
            config["first_trial"] = start
        config = {k: config[k] for k in list(first) + [k for k in config if k not in first]}

        def cat(name):
            values = [getattr(p, name) for p in parts]
            return None if values[0] is None else np.concatenate(values)

        return cls(rounds=parts[0].rounds, gap=cat("gap"), grad_norm_sq=cat("grad_norm_sq"),
                   x=cat("x"), x_final=cat("x_final"), config=config,
                   diverged_at=cat("diverged_at"),
                   metrics={k: np.concatenate([p.metrics[k] for p in parts])
                            for k in parts[0].metrics},
                   client_x=cat("client_x"), client_loss=cat("client_loss"),
                   _digests=settings[0] if None not in settings else None)

    def equals(self, other) -> bool:
        """Whether ``other`` is a SimResult with the same config and the same arrays, bit for
        bit (NaN equal to NaN)."""
        if not isinstance(other, SimResult) or self.config != other.config:
            return False
        if list(self.metrics) != list(other.metrics) or not all(
                _same_array(v, other.metrics[k]) for k, v in self.metrics.items()):
            return False
        return all(_same_array(getattr(self, f.name), getattr(other, f.name))
                   for f in dataclasses.fields(self)
                   if f.name not in ("config", "metrics", "_digests"))

    def to_dataframe(self, summary: bool = False):
        """A tidy ``pandas.DataFrame``: one row per trial and record (columns trial, round,
        gap, grad_norm_sq, one per metric, diverged), or with ``summary=True`` one row per
        record and quantity (gap, grad_norm_sq, the metrics: mean, stderr, ci_low, ci_high
        over the trials that did not diverge)."""
        return _labelled.sim_dataframe(self, summary)

    def to_xarray(self):
        """An ``xarray.Dataset`` with dimensions (trial, round, dim) and the config as an
        attribute (JSON)."""
        return _labelled.sim_dataset(self)

    def save(self, path) -> str:
        """Writes the result with its config to a netCDF file (see :func:`fedjax_abc.load`)."""
        return _labelled.save(self, path)


def _is_label(value, coordinate) -> bool:
    try:
        return bool(value == coordinate)
    except Exception:  # an array or a module compared with a label
        return False


def _same_array(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(
        a, b, equal_nan=a.dtype.kind in "fc")


def _worst_value(result: SimResult, name: str) -> float:
    """The mean of ``name`` at t = T over the trials that stayed finite; +inf where none did
    (a point whose every trial diverged is as bad as it gets)."""
    kept = np.asarray(result._field(name), float)[:, -1][~result.diverged]
    return float(kept.mean()) if kept.size else np.inf


@dataclasses.dataclass(frozen=True)
class SweepResult:
    """What :func:`fedjax_abc.sweep` returns: one :class:`SimResult` per grid point.

    Attributes:
      axes: axis name -> the coordinate labels of its values (numbers, or short strings
        for values that are not numbers), in the order of the grid.
      results: the grid points' results, in C order over the axes (the last axis fastest).
    """

    axes: dict[str, tuple]
    results: tuple[SimResult, ...]

    def __post_init__(self):
        if len(self.results) != int(np.prod(self.shape)):
            raise ValueError(f"a grid of shape {self.shape} needs {int(np.prod(self.shape))} "
                             f"results, got {len(self.results)}")

    @property
    def shape(self) -> tuple[int, ...]:
        """The grid's shape, one length per axis."""
        return tuple(len(v) for v in self.axes.values())

    @property
    def points(self) -> list[dict]:
        """Each grid point as axis name -> label, in the order of :attr:`results`."""
        import itertools
        return [dict(zip(self.axes, labels)) for labels in itertools.product(*self.axes.values())]

    def __len__(self) -> int:
        return len(self.results)

    def point(self, **labels) -> SimResult:
        """The result at the grid point with these labels, e.g. ``res.point(stepsize=1e-4)``
        (axes of length 1 may be left out).

        A value may be given as its coordinate label (``"FedAvg(server_stepsize=1)"``), as
        the grid value itself (``algorithm=FedAvg()``, matched through the label the sweep
        gives it), or as a bare class name (``algorithm="FedAvg"``) when one value of the
        axis has that class."""
        unknown = set(labels) - set(self.axes)
        if unknown:
            raise ValueError(f"no grid axis {sorted(unknown)}; the axes are {list(self.axes)}")
        want = {k: self._coordinate(k, v) for k, v in labels.items()}
        for p, res in zip(self.points, self.results):
            if all(p[k] == v for k, v in want.items()) and all(
                    k in want or len(self.axes[k]) == 1 for k in self.axes):
                return res
        raise ValueError(f"no grid point {labels}; the axes are {self.axes}")

    def _coordinate(self, axis: str, value):
        """The coordinate label of ``axis`` that ``value`` names (``value`` itself if none)."""
        coords = self.axes[axis]
        if any(_is_label(value, c) for c in coords):
            return value
        if not isinstance(value, (str, numbers.Number)):
            label = coordinate_label(value, axis, -1)
            if label in coords:
                return label
            if isinstance(value, (np.ndarray, list, tuple)) or hasattr(value, "__array__"):
                raise ValueError(f"grid axis '{axis}': an array value is named by its "
                                 f"coordinate label; give one of {list(coords)}"[:300])
            raise ValueError(f"no grid point {axis}={label} (values sharing a label are "
                             f"numbered, labels= names them); give one of {list(coords)}"[:300])
        if isinstance(value, str):
            named = [c for c in coords if isinstance(c, str) and c.split("(", 1)[0] == value]
            if len(named) == 1:
                return named[0]
            if len(named) > 1:
                raise ValueError(f"grid axis '{axis}' has {len(named)} values of class "
                                 f"{value}: {named}; give one of these labels")
        return value

    def _stacked(self, name: str) -> np.ndarray:
        values = [getattr(r, name) for r in self.results]
        if any(v is None for v in values):
            flag = "record_clients=True" if name.startswith("client") else "record_x=True"
            raise ValueError(f"{name} was not recorded (run with {flag})")
        shapes = {v.shape for v in values}
        if len(shapes) > 1:
            raise ValueError(f"the grid points' {name} differ in shape ({sorted(shapes)})")
        return np.stack(values).reshape(self.shape + values[0].shape)

    @property
    def rounds(self) -> np.ndarray:
        return self.results[0].rounds

    @property
    def gap(self) -> np.ndarray:
        """Float[ndarray, "*grid trials records"]."""
        return self._stacked("gap")

    @property
    def grad_norm_sq(self) -> np.ndarray:
        """Float[ndarray, "*grid trials records"]."""
        return self._stacked("grad_norm_sq")

    @property
    def x(self) -> np.ndarray:
        """Float[ndarray, "*grid trials records d"]."""
        return self._stacked("x")

    @property
    def x_final(self) -> np.ndarray:
        """Float[ndarray, "*grid trials d"]."""
        return self._stacked("x_final")

    @property
    def client_x(self) -> np.ndarray:
        """Float[ndarray, "*grid trials records clients d"] (``record_clients=True``)."""
        return self._stacked("client_x")

    @property
    def client_loss(self) -> np.ndarray:
        """Float[ndarray, "*grid trials records clients"] (``record_clients=True``)."""
        return self._stacked("client_loss")

    @property
    def diverged_at(self) -> np.ndarray:
        """Int[ndarray, "*grid trials"]."""
        return self._stacked("diverged_at")

    @property
    def metrics(self) -> dict[str, np.ndarray]:
        """name -> Float[ndarray, "*grid trials records"], the user metrics."""
        first = self.results[0]
        return {k: np.stack([r.metrics[k] for r in self.results]).reshape(
            self.shape + first.metrics[k].shape) for k in first.metrics}

    def final(self, name: str = "gap", diverged: str = "exclude") -> Summary:
        """:meth:`SimResult.final` at every grid point: fields of the grid's shape (``excluded``
        an integer array)."""
        parts = [r.final(name, diverged) for r in self.results]
        return Summary(*(np.stack([np.asarray(getattr(p, f)) for p in parts]).reshape(
            self.shape + np.shape(getattr(parts[0], f))) for f in Summary._fields))

    def worst(self, over: str, name: str = "gap") -> tuple["SweepResult", np.ndarray]:
        """The worst value of the axis ``over`` at every point of the other axes: the one
        whose final ``name`` (its mean over the trials that did not diverge, as
        :meth:`final`; a point whose every trial diverged counts as the worst) is largest, as robustness studies report a rule
        under its worst attack.

        Returns:
          (the grid over the other axes holding the worst points' results, the worst
          labels of ``over``: an array of the other axes' shape).

        Example: ``worst, attack = res.worst("byzantine")`` for a grid of aggregators x
        attacks: ``worst.final().mean`` is each aggregator's error under its worst attack,
        ``attack`` which attack that was.
        """
        if over not in self.axes:
            raise ValueError(f"no grid axis {over!r}; the axes are {list(self.axes)}")
        axis = list(self.axes).index(over)
        values = np.reshape([_worst_value(r, name) for r in self.results], self.shape)
        pick = np.argmax(np.moveaxis(values, axis, -1), axis=-1)
        index = np.moveaxis(np.arange(len(self.results)).reshape(self.shape), axis, -1)
        chosen = np.take_along_axis(index, pick[..., None], axis=-1)[..., 0]
        others = {k: v for k, v in self.axes.items() if k != over}
        labels = np.asarray(np.array(self.axes[over], dtype=object)[pick], dtype=object)
        return SweepResult(axes=others, results=tuple(self.results[i] for i in chosen.ravel())), \
            labels

    def equals(self, other) -> bool:
        """Same axes and the same results (:meth:`SimResult.equals`) at every point."""
        return (isinstance(other, SweepResult) and self.axes == other.axes
                and len(self.results) == len(other.results)
                and all(a.equals(b) for a, b in zip(self.results, other.results)))

    def to_dataframe(self, summary: bool = False):
        """A tidy ``pandas.DataFrame`` with a column per grid axis: one row per grid point,
        trial and record, or with ``summary=True`` per grid point, record and quantity."""
        return _labelled.sweep_dataframe(self, summary)

    def to_xarray(self):
        """An ``xarray.Dataset`` with dimensions (*axes, trial, round, dim)."""
        return _labelled.sweep_dataset(self)

    def save(self, path) -> str:
        """Writes the sweep with every point's config to a netCDF file (:func:`fedjax_abc.load`)."""
        return _labelled.save(self, path)


def load(path):
    """Reads a result written by ``SimResult.save`` or ``SweepResult.save``.

    Returns:
      A :class:`~fedjax_abc.SimResult` or :class:`~fedjax_abc.SweepResult` equal to the
      saved one (``.equals``), config included.

    Raises:
      ValueError: if the file was not written by fedjax_abc, is of a format this version
        does not read, or its data do not match the checksum saved with them.
    """
    axes, points = _labelled.read(path)
    if axes is None:
        return SimResult(**points[0])
    return SweepResult(axes=axes, results=tuple(SimResult(**fields) for fields in points))
