"""Deliberately faulty components of the simulator, for checking the report's checks.

Each class is a small component built beside the library's own (which stay untouched), from
the same abstract bases, with one mistake whose size a ``factor`` sets; at the neutral factor
it is correct. :mod:`~fedjax_abc.repro.faults` runs the report's checks on them.

- :class:`TiltedSampler`: S clients without replacement, but client i favoured by
  exp(tilt (i / (n - 1) - 1/2)) (a biased sampler; Assumption 3 and eq. (9) broken).
  Factor: the weight ratio exp(tilt) of the most to the least favoured client (1: uniform).
- :class:`DropsWeights`: another sampler's clients, its weights dropped (an unweighted mean
  where weights apply, e.g. the importance weights 1 / (S n p_i)). Factor: the spread
  p_max / p_min of the importance probabilities (1: every weight equal, nothing dropped).
- :class:`ScaledNoise`: another oracle's noise multiplied by ``factor`` (the oracle's
  variance wrong by factor^2; Assumption 2's (C, D) broken). Factor: the variance ratio.
- :class:`ScaledLocalStep`: Algorithm 1 with every local step y - factor alpha g (factor 2:
  the stepsize applied twice). Factor: as given.
- :class:`SkipsServerSteps`: Algorithm 1 whose server keeps x_t instead of taking the
  average in every ``every``-th round (a missing server step). Factor: the share 1 / every of
  the rounds skipped.
- :class:`MixedSampler`: the paper's sampler in some rounds and another in the others (the
  library's ``WithReplacement`` or ``Bernoulli`` in place of S clients without replacement;
  Assumption 3 and the pair probability of eq. (9) broken). Factor: the share of the rounds
  drawn by the wrong rule (0: the paper's sampler).
- :class:`ReusedNoise`: another oracle whose noise is drawn once for ``every`` consecutive
  local steps and reused across them (Assumption 2's independence across steps broken).
  Factor: the number of steps that share one draw (1: fresh noise at every step).

The oracle's variance too small (by 1/S, or none at all) is :class:`ScaledNoise` with a
factor below 1 (0: a noiseless oracle).

Example:
  >>> import jax
  >>> idx, w = TiltedSampler(num_sampled=2, tilt=0.0)(jax.random.key(0), 5)
  >>> idx.shape, [float(v) for v in w]
  ((2,), [1.0, 1.0])
"""


from typing import ClassVar, final

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array

import fedjax_abc as fa
from fedjax_abc.algorithms import AbstractAlgorithm, AbstractServerState, ServerState


@final
class TiltedSampler(fa.AbstractStatelessSampler):
    """S distinct clients drawn with weights exp(tilt (i / (n - 1) - 1/2)) one after the
    other (Gumbel top-k); tilt = 0 is the paper's uniform sampler (Assumption 3)."""

    distinct_slots: ClassVar[bool] = False
    num_sampled: int = eqx.field(static=True)
    tilt: Array

    def __init__(self, num_sampled: int, tilt):
        self.num_sampled = num_sampled
        self.tilt = jnp.asarray(tilt, float)

    def num_slots(self, n):
        return self.num_sampled

    def from_words(self, words, n):  # two words as a key: n Gumbel draws from JAX's generator
        logits = self.tilt * (jnp.arange(n) / max(n - 1, 1) - 0.5)
        gumbel = jax.random.gumbel(jax.random.wrap_key_data(words[:2]), (n,))
        _, idx = jax.lax.top_k(logits + gumbel, self.num_sampled)
        return idx.astype(jnp.int32), jnp.ones((self.num_sampled,))


@final
class DropsWeights(fa.AbstractStatelessSampler):
    """The slots of ``inner`` with every weight set to 1 and the server told to average
    them: the weights the server should have applied are lost."""

    distinct_slots: ClassVar[bool] = False

    inner: fa.AbstractSampler

    @property
    def num_sampled(self):
        return self.inner.num_sampled

    def num_slots(self, n):
        return self.inner.num_slots(n)

    def num_words(self, n):
        return self.inner.num_words(n)

    def from_words(self, words, n):
        idx, w = self.inner.from_words(words, n)
        return idx, jnp.ones_like(w)


class _AbstractWrappedOracle(fa.AbstractOracle):
    """An oracle that draws ``inner``'s noise, the same random numbers, and changes what it
    does with them."""

    inner: eqx.AbstractVar[fa.AbstractOracle]

    def validate(self, problem):
        self.inner.validate(problem)

    def num_words(self, shape):
        return self.inner.num_words(shape)

    def noise(self, key, shape, dtype):
        return self.inner.noise(key, shape, dtype)

    def noise_from_words(self, words, shape, dtype):
        return self.inner.noise_from_words(words, shape, dtype)

    def step_noise(self, noise, step, shape, dtype):
        return self.inner.step_noise(noise, step, shape, dtype)


@final
class ScaledNoise(_AbstractWrappedOracle):
    """``inner``'s gradient estimate with its noise scaled: grad f_i + factor (g_i - grad
    f_i), so the variance is factor^2 times ``inner``'s (factor = 1: ``inner`` itself, the
    same random numbers)."""

    inner: fa.AbstractOracle
    factor: Array

    def __init__(self, inner: fa.AbstractOracle, factor):
        self.inner = inner
        self.factor = jnp.asarray(factor, float)

    def gradient(self, problem, client, x, noise):
        exact = problem.local_grad(client, x)
        return exact + self.factor * (self.inner.gradient(problem, client, x, noise) - exact)


@final
class ScaledLocalStep(AbstractAlgorithm):
    """Algorithm 1 with the local step y - factor alpha g_i(y) (factor = 1: Algorithm 1)."""

    factor: Array

    def __init__(self, factor):
        self.factor = jnp.asarray(factor, float)

    def init(self, x0):
        return ServerState(x0)

    def init_client(self, x0):
        return ()

    def client_init(self, server, client):
        return ()

    def local_step(self, server, y, local, gradient, stepsize):
        return y - self.factor * stepsize * gradient(y), local

    def client_final(self, server, client, y, local, info):
        return y, client

    reads_scale: ClassVar[bool] = False

    def server_update(self, server, mean_message, info):
        return ServerState(mean_message)


class CountedState(AbstractServerState):
    """The model x_t and the round t."""

    x: Array
    t: Array


@final
class SkipsServerSteps(AbstractAlgorithm):
    """Algorithm 1 whose server keeps x_t in rounds t = every - 1, 2 every - 1, ... instead
    of taking the clients' average (every = 0: never skips, Algorithm 1)."""

    every: int = eqx.field(static=True)

    def init(self, x0):
        return CountedState(x0, jnp.zeros((), jnp.int32))

    def init_client(self, x0):
        return ()

    def client_init(self, server, client):
        return ()

    def local_step(self, server, y, local, gradient, stepsize):
        return y - stepsize * gradient(y), local

    def client_final(self, server, client, y, local, info):
        return y, client

    reads_scale: ClassVar[bool] = False

    def server_update(self, server, mean_message, info):
        skip = (self.every > 0) & (server.t % max(self.every, 1) == max(self.every, 1) - 1)
        return CountedState(jnp.where(skip, server.x, mean_message), server.t + 1)


@final
class MixedSampler(fa.AbstractStatelessSampler):
    """``correct``'s slots in a round with probability 1 - share, ``wrong``'s with probability
    share (share = 0: ``correct`` itself). Both are padded to the larger number of slots
    with weight-0 slots; one word decides the round, the rest go to the sampler drawn."""

    distinct_slots: ClassVar[bool] = False

    correct: fa.AbstractSampler
    wrong: fa.AbstractSampler
    share: Array

    def __init__(self, correct: fa.AbstractSampler, wrong: fa.AbstractSampler, share):
        self.correct, self.wrong = correct, wrong
        self.share = jnp.asarray(share, float)

    @property
    def num_sampled(self):  # S where both samplers have the same one
        S = self.correct.num_sampled
        return S if S == self.wrong.num_sampled else None

    def num_slots(self, n):
        return max(self.correct.num_slots(n), self.wrong.num_slots(n))

    def num_words(self, n):
        return 1 + max(self.correct.num_words(n), self.wrong.num_words(n))

    def validate(self, n):
        self.correct.validate(n)
        self.wrong.validate(n)

    def from_words(self, words, n):
        m = self.num_slots(n)

        def slots(sampler):
            idx, w = sampler.from_words(words[1:1 + sampler.num_words(n)], n)
            pad = m - idx.shape[0]
            return (jnp.concatenate([idx.astype(jnp.int32), jnp.zeros((pad,), jnp.int32)]),
                    jnp.concatenate([w.astype(float), jnp.zeros((pad,), float)]))

        (ic, wc), (iw, ww) = slots(self.correct), slots(self.wrong)
        use_wrong = words[0].astype(float) < self.share * 2.0 ** 32
        return jnp.where(use_wrong, iw, ic), jnp.where(use_wrong, ww, wc)


@final
class ReusedNoise(_AbstractWrappedOracle):
    """``inner``'s gradient estimate, its round noise drawn once per ``every`` local steps:
    step l uses the noise of step every floor(l / every) (every = 1: ``inner`` itself)."""

    inner: fa.AbstractOracle
    every: int = eqx.field(static=True)

    def step_noise(self, noise, step, shape, dtype):
        return self.inner.step_noise(noise, (step // self.every) * self.every, shape, dtype)

    def gradient(self, problem, client, x, noise):
        return self.inner.gradient(problem, client, x, noise)
