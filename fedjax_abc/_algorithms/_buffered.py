"""Asynchronous aggregation: the server rules of FedAsync and FedBuff, staleness functions.

A client's update arrives tau server steps after the model it started from (its
staleness). The rules here say what the server does with the updates of one server step;
``fa.timing.simulate_async`` runs them on a simulated clock.

- :class:`FedAsync` (Xie, Koyejo and Gupta, "Asynchronous federated optimization", 2019):
  one update per step, x <- (1 - a s(tau)) x + a s(tau) y, y the client's local model.
- :class:`FedBuff` (Nguyen et al., "Federated learning with buffered asynchronous
  aggregation", AISTATS 2022): K updates per step,
  x <- x + eta_g (1 / K) sum_k s(tau_k) Delta_k, Delta_k = y_k - x_{start_k}.

Staleness functions s(tau) (Xie et al. 2019, Section 5.2): :class:`ConstantStaleness`
(1), :class:`PolynomialStaleness` ((1 + tau)^(-a); FedBuff's 1 / sqrt(1 + tau) at
a = 1/2), :class:`HingeStaleness` (1 for tau <= b, else 1 / (a (tau - b) + 1)).
"""


import abc
from typing import Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from fedjax_abc._algorithms._checks import (_concrete, check_leaf, nonnegative_scalar,
                                            positive_scalar)
from fedjax_abc._problems._args import check_count

__all__ = ["AbstractAsyncRule", "AbstractStaleness", "ConstantStaleness", "FedAsync", "FedBuff",
           "HingeStaleness", "PolynomialStaleness", "check_staleness"]


class AbstractStaleness(eqx.Module):
    """s(tau): how much an update of staleness tau counts (s(0) = 1, nonincreasing)."""

    @abc.abstractmethod
    def __call__(self, tau: Array) -> Array:
        """s at integer staleness tau (elementwise), a float."""


class ConstantStaleness(AbstractStaleness):
    """s(tau) = 1: staleness ignored."""

    def __call__(self, tau):
        return jnp.ones(jnp.shape(tau), float)


class PolynomialStaleness(AbstractStaleness):
    """s(tau) = (1 + tau)^(-a), a >= 0 (FedBuff's default a = 1/2)."""

    a: Float[Array, ""]

    def __init__(self, a=0.5):
        self.a = nonnegative_scalar("PolynomialStaleness's a", a)

    def __check_init__(self):
        check_leaf("PolynomialStaleness's a", self.a, 0.0, strict=False)

    def __call__(self, tau):
        return jnp.power(1.0 + jnp.asarray(tau, float), -self.a)


class HingeStaleness(AbstractStaleness):
    """s(tau) = 1 for tau <= b, 1 / (a (tau - b) + 1) beyond (a > 0, b >= 0)."""

    a: Float[Array, ""]
    b: Float[Array, ""]

    def __init__(self, a=10.0, b=4.0):
        self.a = positive_scalar("HingeStaleness's a", a)
        self.b = nonnegative_scalar("HingeStaleness's b", b)

    def __check_init__(self):
        check_leaf("HingeStaleness's a", self.a, 0.0, strict=True)
        check_leaf("HingeStaleness's b", self.b, 0.0, strict=False)

    def __call__(self, tau):
        tau = jnp.asarray(tau, float)
        return jnp.where(tau <= self.b, 1.0, 1.0 / (self.a * (tau - self.b) + 1.0))


class AbstractAsyncRule(eqx.Module):
    """The server's rule for the updates that arrive in one server step.

    Attributes:
      buffer: K, how many arrivals make one server step (a Python int: it sets shapes).
      staleness: s(tau).
    """

    buffer: eqx.AbstractVar[int]
    staleness: eqx.AbstractVar[AbstractStaleness]

    @abc.abstractmethod
    def payload(self, x_start: Array, y: Array) -> Array:
        """What a client's work leaves for the server (shape (d,)), from the model it
        started from and its local model: kept while the client is in flight."""

    @abc.abstractmethod
    def server_step(self, x: Array, payloads: Array, weights: Array) -> Array:
        """The next model from the current one, the K arrivals' payloads (K, d) and their
        staleness weights s(tau_k) (K,)."""


# staleness values at which a staleness function is checked: tau = 0, ..., _CHECKED_TAU
_CHECKED_TAU = 256


def check_staleness(staleness) -> AbstractStaleness:
    """``staleness``, checked at tau = 0, ..., 256 where its values are known (not inside a
    trace): s(0) = 1, every value in [0, 1] and nonincreasing, as a weight must be (a
    negative, NaN or growing weight ran silently to a meaningless model)."""
    if not isinstance(staleness, AbstractStaleness):
        raise ValueError(f"staleness must be a fedjax_abc.timing staleness function, got "
                         f"{type(staleness).__name__}")
    s = staleness(jnp.arange(_CHECKED_TAU + 1))
    if isinstance(s, jax.core.Tracer):
        return staleness
    s = np.asarray(s, np.float64)
    name = type(staleness).__name__
    if s.shape != (_CHECKED_TAU + 1,):
        raise ValueError(f"{name} must give one weight per staleness (elementwise), got shape "
                         f"{s.shape} for {_CHECKED_TAU + 1} values")
    bad = ~np.isfinite(s) | (s < 0) | (s > 1)
    if bad.any():
        tau = int(np.argmax(bad))
        raise ValueError(f"{name} must give weights in [0, 1]: s({tau}) = {s[tau]}")
    if s[0] != 1:
        raise ValueError(f"{name} must give s(0) = 1, got {s[0]}")
    if (np.diff(s) > 0).any():
        tau = int(np.argmax(np.diff(s) > 0))
        raise ValueError(f"{name} must be nonincreasing: s({tau}) = {s[tau]} < s({tau + 1}) = "
                         f"{s[tau + 1]}")
    return staleness


def _check_buffer(K) -> int:
    return check_count("buffer (K)", K)


class FedBuff(AbstractAsyncRule):
    """FedBuff: the server steps once K updates have arrived.

    x <- x + eta_g (1 / K) sum_k s(tau_k) (y_k - x_{start_k}).

    Args:
      buffer: K, the arrivals per server step.
      server_stepsize: eta_g > 0.
      staleness: s(tau) (default 1 / sqrt(1 + tau), as in Nguyen et al. 2022).

    Example:
      >>> import fedjax_abc as fa
      >>> fa.timing.FedBuff(buffer=10, server_stepsize=1.0).buffer
      10
    """

    buffer: int = eqx.field(static=True)
    server_stepsize: Float[Array, ""]
    staleness: AbstractStaleness

    def __init__(self, buffer: int, server_stepsize=1.0,
                 staleness: Optional[AbstractStaleness] = None):
        self.buffer = _check_buffer(buffer)
        self.server_stepsize = positive_scalar("server_stepsize (eta_g)", server_stepsize)
        self.staleness = check_staleness(PolynomialStaleness(0.5) if staleness is None else staleness)

    def __check_init__(self):
        check_leaf("server_stepsize (eta_g)", self.server_stepsize, 0.0, strict=True)

    def payload(self, x_start, y):
        return y - x_start

    def server_step(self, x, payloads, weights):
        step = jnp.sum(weights.astype(x.dtype)[:, None] * payloads, axis=0) / self.buffer
        return x + self.server_stepsize.astype(x.dtype) * step


class FedAsync(AbstractAsyncRule):
    """FedAsync: the server mixes in each arriving model as it comes.

    x <- (1 - a s(tau)) x + a s(tau) y.

    Args:
      mixing: a in (0, 1].
      staleness: s(tau) (default constant, Xie et al.'s plain FedAsync).

    Example:
      >>> import fedjax_abc as fa
      >>> fa.timing.FedAsync(mixing=0.6).buffer
      1
    """

    mixing: Float[Array, ""]
    staleness: AbstractStaleness
    buffer: int = eqx.field(static=True, default=1)

    def __init__(self, mixing=0.6, staleness: Optional[AbstractStaleness] = None):
        self.mixing = positive_scalar("mixing (a)", mixing)
        self.staleness = check_staleness(ConstantStaleness() if staleness is None else staleness)
        self.buffer = 1

    def __check_init__(self):
        check_leaf("mixing (a)", self.mixing, 0.0, strict=True)
        v = _concrete(self.mixing)
        if v is not None and float(v) > 1:
            raise ValueError(f"mixing (a={float(v):g}) must be in (0, 1]")

    def payload(self, x_start, y):
        return y

    def server_step(self, x, payloads, weights):
        a = self.mixing.astype(x.dtype) * weights[0].astype(x.dtype)
        return (1 - a) * x + a * payloads[0]
