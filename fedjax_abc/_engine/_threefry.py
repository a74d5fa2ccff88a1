"""The Threefry-2x32 hash (20 rounds), written out as plain array arithmetic.

It returns the same bits as ``jax.extend.random.threefry_2x32`` and ``jax.random.fold_in``
for threefry keys. On CPU the built-in hash is lowered as a five-step loop, which XLA runs
as a separate loop for every call; a round of the simulator hashes three times (round key,
sampler words, client words), and on the small arrays of ``gather`` mode these loops
cost more than the local steps. Written out, the hash fuses with the arithmetic around it.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

__all__ = ["threefry2x32", "fold_in_data"]

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
