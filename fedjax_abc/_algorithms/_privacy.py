"""Gaussian noise on the clients' updates, and DP-FedAvg's clipping and noise (central DP).

DP-FedAvg (McMahan et al. 2018): every participant's update is clipped to norm c, and the
server adds N(0, z^2 c^2 I) to the sum of the clipped updates before dividing by the
expected number of participants. As a transform, :class:`GaussianNoise` with
``shared=True`` gives the noise out among the round's m_t participants, each adding
N(0, z^2 c^2 / m_t I): their sum carries N(0, z^2 c^2 I) exactly, the distribution of the
central mechanism's release. The division is the sampler's: the paper's sampler divides
by S, ``Poisson(q)`` (unbiased weights, the default) by n q, the expected number of
participants. The privacy budget of the run: ``fa.theory.dp_epsilon``.

Adaptive clipping (Andrew et al. 2021, :class:`AdaptiveClipping`) moves c_t after every
round towards the gamma-quantile of the participants' update norms, from a noised count of
the unclipped updates; the clip norm is the transform's server state.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from fedjax_abc._algorithms._checks import (_concrete, check_leaf, nonnegative_scalar,
                                            positive_scalar)
from fedjax_abc._algorithms._transforms import AbstractTransform, clip_to
from fedjax_abc._problems._args import check_flag
from fedjax_abc._problems._oracles import normals_from_words

__all__ = ["AdaptiveClipping", "DPFedAvg", "GaussianNoise", "dp_fedavg"]


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
        self.shared = check_flag("GaussianNoise's shared", shared)

    def __check_init__(self):
        check_leaf("GaussianNoise's stddev", self.stddev, 0.0, strict=False)

    def num_words(self, d):
        return d

    def apply(self, words, update, state, info):
        s = self.stddev.astype(update.dtype)
        if self.shared:
            s = _shared(s, info)
        z = normals_from_words(words, update.shape[-1], update.dtype)
        return update + s * z, state, {}


def _shared(stddev: Array, info) -> Array:
    """Each of the round's m_t participants' part of a noise of stddev s on their sum."""
    return stddev / jnp.sqrt(jnp.maximum(info.participants, 1).astype(stddev.dtype))


def update_noise_multiplier(noise_multiplier, count_stddev):
    """z_Delta = (z^-2 - (2 sigma_b)^-2)^(-1/2): the updates' share of the noise multiplier z
    when the count of unclipped updates is released with noise sigma_b (Andrew et al. 2021,
    Theorem 1; 0 when z = 0)."""
    z = jnp.asarray(noise_multiplier)
    two_b = 2 * jnp.asarray(count_stddev, z.dtype)
    safe = jnp.where(z > 0, jnp.sqrt(jnp.maximum(two_b**2 - z**2, 1e-300)), 1)
    return jnp.where(z > 0, z * two_b / safe, 0)


class AdaptiveClipping(AbstractTransform):
    """DP-FedAvg with adaptive clipping (Andrew et al. 2021, "Differentially private learning
    with adaptive clipping", Algorithm 1).

    Round t, with the server's clip norm c_t and the round's m_t participants: each clips
    its update to c_t, adds its share of N(0, z_Delta^2 c_t^2 I) on the sum (as
    ``GaussianNoise(shared=True)``), and reports b_i = 1[||Delta_i|| <= c_t] plus its share
    of N(0, sigma_b^2) on the count. After the round the server sets
    c_{t+1} = c_t exp(-eta (b_bar - gamma)), with b_bar the noised count over m_t: c_t follows
    the gamma-quantile of the update norms. z is the noise multiplier of the whole release
    (the one ``fa.theory.dp_epsilon`` takes), split as z^-2 = z_Delta^-2 + (2 sigma_b)^-2
    (the count's sensitivity is 1/2 after centring); so a private run needs
    2 sigma_b > z. With z = 0 and sigma_b = 0: adaptive clipping without noise.

    Stats: ``clipped`` (1 for a clipped update) and ``unclipped`` (b_i with its noise).

    Attributes (array leaves):
      initial_norm: c_0 > 0.
      target_quantile: gamma in [0, 1].
      learning_rate: eta >= 0 (the geometric update's).
      noise_multiplier: z >= 0.
      count_stddev: sigma_b >= 0.

    Example:
      >>> import jax.numpy as jnp, fedjax_abc as fa
      >>> t = fa.transforms.AdaptiveClipping(1.0, target_quantile=0.5, learning_rate=0.2)
      >>> info = fa.transforms.no_info(server=t.server_init(jnp.zeros(2)))
      >>> u, _, s = t.apply(jnp.zeros(3, jnp.uint32), jnp.array([3.0, 4.0]), (), info)
      >>> u, s["unclipped"]
      (Array([0.6, 0.8], dtype=float64), Array(0., dtype=float64))
      >>> t.server_update(info.server, s, info)  # c_1 = exp(-0.2 (0 - 0.5))
      Array(1.10517092, dtype=float64)
    """

    initial_norm: Float[Array, ""]
    target_quantile: Float[Array, ""]
    learning_rate: Float[Array, ""]
    noise_multiplier: Float[Array, ""]
    count_stddev: Float[Array, ""]

    def __init__(self, initial_norm, target_quantile=0.5, learning_rate=0.2,
                 noise_multiplier=0.0, count_stddev=0.0):
        self.initial_norm = positive_scalar("initial_norm (c_0)", initial_norm)
        self.target_quantile = nonnegative_scalar("target_quantile (gamma)", target_quantile)
        self.learning_rate = nonnegative_scalar("learning_rate (eta)", learning_rate)
        self.noise_multiplier = nonnegative_scalar("noise_multiplier (z)", noise_multiplier)
        self.count_stddev = nonnegative_scalar("count_stddev (sigma_b)", count_stddev)

    def __check_init__(self):
        check_leaf("initial_norm (c_0)", self.initial_norm, 0.0, strict=True)
        check_leaf("target_quantile (gamma)", self.target_quantile, 0.0, strict=False)
        check_leaf("learning_rate (eta)", self.learning_rate, 0.0, strict=False)
        check_leaf("noise_multiplier (z)", self.noise_multiplier, 0.0, strict=False)
        check_leaf("count_stddev (sigma_b)", self.count_stddev, 0.0, strict=False)
        gamma, z, b = (_concrete(v) for v in (self.target_quantile, self.noise_multiplier,
                                              self.count_stddev))
        if gamma is not None and gamma > 1:
            raise ValueError(f"target_quantile (gamma) must be <= 1, got {gamma:g}")
        if z is not None and b is not None and z > 0 and not 2 * b > z:
            raise ValueError(f"count_stddev (sigma_b = {b:g}) must be > noise_multiplier / 2 "
                             f"(= {z / 2:g}): the count's noise takes part of z "
                             "(z^-2 = z_Delta^-2 + (2 sigma_b)^-2)")

    def num_words(self, d):
        return d + 1

    def server_init(self, x):
        return self.initial_norm.astype(x.dtype)

    def apply(self, words, update, state, info):
        dtype = update.dtype
        d = update.shape[-1]
        c = jnp.asarray(info.server, dtype)
        update, clipped = clip_to(update, c)
        z_delta = update_noise_multiplier(self.noise_multiplier.astype(dtype),
                                          self.count_stddev.astype(dtype))
        noise = normals_from_words(words, d + 1, dtype)
        update = update + _shared(z_delta * c, info) * noise[:d]
        below = 1 - clipped.astype(dtype) + _shared(self.count_stddev.astype(dtype), info) * noise[d]
        return update, state, {"clipped": clipped.astype(dtype), "unclipped": below}

    def server_update(self, server, sums, info):
        b_bar = sums["unclipped"] / jnp.maximum(info.participants, 1)
        eta = self.learning_rate.astype(server.dtype)
        return server * jnp.exp(-eta * (b_bar.astype(server.dtype)
                                        - self.target_quantile.astype(server.dtype)))


class DPFedAvg(AbstractTransform):
    """DP-FedAvg's transform: Clip(c), then the round's sum noised by N(0, z^2 c^2 I).

    Each participant's update is clipped to norm c (:class:`Clip`) and gets its share of
    the round's noise, N(0, z^2 c^2 / m_t I) (:class:`GaussianNoise` with ``shared=True``
    and stddev z c): the same numbers as ``chain(Clip(c), GaussianNoise(z c, shared=True))``
    in float64. Its parameters are the mechanism's own, the clip norm and the noise
    multiplier, so that a sweep over c (``"transform.clip_norm"``) keeps the privacy level
    z, as ``fa.theory.dp_epsilon`` computes it. Stats: ``clipped``.

    Attributes:
      clip_norm: c > 0. noise_multiplier: z >= 0 (0: clipping alone). Both array leaves.
    """

    clip_norm: Float[Array, ""]
    noise_multiplier: Float[Array, ""]

    def __init__(self, clip_norm, noise_multiplier):
        self.clip_norm = positive_scalar("clip_norm (c)", clip_norm)
        self.noise_multiplier = nonnegative_scalar("noise_multiplier (z)", noise_multiplier)

    def __check_init__(self):
        check_leaf("clip_norm (c)", self.clip_norm, 0.0, strict=True)
        check_leaf("noise_multiplier (z)", self.noise_multiplier, 0.0, strict=False)

    def num_words(self, d):
        return d

    def apply(self, words, update, state, info):
        dtype = update.dtype
        update, clipped = clip_to(update, self.clip_norm.astype(dtype))
        stddev = (self.noise_multiplier * self.clip_norm).astype(dtype)
        noise = normals_from_words(words, update.shape[-1], dtype)
        return update + _shared(stddev, info) * noise, state, {"clipped": clipped.astype(dtype)}


def dp_fedavg(clip_norm, noise_multiplier) -> DPFedAvg:
    """DP-FedAvg's transform with clip norm c and noise multiplier z (:class:`DPFedAvg`).

    Use it with FedAvg and the paper's sampler, ``Bernoulli(q)`` or ``Poisson(q)``;
    ``fa.theory.dp_epsilon`` gives the privacy budget of the same sampler and noise
    multiplier. A sweep over ``"transform.noise_multiplier"`` or ``"transform.clip_norm"``
    compiles once.

    Example:
      >>> import fedjax_abc as fa
      >>> t = fa.transforms.dp_fedavg(clip_norm=0.5, noise_multiplier=1.1)
      >>> float(t.clip_norm), float(t.noise_multiplier)
      (0.5, 1.1)
    """
    return DPFedAvg(clip_norm, noise_multiplier)
