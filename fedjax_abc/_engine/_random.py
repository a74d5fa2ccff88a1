"""Counter-based random streams: a client's draws are a function of (trial key, t, i) alone.

Round t of a trial has the key data k_t. With generator ``"threefry"`` (the default) it is
that of ``fold_in(trial_key, t)``, and the Threefry-2x32 hash of the counter pair (s, j)
under k_t gives words 2j and 2j + 1 of stream s. Generator ``"splitmix"`` uses SplitMix64
(Steele, Lea and Flood, OOPSLA 2014) for both: k_t is output t of a SplitMix64 generator
seeded with the trial key's 64 bits, and word g of stream s is the upper half of output
s 2^32 + g of a SplitMix64 generator seeded with k_t (its finaliser applied to k_t plus
the counter times the golden-ratio increment), about a quarter of Threefry's arithmetic.
Stream 0 feeds the sampler; stream 1 (the oracle's noise) is cut into consecutive pieces of
W words, piece i being client i's; streams 2 (random local-step counts) and 3 (message
transforms) are cut the same way (W = what the oracle asks for Q steps, 1 word for up to 32 sign flips). A
client's noise does not depend on the mode or on which other clients were sampled, so
``mask`` and ``gather`` modes make the same draws, and a round costs about n W hashes in
``mask`` mode, m W in ``gather`` mode (m sampler slots; W / 2 each for clients of 8 words
or more, hashed block by block).
"""

from __future__ import annotations

import types

import jax.numpy as jnp
import numpy as np
from jax.extend.random import threefry_2x32
from jaxtyping import Array

from fedjax_abc._engine._threefry import fold_in_data, threefry2x32
from fedjax_abc._problems._hash import GOLDEN_GAMMA, splitmix64

__all__ = ["AGGREGATOR_STREAM", "ATTACK_STREAM", "BYZANTINE_STREAM", "GENERATORS",
           "GRAPH_STREAM", "TRIAL_GRAPH_STREAM",
           "NOISE_STREAM", "SAMPLER_STREAM", "SPEED_STREAM", "STEPS_STREAM", "TIME_STREAM",
           "TRANSFORM_STREAM",
           "client_noise", "client_words", "round_keys",
           "splitmix64", "stream_words"]

_GAMMA = GOLDEN_GAMMA  # SplitMix64's increment


def _as_uint64(key_data: Array) -> Array:
    """The 64 bits of key data (2, ...) as uint64 (...): the first word the upper half."""
    return (key_data[0].astype(jnp.uint64) << np.uint64(32)) | key_data[1].astype(jnp.uint64)


def _splitmix_words(key_data: Array, stream, g: Array) -> Array:
    """Words g of counter stream ``stream`` under key data k_t, generator "splitmix"."""
    counter = (jnp.asarray(stream, jnp.uint64) << np.uint64(32)) + g.astype(jnp.uint64) \
        + np.uint64(1)
    return (splitmix64(_as_uint64(key_data) + counter * _GAMMA) >> np.uint64(32)).astype(jnp.uint32)


def round_keys(trial_key_data: Array, t, generator: str = "threefry") -> Array:
    """k_t, the key data of round t, from a trial's key data: uint32 (2,) or (2, R) for R trials.

    "threefry": that of ``fold_in(trial_key, t)``. "splitmix": output t of a SplitMix64
    generator seeded with the trial key's 64 bits, split into two uint32 (one hash, where
    ``fold_in`` costs a Threefry-2x32-20).
    """
    if generator != "splitmix":
        return fold_in_data(trial_key_data, t)
    position = jnp.asarray(t).astype(jnp.uint64) + np.uint64(1)
    k = splitmix64(_as_uint64(trial_key_data) + position * _GAMMA)
    return jnp.stack([(k >> np.uint64(32)).astype(jnp.uint32), k.astype(jnp.uint32)])


def _words(key_data: Array, stream, g: Array) -> Array:
    """Words g (a uint32 array of indices) of counter stream ``stream`` under key data k_t.

    Word g is half g mod 2 of the Threefry-2x32 hash of the counter pair (stream, g // 2).
    Each word hashes its own block, in one fused kernel with what consumes it: fine for a
    few words a client (XLA would hash a block once per word that reads it anyway).
    """
    y0, y1 = threefry2x32(key_data[0], key_data[1], jnp.uint32(stream), g >> 1)
    return jnp.where((g & 1) == 1, y1, y0)


def _block_words(key_data: Array, stream, first: Array, span: int) -> Array:
    """Words 2 first .. 2 (first + span) - 1 of a stream, block by block: shape (m, 2 span).

    JAX's own Threefry primitive runs as a loop on CPU, so its output is stored, not fused:
    each block is hashed once however many words read it. For clients with many words.
    """
    lo = (first[:, None] + jnp.arange(span, dtype=jnp.uint32)[None, :]).reshape(-1)
    out = threefry_2x32(key_data, jnp.concatenate([jnp.full_like(lo, stream), lo]))
    return jnp.stack([out[: lo.shape[0]], out[lo.shape[0]:]], axis=-1).reshape(-1, 2 * span)


_BLOCKWISE_MIN_WORDS = 8  # clients with this many words per round hash block by block


# word by word: (key data, stream, word indices g) -> words g, per generator
_WORD_HASH = types.MappingProxyType({"threefry": _words, "splitmix": _splitmix_words})
GENERATORS = tuple(_WORD_HASH)


def stream_words(key_data: Array, stream, num_words: int, generator: str = "threefry") -> Array:
    """Words 0 .. num_words - 1 of counter stream ``stream`` under key data k_t.

    ``key_data`` is uint32[2] (words of shape (num_words,)) or uint32[2, R], the keys of R
    trials (words of shape (num_words, R), a trial a column).
    """
    g = jnp.arange(num_words, dtype=jnp.uint32)
    return _WORD_HASH[generator](key_data, stream, g if key_data.ndim == 1 else g[:, None])


# the counter streams of a round: the sampler's, the oracle noise's, the local-step counts',
# the message transforms'
SAMPLER_STREAM, NOISE_STREAM, STEPS_STREAM, TRANSFORM_STREAM = 0, 1, 2, 3
# an asynchronous run's: a dispatched client's duration (two words a client), the trial's
# speed factors (one word a client, under k_0)
TIME_STREAM, SPEED_STREAM = 4, 5
# robust aggregation's: the aggregator's words of a round (a random bucketing), the attack's
# (a random Byzantine vector), and a trial's draw of its Byzantine clients (under k_0)
AGGREGATOR_STREAM, ATTACK_STREAM, BYZANTINE_STREAM = 6, 7, 8
# gossip's: a round's random graph (a matching), and a trial's graph drawn once (under k_0)
GRAPH_STREAM, TRIAL_GRAPH_STREAM = 9, 10


def client_words(key_data: Array, clients: Array, num_words: int,
                 generator: str = "threefry", stream: int = NOISE_STREAM) -> Array:
    """The round's random words of the given clients, shape (len(clients), W).

    Client i owns words i W .. i W + W - 1 of a client stream (stream 1, the oracle's
    noise, by default): its words depend on (k_t, i) alone, whichever other clients are
    drawn.
    """
    W = num_words
    start = clients.astype(jnp.uint32) * W
    if generator == "splitmix" or W < _BLOCKWISE_MIN_WORDS:  # word by word, fused with the reader
        g = start[:, None] + jnp.arange(W, dtype=jnp.uint32)[None, :]
        return _WORD_HASH[generator](key_data, stream, g)
    if W % 2 == 0:  # every client's words start a block
        return _block_words(key_data, stream, start // 2, W // 2)
    words = _block_words(key_data, stream, start // 2, W // 2 + 1)
    odd = (start % 2 == 1)[:, None]  # the client's first word is the second of a block
    return jnp.where(odd, words[:, 1: W + 1], words[:, :W])


def client_noise(oracle, key_data: Array, i, shape: tuple[int, ...], dtype,
                 generator: str = "threefry"):
    """Client i's noise for one round, as the simulator draws it (shape (Q, d) noise)."""
    clients = jnp.asarray(i, jnp.int32).reshape(1)
    words = client_words(key_data, clients, oracle.num_words(shape), generator)[0]
    return oracle.noise_from_words(words, shape, dtype)
