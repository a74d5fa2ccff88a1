"""The simulator's random words against JAX's own Threefry-2x32, which it must reproduce.

- the written-out hash gives the bits of ``jax.extend.random.threefry_2x32``, and
  ``fold_in_data`` those of ``jax.random.fold_in``;
- a client's words are words i W .. i W + W - 1 of stream 1 (the whole stream hashed by
  JAX in one call here), whichever way the package hashes them (word by word for W < 8,
  block by block from 8 on).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend.random import threefry_2x32

from fedjax_abc._engine import _random
from fedjax_abc._engine._threefry import fold_in_data, threefry2x32

RNG = np.random.default_rng(0)


def test_hash_is_threefry_2x32():
    for _ in range(5):
        k = RNG.integers(0, 2 ** 32, 2, dtype=np.uint32)
        count = RNG.integers(0, 2 ** 32, 64, dtype=np.uint32)
        expected = np.asarray(threefry_2x32(jnp.asarray(k), jnp.asarray(count)))
        y0, y1 = jax.jit(threefry2x32)(k[0], k[1], count[:32], count[32:])
        np.testing.assert_array_equal(np.concatenate([y0, y1]), expected)


@pytest.mark.parametrize("t", [0, 1, 17, 2 ** 31 - 1, 2 ** 32 - 1])
def test_fold_in_data_is_fold_in(t):
    key = jax.random.key(123)
    expected = jax.random.key_data(jax.random.fold_in(key, t))
    got = fold_in_data(jax.random.key_data(key), jnp.uint32(t))
    np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))


def _stream(key_data, stream, num_words):
    """Words 0 .. num_words - 1 of a stream: word 2j + h is half h of hash(stream, j)."""
    blocks = (num_words + 1) // 2
    lo = jnp.arange(blocks, dtype=jnp.uint32)
    out = np.asarray(threefry_2x32(key_data, jnp.concatenate([jnp.full_like(lo, stream), lo])))
    return np.stack([out[:blocks], out[blocks:]], axis=-1).reshape(-1)[:num_words]


def test_stream_words():
    k = jnp.asarray(RNG.integers(0, 2 ** 32, 2, dtype=np.uint32))
    for num in (1, 2, 5, 16):
        np.testing.assert_array_equal(np.asarray(_random.stream_words(k, 0, num)),
                                      _stream(k, 0, num))


@pytest.mark.parametrize("W", [1, 2, 3, 7, 8, 9, 33, 500])
def test_client_words_are_their_slice_of_the_stream(W):
    n = 50
    k = jnp.asarray(RNG.integers(0, 2 ** 32, 2, dtype=np.uint32))
    stream = _stream(k, 1, n * W)
    clients = np.array([0, 1, 2, 7, 48, 49, 13, 13], dtype=np.int32)  # odd and even starts
    got = np.asarray(jax.jit(_random.client_words, static_argnums=2)(k, clients, W))
    expected = np.stack([stream[i * W:(i + 1) * W] for i in clients])
    np.testing.assert_array_equal(got, expected)
