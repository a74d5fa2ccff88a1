"""Validation of algorithm hyperparameters (one-line errors naming the parameter)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

__all__ = ["nonnegative_scalar", "positive_scalar"]


def _scalar(name: str, value) -> float:
    if isinstance(value, bool):
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


def positive_scalar(name: str, value):
    """``value`` as a float array leaf; ValueError unless it is a finite number > 0."""
    if _scalar(name, value) <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return jnp.asarray(value, float)


def nonnegative_scalar(name: str, value):
    """``value`` as a float array leaf; ValueError unless it is a finite number >= 0."""
    if _scalar(name, value) < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return jnp.asarray(value, float)
