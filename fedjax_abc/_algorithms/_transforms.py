"""Message transforms: what happens to a client's update between its local work and the server.

A transform acts on each participant's update Delta_i = y_i - x_t (the pseudo-gradient of
its round) before the algorithm forms its message and the server its weighted mean
(``simulate(..., transform=...)``), in the shape of optax's gradient transformations:

- ``init(x) -> state``: one client's state (``()`` when stateless; error feedback keeps
  its memory here), x of shape (d,);
- ``num_words(d) -> int``: the uint32 random words a client needs per round;
- ``apply(words, update, state, info) -> (update, state, stats)``: ``stats`` a dict of
  named numbers (bits sent, whether it was clipped), summed over the round's participants
  and recorded cumulatively in the result (``SimResult.metrics``); ``info`` a
  :class:`TransformInfo` (how many clients take part in the round, the server state);
- ``server_init(x) -> server`` and ``server_update(server, sums, info) -> server``: a state
  the server keeps for the transform (``()`` when none; adaptive clipping keeps its clip
  norm here), updated after every round with participants from the round's ``stats``
  summed over them.

The random words come from the trial's counter stream (a client's depend on (trial key, t,
i) alone), so ``mask`` and ``gather`` agree; only participants keep their new state.
``transform=None`` leaves every result bit for bit.
"""

from __future__ import annotations

import abc
from typing import Any, NamedTuple

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from fedjax_abc._algorithms._checks import check_leaf, positive_scalar

__all__ = ["AbstractTransform", "Chain", "Clip", "TransformInfo", "chain", "clip_to", "no_info"]


class TransformInfo(NamedTuple):
    """What a client's transform knows about its round (one client of one trial).

    Attributes:
      participants: how many clients take part in the round (slots with a positive
        weight), shape (); a noise that the round's participants share out reads it.
      num_clients: n (static).
      server: the transform's server state in the trial (``server_init``'s structure;
        ``()`` for a transform without one).
    """

    participants: Array
    num_clients: int
    server: Any = ()


def no_info(dtype=float, server: Any = ()) -> TransformInfo:
    """The info of a transform applied on its own, outside a round: one participant of one;
    ``server``: the transform's server state (``transform.server_init(x)`` for one with a
    server state)."""
    return TransformInfo(jnp.ones((), dtype), 1, server)


class AbstractTransform(eqx.Module):
    """A transform of one client's update (see the module's docstring)."""

    def init(self, x: Array) -> Any:
        """One client's state at t = 0 (default: none)."""
        return ()

    def num_words(self, d: int) -> int:
        """Random uint32 words a client needs per round (default: none)."""
        return 0

    def server_init(self, x: Array) -> Any:
        """The server's state for the transform in one trial at t = 0 (default: none)."""
        return ()

    def server_update(self, server, sums: dict, info: TransformInfo) -> Any:
        """The server state after a round with participants (default: unchanged).

        ``sums``: the round's ``stats`` summed over its participants, name -> shape ();
        ``info``: the round's, with ``server`` the state before the round.
        """
        return server

    @abc.abstractmethod
    def apply(self, words: Array, update: Array, state,
              info: TransformInfo) -> tuple[Array, Any, dict]:
        """(transformed update, new state, stats) of one client's update (shape (d,))."""


def clip_to(update: Array, c: Array) -> tuple[Array, Array]:
    """(update min(1, c / ||update||), whether it was clipped) for a bound c > 0."""
    size = jnp.sqrt(jnp.sum(update * update))
    clipped = size > c
    return update * jnp.where(clipped, c / jnp.where(clipped, size, 1), 1), clipped


class Clip(AbstractTransform):
    """Delta -> Delta min(1, c / ||Delta||): the update clipped to norm ``norm`` (DP-FedAvg).

    Stats: ``clipped``, 1 for a clipped update, else 0.

    Example:
      >>> import jax.numpy as jnp, fedjax_abc as fa
      >>> clip = fa.transforms.Clip(1.0)
      >>> u, _, s = clip.apply(jnp.zeros(0, jnp.uint32), jnp.array([3.0, 4.0]), (),
      ...                      fa.transforms.no_info())
      >>> u, s["clipped"]
      (Array([0.6, 0.8], dtype=float64), Array(1., dtype=float64))
    """

    norm: Float[Array, ""]

    def __init__(self, norm):
        self.norm = positive_scalar("norm (clipping bound c)", norm)

    def __check_init__(self):
        check_leaf("norm (clipping bound c)", self.norm, 0.0, strict=True)

    def apply(self, words, update, state, info):
        update, clipped = clip_to(update, self.norm.astype(update.dtype))
        return update, state, {"clipped": clipped.astype(update.dtype)}


class Chain(AbstractTransform):
    """Transforms applied one after another; their states a tuple, their stats merged."""

    transforms: tuple

    def __init__(self, *transforms):
        for t in transforms:
            if not isinstance(t, AbstractTransform):
                raise ValueError("chain takes fedjax_abc.transforms.AbstractTransform values, "
                                 f"got {type(t).__name__}")
        self.transforms = tuple(transforms)

    def init(self, x):
        return tuple(t.init(x) for t in self.transforms)

    def num_words(self, d):
        return sum(t.num_words(d) for t in self.transforms)

    def server_init(self, x):
        return tuple(t.server_init(x) for t in self.transforms)

    def _servers(self, info) -> tuple:
        """Each member's server state (``()`` for all when the info carries none)."""
        n = len(self.transforms)
        servers = info.server
        return servers if isinstance(servers, tuple) and len(servers) == n else ((),) * n

    def server_update(self, server, sums, info):
        return tuple(t.server_update(s, sums, info._replace(server=s))
                     for t, s in zip(self.transforms, server))

    def apply(self, words, update, state, info):
        stats, new_states, start = {}, [], 0
        for t, s, srv in zip(self.transforms, state, self._servers(info)):
            w = t.num_words(update.shape[-1])
            update, s, st = t.apply(words[start:start + w], update, s,
                                    info._replace(server=srv))
            start += w
            new_states.append(s)
            for name, value in st.items():
                if name in stats:
                    raise ValueError(f"two transforms of a chain report the statistic {name!r}")
                stats[name] = value
        return update, tuple(new_states), stats


def chain(*transforms) -> Chain:
    """The transforms applied in order (optax's ``chain``)."""
    return Chain(*transforms)
