"""Checks of the public constructors' arguments: one-line errors naming the argument.

Each helper returns the argument in the form the constructor uses (an int, a float, the
key) or raises ValueError / TypeError naming it, before NumPy or JAX would fail deep inside
(a string where a number goes, an int where a key goes) or accept it silently (``float``
reads the string ``"0.1"``; ``int`` cuts 2.5 to 2).
"""

from __future__ import annotations

import math
import types
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["DTYPES", "X64_FIX", "check_count", "check_flag", "check_key", "check_real",
           "real_array", "require_x64"]

# the run's floating dtypes by name (read-only)
DTYPES = types.MappingProxyType({"float64": jnp.float64, "float32": jnp.float32})

# what to do where JAX's 64-bit mode is needed and off (importing the package leaves it off)
X64_FIX = 'call jax.config.update("jax_enable_x64", True) right after importing jax'


def require_x64(what: str) -> None:
    """ValueError (one line, naming the fix) unless JAX's 64-bit mode is on: ``what`` holds
    float64 values, which JAX would otherwise make float32 without a word."""
    if not jax.config.jax_enable_x64:
        raise ValueError(f"{what} needs JAX's 64-bit mode, which is off: {X64_FIX}, before "
                         "building it")


def check_count(name: str, value, low: int = 1) -> int:
    """An integer >= ``low`` (bools, floats and strings refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value}")
    return int(value)


def check_real(name: str, value, *, low: Optional[float] = None, strict: bool = False) -> float:
    """A finite real number (a 0-d array too), >= ``low`` (> with ``strict``)."""
    if isinstance(value, (bool, str, bytes)) or value is None:
        raise ValueError(f"{name} must be a number, got {value!r}")
    try:
        a = np.asarray(value)
    except Exception:  # noqa: BLE001 - not array-like
        a = None
    if a is None or a.shape != () or a.dtype.kind not in "iuf":
        raise ValueError(f"{name} must be a number, got {value!r}"[:200])
    out = float(a)
    if not math.isfinite(out) or (low is not None and (out <= low if strict else out < low)):
        bound = "" if low is None else f" and {'>' if strict else '>='} {low:g}"
        raise ValueError(f"{name} ({out:g}) must be finite{bound}")
    return out


def check_flag(name: str, value) -> bool:
    """True or False (NumPy's too), as a Python bool."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}"[:200])
    return bool(value)


def real_array(name: str, value) -> np.ndarray:
    """``value`` as a float64 array: ValueError naming ``name`` for strings, ragged lists,
    complex or non-numeric values (NumPy would raise deep inside, or drop the imaginary
    part)."""
    if _is_key(value):  # NumPy cannot read it: a TypeError from inside JAX otherwise
        raise ValueError(f"{name} must be an array of real numbers, got a JAX PRNG key: are key "
                         f"and {name} swapped? (key=jax.random.key(seed), {name}=an array)")
    try:
        a = np.asarray(value) if not isinstance(value, (str, bytes)) else None
    except (TypeError, ValueError):  # a ragged list, an object NumPy cannot read
        a = None
    if a is None or a.dtype.kind not in "biuf":
        raise ValueError(f"{name} must be an array of real numbers, got {value!r}"[:200])
    return a.astype(np.float64)


def _real_numbers(value) -> bool:
    """Whether ``value`` is an array (or list) of real numbers, one or more axes."""
    if not isinstance(value, (jax.Array, np.ndarray, list, tuple)) or _is_key(value):
        return False
    try:
        a = np.asarray(value)
    except (TypeError, ValueError):
        return False
    return a.ndim >= 1 and a.dtype.kind in "biuf" and a.dtype != np.uint32  # not key data


def _is_key(value) -> bool:
    """Whether ``value`` is a JAX array of typed PRNG keys (``jax.random.key(seed)``)."""
    return isinstance(value, jax.Array) and jax.dtypes.issubdtype(value.dtype,
                                                                  jax.dtypes.prng_key)


def check_key(name: str, key) -> jax.Array:
    """A single JAX PRNG key (``jax.random.key(seed)``; raw uint32 key data of shape (2,) too)."""
    if isinstance(key, jax.Array) and (
            (jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) and key.shape == ())
            or (key.dtype == np.uint32 and key.shape == (2,))):
        return key
    swapped = ""
    if name == "key" and _real_numbers(key):  # an x0 in the key's place
        swapped = "; are key and x0 swapped? (key=jax.random.key(seed), x0=an array)"
    text = f"{key!r}"[:120]
    raise ValueError(f"{name} must be a single JAX PRNG key, e.g. jax.random.key(0), got "
                     f"{text}{swapped}")
