"""Progress meters: how a run reports rounds done out of its total while it goes on.

A meter is a value (an ``eqx.Module``) with three methods, ``init(total, label, done) ->
state``, ``step(state, done) -> state`` and ``close(state)``: the run calls ``init`` before
its first segment, ``step`` after every segment (``done``: rounds of every point and trial
chunk finished so far) and ``close`` when it ends or stops. The calls happen on the host,
between compiled segments; a meter never enters a compiled program, so it changes no
result and compiles nothing. ``simulate(progress=...)`` and ``sweep(progress=...)`` take a
meter, or ``True`` (:class:`TqdmProgressMeter`), ``False`` (:class:`NoProgressMeter`) or a
callback ``callback(rounds_done, total, secs)`` (:class:`CallbackProgressMeter`).
"""

from __future__ import annotations

import abc
import sys
import time
from typing import Any, Callable, NamedTuple

import equinox as eqx

from fedjax_abc._problems._args import check_real
from fedjax_abc._problems._host import method

__all__ = ["AbstractProgressMeter", "CallbackProgressMeter", "NoProgressMeter", "Reporting",
           "TextProgressMeter", "TqdmProgressMeter", "progress_meter"]


class AbstractProgressMeter(eqx.Module):
    """How a run reports its progress (see the module's docstring for when it is called).

    A user's meter subclasses this and defines the three methods; the state is whatever
    ``init`` returns (a bar, a tuple, None).
    """

    @abc.abstractmethod
    def init(self, total: int, label: str, done: int = 0) -> Any:
        """The state before the first segment: ``total`` rounds to run in all (every point
        and trial chunk), ``done`` of them run before (a run resumed from a checkpoint)."""

    @abc.abstractmethod
    def step(self, state: Any, done: int) -> Any:
        """The state after a segment, with ``done`` of the total rounds run."""

    @abc.abstractmethod
    def close(self, state: Any) -> None:
        """Called once when the run ends or stops (an exception included)."""


class NoProgressMeter(AbstractProgressMeter):
    """Reports nothing; the run is then not cut into segments for reports (``progress=False``)."""

    def init(self, total: int, label: str, done: int = 0) -> None:
        return None

    def step(self, state: None, done: int) -> None:
        return None

    def close(self, state: None) -> None:
        return None


class TqdmProgressMeter(AbstractProgressMeter):
    """A tqdm bar on stderr: rounds done, rate and time left (``progress=True``).

    Attributes:
      refresh_s: the least seconds between redraws of the bar.
    """

    refresh_s: float = 1.0

    def __check_init__(self):
        check_real("TqdmProgressMeter refresh_s (seconds)", self.refresh_s, low=0.0)

    def init(self, total: int, label: str, done: int = 0):
        from tqdm.auto import tqdm

        return tqdm(total=total, initial=done, desc=label, unit="round", file=sys.stderr,
                    mininterval=self.refresh_s, dynamic_ncols=True)

    def step(self, state, done: int):
        state.update(done - state.n)
        return state

    def close(self, state) -> None:
        state.close()


class _TextState(NamedTuple):
    total: int
    label: str
    start: float  # perf_counter at init
    first: int  # rounds done at init (a resumed run's)
    shown: float  # the fraction done at the last line written


class TextProgressMeter(AbstractProgressMeter):
    """One plain line on stderr each time the fraction done grows by ``minimum_increase``,
    e.g. ``fedavg: 40.0% (800/2000 rounds), 12.1 s elapsed, ~18.2 s left``: for logs and
    batch jobs, where a redrawn bar is noise.

    Attributes:
      minimum_increase: the fraction of the total (in (0, 1]) between two lines.
    """

    minimum_increase: float = 0.05

    def __check_init__(self):
        m = self.minimum_increase
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not 0 < m <= 1:
            raise ValueError(f"TextProgressMeter minimum_increase must be a fraction in (0, 1], "
                             f"got {m!r}")

    def init(self, total: int, label: str, done: int = 0) -> _TextState:
        return _TextState(total, label, time.perf_counter(), done, done / total if total else 1.0)

    def step(self, state: _TextState, done: int) -> _TextState:
        fraction = done / state.total if state.total else 1.0
        if fraction - state.shown < self.minimum_increase and done < state.total:
            return state
        elapsed = time.perf_counter() - state.start
        ran = done - state.first
        left = elapsed * (state.total - done) / ran if ran > 0 else float("nan")
        print(f"{state.label}: {100 * fraction:.1f}% ({done}/{state.total} rounds), "
              f"{elapsed:.1f} s elapsed, ~{left:.1f} s left", file=sys.stderr, flush=True)
        return state._replace(shown=fraction)

    def close(self, state: _TextState) -> None:
        return None


class CallbackProgressMeter(AbstractProgressMeter):
    """Calls ``callback(rounds_done, total, secs)`` after every segment (``secs``: since the
    run started); a callable given as ``progress`` is this meter.

    Attributes:
      callback: the function called.
    """

    callback: Callable[[int, int, float], Any]

    def __check_init__(self):
        if not callable(self.callback):
            raise ValueError(f"CallbackProgressMeter needs a callable, got {self.callback!r}")

    def init(self, total: int, label: str, done: int = 0) -> tuple[int, float]:
        return total, time.perf_counter()

    def step(self, state: tuple[int, float], done: int) -> tuple[int, float]:
        total, start = state
        self.callback(done, total, time.perf_counter() - start)
        return state

    def close(self, state: tuple[int, float]) -> None:
        return None


def progress_meter(progress) -> AbstractProgressMeter:
    """The meter for a ``progress`` argument: a meter itself, True (a tqdm bar), False or
    None (nothing), or a callback; anything else is a ValueError."""
    if isinstance(progress, AbstractProgressMeter):
        return progress
    if progress is None or progress is False:
        return NoProgressMeter()
    if progress is True:
        return TqdmProgressMeter()
    if callable(progress) and not isinstance(progress, type):
        return CallbackProgressMeter(progress)
    raise ValueError("progress must be True, False, a callback(rounds_done, total, secs) or a "
                     f"progress meter (fa.TextProgressMeter(), ...), got {progress!r}")


class Reporting:
    """A meter and its state through one run: ``reporting(done)`` after each segment,
    ``close()`` at the end."""

    def __init__(self, meter: AbstractProgressMeter, total: int, label: str, done: int = 0):
        self.meter = meter
        self.reports = not isinstance(meter, NoProgressMeter)  # cut the run into segments
        self.state = method(meter, "init")(total, label, done)

    def __call__(self, done: int) -> None:
        self.state = method(self.meter, "step")(self.state, done)

    def close(self) -> None:
        method(self.meter, "close")(self.state)
