"""The package's two counter-based hashes, written out as plain array arithmetic.

- :func:`threefry2x32`: the Threefry-2x32 hash (20 rounds). It returns the same bits as
  ``jax.extend.random.threefry_2x32`` and ``jax.random.fold_in`` for threefry keys. On CPU
  the built-in hash is lowered as a five-step loop, which XLA runs as a separate loop for
  every call; a round of the simulator hashes three times (round key, sampler words, client
  words), and on the small arrays of ``gather`` mode these loops cost more than the local
  steps. Written out, the hash fuses with the arithmetic around it.
- :func:`splitmix64`: SplitMix64's output function (Steele, Lea and Flood, OOPSLA 2014),
  about a quarter of Threefry's arithmetic for 64 bits; needs ``jax_enable_x64``.

The engine's counter streams (``_engine._random``) use both; the samplers that draw more
words from a round's own (:class:`~fedjax_abc.Bernoulli`, :class:`~fedjax_abc.Poisson`) too.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

__all__ = ["GOLDEN_GAMMA", "fold_in_data", "splitmix64", "threefry2x32"]

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)


def _rotl(x: Array, r: int) -> Array:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def threefry2x32(k0: Array, k1: Array, x0: Array, x1: Array) -> tuple[Array, Array]:
    """Threefry-2x32 of the counter pairs (x0, x1) under the key (k0, k1); uint32, broadcast."""
    k0, k1, x0, x1 = (jnp.asarray(a, jnp.uint32) for a in (k0, k1, x0, x1))
    ks = (k0, k1, k0 ^ k1 ^ _PARITY)
    x0 = x0 + ks[0]
    x1 = x1 + ks[1]
    for s in range(5):
        for r in _ROTATIONS[s % 2]:
            x0 = x0 + x1
            x1 = _rotl(x1, r) ^ x0
        x0 = x0 + ks[(s + 1) % 3]
        x1 = x1 + ks[(s + 2) % 3] + np.uint32(s + 1)
    return x0, x1


def fold_in_data(key_data: Array, data) -> Array:
    """The key data of ``jax.random.fold_in(key, data)`` for a threefry key's data.

    ``key_data`` is uint32[2], or uint32[2, R] for R keys (one a column).
    """
    y0, y1 = threefry2x32(key_data[0], key_data[1], jnp.uint32(0),
                          jnp.asarray(data).astype(jnp.uint32))
    return jnp.stack([y0, y1])


GOLDEN_GAMMA = np.uint64(0x9E3779B97F4A7C15)  # 2^64 / golden ratio, SplitMix64's increment
_MIX = (np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))


def splitmix64(z: Array) -> Array:
    """SplitMix64's output function (the finaliser of Stafford's Mix13) of uint64 z."""
    z = (z ^ (z >> np.uint64(30))) * _MIX[0]
    z = (z ^ (z >> np.uint64(27))) * _MIX[1]
    return z ^ (z >> np.uint64(31))
