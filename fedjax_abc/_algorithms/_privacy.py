"""Gaussian noise on the clients' updates, and DP-FedAvg's clipping and noise (central DP).

DP-FedAvg (McMahan et al. 2018): every participant's update is clipped to norm c, and the
server adds N(0, z^2 c^2 I) to the sum of the clipped updates before dividing by the
expected number of participants. As a transform, :class:`GaussianNoise` with
``shared=True`` gives the noise out among the round's m_t participants, each adding
N(0, z^2 c^2 / m_t I): their sum carries N(0, z^2 c^2 I) exactly, the distribution of the
central mechanism's release. The division is the sampler's: the paper's sampler divides
by S, ``Poisson(q)`` (unbiased weights, the default) by n q, the expected number of
participants. The privacy budget of the run: ``fa.theory.dp_epsilon``.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from fedjax_abc._algorithms._checks import check_leaf, nonnegative_scalar, positive_scalar
from fedjax_abc._algorithms._transforms import AbstractTransform, Chain, Clip
from fedjax_abc._problems._oracles import normals_from_words

__all__ = ["GaussianNoise", "dp_fedavg"]


class GaussianNoise(AbstractTransform):
    """Delta_i -> Delta_i + N(0, s^2 I): Gaussian noise on each participant's update.

    With ``shared=False`` (default) every participant adds N(0, stddev^2 I) (local noise).
    With ``shared=True`` the round's m_t participants share the noise of the sum: each adds
    N(0, stddev^2 / m_t I), so the sum of their updates carries N(0, stddev^2 I), the
    central noise of DP-FedAvg. One word a coordinate (inverse error function).

    Attributes:
      stddev: s >= 0 (an array leaf: a new value compiles nothing new).
      shared: whether the noise is the round's sum's (static).

    Example:
      >>> import jax, jax.numpy as jnp, fedjax_abc as fa
      >>> g = fa.transforms.GaussianNoise(0.0)
      >>> g.apply(jnp.zeros(2, jnp.uint32), jnp.ones(2), (), fa.transforms.no_info())[0]
      Array([1., 1.], dtype=float64)
    """

    stddev: Float[Array, ""]
    shared: bool = eqx.field(static=True)

    def __init__(self, stddev, shared: bool = False):
        self.stddev = nonnegative_scalar("GaussianNoise's stddev", stddev)
        if not isinstance(shared, bool):
            raise ValueError(f"GaussianNoise's shared must be True or False, got {shared!r}")
        self.shared = shared

    def __check_init__(self):
        check_leaf("GaussianNoise's stddev", self.stddev, 0.0, strict=False)

    def num_words(self, d):
        return d

    def apply(self, words, update, state, info):
        s = self.stddev.astype(update.dtype)
        if self.shared:
            s = s / jnp.sqrt(jnp.maximum(info.participants, 1).astype(update.dtype))
        z = normals_from_words(words, update.shape[-1], update.dtype)
        return update + s * z, state, {}


def dp_fedavg(clip_norm, noise_multiplier) -> Chain:
    """DP-FedAvg's transform: Clip(c), then the round's sum noised by N(0, z^2 c^2 I).

    ``chain(Clip(c), GaussianNoise(z c, shared=True))``. Use it with FedAvg and the paper's
    sampler, ``Bernoulli(q)`` or ``Poisson(q)``; ``fa.theory.dp_epsilon`` gives the
    privacy budget of the same sampler and noise multiplier. Stats: ``clipped``.

    Example:
      >>> import fedjax_abc as fa
      >>> t = fa.transforms.dp_fedavg(clip_norm=0.5, noise_multiplier=1.1)
      >>> float(t.transforms[1].stddev)
      0.55
    """
    c = positive_scalar("clip_norm (c)", clip_norm)
    z = nonnegative_scalar("noise_multiplier (z)", noise_multiplier)
    return Chain(Clip(c), GaussianNoise(z * c, shared=True))
