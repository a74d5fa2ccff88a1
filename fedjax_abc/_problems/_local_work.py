"""How many local steps each client takes in a round: the same Q, per-client Q_i, or random.

``simulate(..., local_steps=...)`` takes an int Q (every client Q steps, Algorithm 1), an
array of n counts Q_i (system heterogeneity, as in FedNova's analysis), or one of these
distributions, drawn for every client and round from the counter stream of the trial (one
word a client: the draw depends on (trial key, t, i) alone, so ``mask`` and ``gather`` make
the same draws):

- :class:`PerClientSteps`: client i takes Q_i steps every round;
- :class:`UniformSteps`: K uniform on {1, ..., Q_max};
- :class:`GeometricSteps`: K geometric with success probability p (P(K = k) =
  (1 - p)^(k-1) p, the number of local steps between two communications of Scaffnew /
  ProxSkip), cut at Q_max (P(K = Q_max) takes the tail);
- :class:`PmfSteps`: P(K = k) = probs[k - 1], k = 1, ..., Q_max.

The engine runs every client's local steps as one scan over Q_max steps, masked after the
client's K; the array leaves (counts, p, probs) are data, so new values with the same Q_max
compile nothing new. The algorithm reads K (``LocalInfo.steps``).
"""


import abc
from typing import Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from fedjax_abc._problems._args import check_count, check_flag
from fedjax_abc._problems._samplers import _uniform_below

__all__ = ["AbstractLocalSteps", "GeometricSteps", "PerClientSteps", "PmfSteps",
           "UniformSteps"]


def _unit_interval(word: Array) -> Array:
    """u in (0, 1) from a uint32 word: (w + 1/2) / 2^32 in float64 where enabled, else
    (w // 2^9 + 1/2) / 2^23 in float32 (24 significant bits: never rounded up to 1)."""
    if jax.config.jax_enable_x64:
        return (word.astype(jnp.float64) + 0.5) / 4294967296.0
    return ((word >> np.uint32(9)).astype(jnp.float32) + 0.5) * 2.0 ** -23


def _concrete(value):
    try:
        return np.asarray(value)
    except Exception:  # a tracer
        return None


class AbstractLocalSteps(eqx.Module):
    """A law of the number of local steps K of client i in a round (1 <= K <= Q_max).

    Subclasses set ``max_steps`` (static) and implement :meth:`draw`.
    """

    max_steps: eqx.AbstractVar[int]

    def num_words(self) -> int:
        """Random uint32 words a client needs per round (0 for a deterministic law)."""
        return 1

    @abc.abstractmethod
    def draw(self, word: Array, i: Array) -> Int[Array, ""]:
        """K of client i (may be traced) from its round's word (uint32, shape ())."""

    def validate(self, n: int) -> None:
        """Raises ValueError when the law does not fit n clients (default: it fits any)."""

    def same_for_all_clients(self) -> bool:
        """True when every client of a round takes the same K (drawn from client 0's word)."""
        return False

    def stop_probability(self) -> Optional[Array]:
        """p where K is geometric, each local step the last of the round with probability p
        (:class:`GeometricSteps`: Scaffnew's communication probability); None for any other
        law (the default)."""
        return None


class PerClientSteps(AbstractLocalSteps):
    """Client i takes ``counts[i]`` local steps in every round.

    Example:
      >>> import fedjax_abc as fa
      >>> fa.PerClientSteps([1, 5, 10]).max_steps
      10
    """

    counts: Int[Array, " n"]
    max_steps: int = eqx.field(static=True)

    def __init__(self, counts, max_steps=None):
        c = np.asarray(counts)
        if c.ndim != 1 or c.size == 0 or not np.issubdtype(c.dtype, np.integer):
            raise ValueError(f"local_steps counts must be a 1-d array of integers, got {counts!r}")
        if np.any(c < 1):
            raise ValueError(f"local_steps counts must be >= 1, got min {int(c.min())}")
        self.max_steps = (int(c.max()) if max_steps is None
                          else check_count("max_steps (Q_max)", max_steps))
        if c.max() > self.max_steps:
            raise ValueError(f"local_steps counts (max {int(c.max())}) exceed max_steps "
                             f"({self.max_steps})")
        self.counts = jnp.asarray(c, jnp.int32)

    def __check_init__(self):
        if not jnp.issubdtype(jnp.result_type(self.counts), jnp.integer):
            raise ValueError(f"local_steps counts must be integers, got {self.counts!r}"[:200])
        c = _concrete(self.counts)
        if c is not None and c.size and (c.min() < 1 or c.max() > self.max_steps):
            raise ValueError(f"local_steps counts must be in [1, max_steps={self.max_steps}]")

    def num_words(self):
        return 0

    def draw(self, word, i):
        return self.counts[i]

    def validate(self, n):
        if self.counts.shape != (n,):
            raise ValueError(f"local_steps counts must have one entry per client (n={n}), got "
                             f"shape {self.counts.shape}")


class UniformSteps(AbstractLocalSteps):
    """K uniform on {1, ..., max_steps} for every client and round."""

    max_steps: int = eqx.field(static=True)

    def __init__(self, max_steps):
        self.max_steps = check_count("max_steps (Q_max)", max_steps)

    def draw(self, word, i):
        return _uniform_below(word, self.max_steps) + 1


class GeometricSteps(AbstractLocalSteps):
    """K geometric on {1, 2, ...} with P(K = k) = (1 - p)^(k-1) p, cut at ``max_steps``.

    K = 1 + floor(log(u) / log(1 - p)) for u uniform on (0, 1), then min(K, max_steps).
    E[K] = 1/p when the cut is far out (Scaffnew's expected local steps between two
    communications). ``shared=True`` draws one K per round for all clients (Scaffnew's
    common coin: every client communicates at the same iteration).
    """

    p: Float[Array, ""]
    max_steps: int = eqx.field(static=True)
    shared: bool = eqx.field(static=True)

    def __init__(self, p, max_steps, shared: bool = False):
        self.max_steps = check_count("max_steps (Q_max)", max_steps)
        self.p = jnp.asarray(p, float)
        self.shared = check_flag("shared", shared)

    def same_for_all_clients(self):
        return self.shared

    def stop_probability(self):
        return self.p

    def __check_init__(self):
        p = _concrete(self.p)
        if p is not None and (p.shape != () or not 0.0 < float(p) <= 1.0):
            raise ValueError(f"GeometricSteps needs a probability p in (0, 1], got {p}")

    def draw(self, word, i):
        u = _unit_interval(word)
        p = self.p.astype(u.dtype)
        k = 1 + jnp.floor(jnp.log(u) / jnp.log1p(-p))
        k = jnp.where(p >= 1, 1, k)
        return jnp.minimum(k, self.max_steps).astype(jnp.int32)


class PmfSteps(AbstractLocalSteps):
    """P(K = k) = probs[k - 1] for k = 1, ..., len(probs) (normalised)."""

    probs: Float[Array, " Q"]
    max_steps: int = eqx.field(static=True)

    def __init__(self, probs):
        p = np.asarray(probs, dtype=np.float64)
        if p.ndim != 1 or p.size == 0:
            raise ValueError(f"probs must be a non-empty 1-d array, got shape {p.shape}")
        self.max_steps = int(p.size)
        self.probs = jnp.asarray(p)

    def __check_init__(self):
        if jnp.shape(self.probs) != (self.max_steps,):  # max_steps (static) sets the scan
            raise ValueError(f"PmfSteps' probs must have max_steps={self.max_steps} entries, got "
                             f"shape {jnp.shape(self.probs)}: make a new PmfSteps(probs) for "
                             "another Q_max")
        p = _concrete(self.probs)
        if p is not None and (not np.all(np.isfinite(p)) or np.any(p < 0) or p.sum() <= 0):
            raise ValueError("probs must be finite, >= 0 and not all 0")

    def draw(self, word, i):
        u = _unit_interval(word)
        cdf = jnp.cumsum(self.probs.astype(u.dtype))
        cdf = cdf / cdf[-1]
        return (1 + jnp.sum(u >= cdf[:-1])).astype(jnp.int32)
