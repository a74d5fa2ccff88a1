"""Validation of algorithm hyperparameters (one-line errors naming the parameter)."""

from __future__ import annotations

import numpy as np

__all__ = ["check_leaf", "check_momentum", "local_objective", "momentum", "nonnegative_scalar",
           "positive_scalar"]


def _scalar(name: str, value) -> float:
    if isinstance(value, (bool, str, bytes)):  # NumPy would read "0.1" as a number
        raise ValueError(f"{name} must be a number, got {value!r}")
    try:
        v = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if v.shape != ():
        raise ValueError(f"{name} must be a scalar, got shape {v.shape}")
    if not np.isfinite(v):
        raise ValueError(f"{name} must be finite, got {float(v)}")
    return float(v)


def _leaf(value):
    """A checked hyperparameter as an array leaf: a NumPy float64 scalar, passed with each
    compiled call (a JAX array made here would cost a copy to the device at every
    construction, the default algorithm's at every ``simulate`` call)."""
    return np.asarray(value, np.float64)


def positive_scalar(name: str, value):
    """``value`` as a float array leaf; ValueError unless it is a finite number > 0."""
    if _scalar(name, value) <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return _leaf(value)


def nonnegative_scalar(name: str, value):
    """``value`` as a float array leaf; ValueError unless it is a finite number >= 0."""
    if _scalar(name, value) < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return _leaf(value)


def _concrete(value):
    """``value`` as a NumPy array, or None for a tracer (inside a traced function)."""
    try:
        return np.asarray(value, dtype=np.float64)
    except Exception:  # a tracer has no concrete value
        return None


def check_leaf(name: str, value, low: float, strict: bool) -> None:
    """ValueError unless the (concrete) leaf is a finite number > low (``strict``) or >= low.

    For ``__check_init__``: a value put into a field by ``eqx.tree_at`` (a sweep's grid
    axis) passes the same checks as the constructor's argument. Tracers pass unchecked.
    """
    v = _concrete(value)
    if v is None:
        return
    if v.shape != ():  # as the constructor's _scalar, for an array put in by eqx.tree_at
        raise ValueError(f"{name} must be a scalar, got shape {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{name} must be finite, got {value}")
    if np.any(v <= low) if strict else np.any(v < low):
        raise ValueError(f"{name} must be {'>' if strict else '>='} {low:g}, got "
                         f"{v.tolist() if v.ndim else float(v)}")


def momentum(name: str, value):
    """``value`` as a float array leaf; ValueError unless it is a finite number in [0, 1)."""
    leaf = nonnegative_scalar(name, value)
    if float(leaf) >= 1:
        raise ValueError(f"{name} must be < 1, got {float(leaf)}")
    return leaf


def check_momentum(name: str, value) -> None:
    """:func:`check_leaf` for a momentum: in [0, 1)."""
    check_leaf(name, value, 0.0, strict=False)
    check_leaf(f"1 - {name}", 1 - value, 0.0, strict=True)


def local_objective(name: str, info):
    """``info.objective`` (a client's index, f_i and grad f_i), or a one-line ValueError
    where the engine gives none (an asynchronous client) to an algorithm that needs it."""
    if info.objective is None:
        raise ValueError(f"{name} needs each client's own loss (LocalInfo.objective), which "
                         "this engine does not give its clients (run it with fa.simulate)")
    return info.objective
