"""Simulated time: laws of durations and the clock that turns a client's work into time.

A client's duration for one round's work (or one asynchronous task) is

    D_i = K_i s_i c_i + m_i,

with K_i its local steps, s_i its speed factor (fixed for a trial: drawn once from a law,
or given, e.g. measured device speeds), c_i the time of one step and m_i the time of its
communication (drawn afresh for every round or task). Every draw is the inverse
transform of one uniform random word, so a duration depends on the trial's counter
stream alone (the same in ``mask`` and ``gather`` modes).

The laws are small final modules with their parameters as array leaves (a sweep stacks
them): :class:`Constant`, :class:`Exponential`, :class:`ShiftedExponential`,
:class:`LogNormal`, :class:`Pareto`. Each gives its distribution function in closed form
(:meth:`AbstractLaw.cdf`), which the deadline's inclusion probabilities are made of.
"""

from __future__ import annotations

import abc
import math
from typing import Optional, Union

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import ndtri
from jaxtyping import Array, Float

from fedjax_abc._problems._participation import _unit

__all__ = ["AbstractLaw", "Clock", "Constant", "Exponential", "LogNormal", "Pareto",
           "ShiftedExponential", "speeds_from_file"]


def _parameter(law: str, name: str, value):
    """A law's scalar parameter as a float array leaf; one-line ValueError when it is not
    one number. Its range is the law's ``__check_init__`` (:func:`_recheck`), which runs
    after the constructor and after ``eqx.tree_at`` alike. A traced value passes as it is."""
    if isinstance(value, jax.core.Tracer):
        return value
    if isinstance(value, (bool, str, bytes)) or value is None:
        raise ValueError(f"{law}'s {name} must be a number, got {value!r}")
    try:
        a = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{law}'s {name} must be a number, got {value!r}"[:200]) from None
    if a.shape != ():
        raise ValueError(f"{law}'s {name} must be one number, got shape {a.shape}")
    return jnp.asarray(float(a), float)


def _recheck(law: str, name: str, value, *, low: float = 0.0, strict: bool = True) -> None:
    """ValueError (one line) unless a law's parameter is finite and above ``low`` (at least
    ``low`` without ``strict``); a traced value (a sweep's axis) passes unchecked."""
    x = _value(value)
    if x is not None and (not math.isfinite(x) or (x <= low if strict else x < low)):
        raise ValueError(f"{law}'s {name} ({x!r}) must be finite and {'>' if strict else '>='} "
                         f"{low:g}")


def _value(a) -> Optional[float]:
    """A parameter as a Python float, or None when it is traced (no closed form then)."""
    return None if isinstance(a, jax.core.Tracer) else float(np.asarray(a))


class AbstractLaw(eqx.Module):
    """A law of nonnegative durations, drawn by inverse transform of uniform words."""

    @abc.abstractmethod
    def quantile(self, u: Array) -> Array:
        """The law's quantile function at u in (0, 1), elementwise."""

    @abc.abstractmethod
    def cdf(self, x) -> Optional[np.ndarray]:
        """P(D <= x) in closed form (NumPy, elementwise in x), or None while a parameter is
        traced."""

    @abc.abstractmethod
    def expectation(self) -> Optional[float]:
        """E[D] (inf where it is infinite), or None while a parameter is traced."""

    @abc.abstractmethod
    def least(self) -> Optional[float]:
        """The bottom of the law's support, or None while a parameter is traced."""

    def constant(self) -> Optional[float]:
        """The value of a law that takes one value (:class:`Constant`), else None."""
        return None

    def sample(self, words: Array) -> Array:
        """One duration per uint32 word, in the run's float dtype."""
        return self.quantile(_unit(words))


class Constant(AbstractLaw):
    """D = value always (``value >= 0``; 0 for no communication time, say)."""

    value: Float[Array, ""]

    def __init__(self, value):
        self.value = _parameter("Constant", "value", value)

    def __check_init__(self):
        _recheck("Constant", "value", self.value, strict=False)

    def quantile(self, u):
        return jnp.broadcast_to(self.value, u.shape).astype(u.dtype)

    def cdf(self, x):
        v = _value(self.value)
        return None if v is None else (np.asarray(x, np.float64) >= v).astype(np.float64)

    def expectation(self):
        return _value(self.value)

    def constant(self):
        return _value(self.value)

    def least(self):
        return _value(self.value)


class Exponential(AbstractLaw):
    """D ~ Exponential with the given mean (rate 1 / mean): memoryless device times."""

    mean: Float[Array, ""]

    def __init__(self, mean):
        self.mean = _parameter("Exponential", "mean", mean)

    def __check_init__(self):
        _recheck("Exponential", "mean", self.mean)

    def quantile(self, u):
        return (-self.mean * jnp.log1p(-u)).astype(u.dtype)

    def cdf(self, x):
        m = _value(self.mean)
        if m is None:
            return None
        x = np.asarray(x, np.float64)
        return np.where(x > 0, -np.expm1(-np.maximum(x, 0) / m), 0.0)

    def expectation(self):
        return _value(self.mean)

    def least(self):
        return 0.0


class ShiftedExponential(AbstractLaw):
    """D = shift + Exponential(mean): a least time and a memoryless excess (a standard
    model of device compute times in the straggler literature)."""

    shift: Float[Array, ""]
    mean: Float[Array, ""]

    def __init__(self, shift, mean):
        self.shift = _parameter("ShiftedExponential", "shift", shift)
        self.mean = _parameter("ShiftedExponential", "mean", mean)

    def __check_init__(self):
        _recheck("ShiftedExponential", "shift", self.shift, strict=False)
        _recheck("ShiftedExponential", "mean", self.mean)

    def quantile(self, u):
        return (self.shift - self.mean * jnp.log1p(-u)).astype(u.dtype)

    def cdf(self, x):
        a, m = _value(self.shift), _value(self.mean)
        if a is None or m is None:
            return None
        excess = np.asarray(x, np.float64) - a
        return np.where(excess > 0, -np.expm1(-np.maximum(excess, 0) / m), 0.0)

    def expectation(self):
        a, m = _value(self.shift), _value(self.mean)
        return None if a is None or m is None else a + m

    def least(self):
        return _value(self.shift)


class LogNormal(AbstractLaw):
    """D = exp(mu + sigma Z), Z standard normal: device speeds spread over orders of
    magnitude."""

    mu: Float[Array, ""]
    sigma: Float[Array, ""]

    def __init__(self, mu, sigma):
        self.mu = _parameter("LogNormal", "mu", mu)
        self.sigma = _parameter("LogNormal", "sigma", sigma)

    def __check_init__(self):
        _recheck("LogNormal", "mu", self.mu, low=-math.inf)
        _recheck("LogNormal", "sigma", self.sigma)

    def quantile(self, u):
        return jnp.exp(self.mu + self.sigma * ndtri(u)).astype(u.dtype)

    def cdf(self, x):
        mu, s = _value(self.mu), _value(self.sigma)
        if mu is None or s is None:
            return None
        x = np.asarray(x, np.float64)
        z = (np.log(np.where(x > 0, x, 1.0)) - mu) / (s * math.sqrt(2.0))
        return np.where(x > 0, 0.5 * np.vectorize(math.erfc)(-z), 0.0)

    def expectation(self):
        mu, s = _value(self.mu), _value(self.sigma)
        return None if mu is None or s is None else math.exp(mu + s * s / 2)

    def least(self):
        return 0.0


class Pareto(AbstractLaw):
    """D = scale U^(-1 / shape): heavy-tailed (infinite variance for shape <= 2, infinite
    mean for shape <= 1)."""

    scale: Float[Array, ""]
    shape: Float[Array, ""]

    def __init__(self, scale, shape):
        self.scale = _parameter("Pareto", "scale", scale)
        self.shape = _parameter("Pareto", "shape", shape)

    def __check_init__(self):
        _recheck("Pareto", "scale", self.scale)
        _recheck("Pareto", "shape", self.shape)

    def quantile(self, u):
        return (self.scale * jnp.exp(-jnp.log1p(-u) / self.shape)).astype(u.dtype)

    def cdf(self, x):
        xm, a = _value(self.scale), _value(self.shape)
        if xm is None or a is None:
            return None
        x = np.asarray(x, np.float64)
        return np.where(x > xm, -np.expm1(a * np.log(xm / np.maximum(x, xm))), 0.0)

    def expectation(self):
        xm, a = _value(self.scale), _value(self.shape)
        if xm is None or a is None:
            return None
        return math.inf if a <= 1 else a * xm / (a - 1)

    def least(self):
        return _value(self.scale)


def _check_law(name: str, law) -> None:
    if not isinstance(law, AbstractLaw):
        raise ValueError(f"Clock's {name} must be a law of durations (fedjax_abc.timing."
                         f"Exponential, LogNormal, ...), got {type(law).__name__}")


def _speed_array(speed) -> Array:
    _check_speeds(speed)
    return jnp.asarray(np.asarray(speed, np.float64), float)


def _check_speeds(speed) -> None:
    """ValueError (one line) unless ``speed`` is one finite factor > 0 per client (shape
    (n,)): a factor of 0 lets a client meet any deadline, a negative one runs the clock
    backwards, an infinite one makes a step of no work take NaN time. A traced value (inside
    a traced function) passes unchecked."""
    if isinstance(speed, jax.core.Tracer):
        return
    try:
        a = np.asarray(speed, np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"Clock's speed must be a law or one factor per client (shape (n,)), "
                         f"got {speed!r}"[:200]) from None
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"Clock's speed must be a law or one factor per client (shape (n,)), "
                         f"got shape {a.shape}")
    bad = ~np.isfinite(a) | (a <= 0)
    if np.any(bad):
        raise ValueError(f"Clock's speed factors must be finite and > 0, got "
                         f"{float(a[bad][0])!r} for client {int(np.flatnonzero(bad)[0])}")


def speeds_from_file(path) -> np.ndarray:
    """Per-client speed factors from a text file (one positive number per line, or
    comma or white-space separated; ``#`` starts a comment), e.g. measured device times
    relative to a reference device: ``Clock(compute, speed=speeds_from_file(path))``."""
    import re

    try:
        with open(path, encoding="utf-8") as f:
            text = "\n".join(line.split("#", 1)[0] for line in f)
    except OSError as err:
        raise ValueError(f"cannot read the speed file {path}: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not a text file of speed factors (byte {err.start} is not "
                         "UTF-8 text)") from None
    fields = [s for s in re.split(r"[,\s]+", text) if s]
    try:
        values = np.array([float(s) for s in fields], np.float64)
    except ValueError as err:
        raise ValueError(f"{path}: speed factors must be numbers ({err})") from None
    if values.size == 0:
        raise ValueError(f"{path}: no speed factors in the file")
    _speed_array(values)
    return values


class Clock(eqx.Module):
    """How long a client's work takes: D_i = K_i s_i c_i + m_i (see the module docstring).

    Args:
      compute: the law of c_i, the time of one local step, drawn per client and round
        (default: ``Constant(1.0)``).
      speed: s_i, per-client factors fixed for a trial: a law (drawn once per trial) or an
        array of n factors (the same in every trial, e.g. :func:`speeds_from_file`);
        default all 1.
      communication: the law of m_i, drawn per client and round (default: none, 0).

    Speed factors must be finite and > 0 (given, or a :class:`Constant` law): the clock
    checks them when made and again at every run (a value put in with ``eqx.tree_at`` or a
    sweep's ``clock.speed`` axis gets the same error). A law may still draw a factor that
    overflows to inf or underflows to 0 in the run's dtype; a step's time s_i c_i is then
    defined as 0 where either factor is 0 (no work takes no time, at any speed), never the
    NaN of 0 x inf.

    Example:
      >>> import fedjax_abc as fa
      >>> clock = fa.timing.Clock(fa.timing.Exponential(1.0), speed=fa.timing.Pareto(1.0, 1.5))
      >>> clock.num_words(10)
      30
    """

    compute: AbstractLaw
    speed: Union[AbstractLaw, Float[Array, " n"]]
    communication: AbstractLaw

    def __init__(self, compute: Optional[AbstractLaw] = None, *, speed=None,
                 communication: Optional[AbstractLaw] = None):
        compute = Constant(1.0) if compute is None else compute
        speed = Constant(1.0) if speed is None else speed
        communication = Constant(0.0) if communication is None else communication
        _check_law("compute", compute)
        _check_law("communication", communication)
        self.compute, self.communication = compute, communication
        self.speed = speed if isinstance(speed, AbstractLaw) else _speed_array(speed)

    def __check_init__(self):
        _check_law("compute", self.compute)
        _check_law("communication", self.communication)
        if isinstance(self.speed, AbstractLaw):
            value = self.speed.constant()
            if value is not None and value <= 0:
                raise ValueError(f"Clock's speed factors must be finite and > 0, got the "
                                 f"constant law {value!r} (every client would meet any "
                                 "deadline in no time)")
        else:
            _check_speeds(self.speed)

    def validate(self, n: int) -> None:
        """ValueError when the given speed factors are not one per client."""
        if not isinstance(self.speed, AbstractLaw) and self.speed.shape[0] != n:
            raise ValueError(f"Clock's speed has {self.speed.shape[0]} factors for n={n} "
                             "clients: one per client")

    def num_words(self, n: int) -> int:
        """Words :meth:`speeds` (n) and :meth:`durations` (2 n) read."""
        return 3 * n

    def speeds(self, words: Array, dtype) -> Array:
        """s_i of every client (shape (n,)) from n words (unused for given factors)."""
        if isinstance(self.speed, AbstractLaw):
            return self.speed.sample(words).astype(dtype)
        return self.speed.astype(dtype)

    def step_and_communication(self, words: Array, speed: Array) -> tuple[Array, Array]:
        """(s_i c_i, m_i), the time of one step and of the communication, from 2 words per
        entry of ``speed``: words[0] the c_i's, words[1] the m_i's (shape (2,) +
        speed.shape). s_i c_i is 0 where either factor is 0 (a factor drawn as inf times a
        step of no time: no work, no time), never NaN."""
        c = self.compute.sample(words[0]).astype(speed.dtype)
        step = jnp.where((c == 0) | (speed == 0), jnp.zeros((), speed.dtype), speed * c)
        return step, self.communication.sample(words[1]).astype(speed.dtype)

    def durations(self, words: Array, steps, speed: Array) -> Array:
        """D_i = K_i s_i c_i + m_i (:meth:`step_and_communication`'s words); ``steps``:
        K_i (broadcast)."""
        step, m = self.step_and_communication(words, speed)
        return steps * step + m

    def finish_probability(self, within, steps: int, n: int) -> Optional[np.ndarray]:
        """P(D_i <= within) for every client (shape (n,)) in closed form, or None.

        Known where the speeds are fixed (given, or a :class:`Constant` law) and one of the
        compute and communication laws is a :class:`Constant`: then D_i is a constant plus
        a scaled draw of the other law, and the probability its ``cdf``. ``within`` may
        be infinite (probability 1).
        """
        if isinstance(self.speed, AbstractLaw):
            s = self.speed.constant()
            if s is None:
                return None
            s = np.full(n, s)
        else:
            s = np.asarray(self.speed, np.float64)
        if math.isinf(within):
            return np.ones(n)
        m, c = self.communication.constant(), self.compute.constant()
        if m is not None:
            p = self.compute.cdf((within - m) / (steps * s))
        elif c is not None:
            p = self.communication.cdf(within - steps * s * c)
        else:
            p = None
        return None if p is None else np.broadcast_to(np.asarray(p, np.float64), (n,)).copy()
