"""Custom samplers and oracles are checked before a run compiles (``check_components``).

Shapes and dtypes by abstract evaluation; a sampler's values (indices in [0, n), finite
weights >= 0) on a few dozen word sets. Every error names the class; the built-in samplers
and oracles pass.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa
import fedjax_abc._engine._simulate as _simulate
from fedjax_abc._problems._checks import check_components

N = 11  # a client count of its own

PROBLEM = fa.problems.quadratics(jax.random.key(0), n=N, d=3)
PROBLEM_1D = fa.problems.huber_offsets(jax.random.key(0), n=N, d_max=10.0)


# ----------------------------------------------------------------------------- samplers


class ExtraSlot(fa.UniformWithoutReplacement):
    """Returns S + 1 indices for S slots."""

    def from_words(self, words, n):
        idx, w = super().from_words(words, n)
        return jnp.concatenate([idx, idx[:1]]), w


class FloatIndices(fa.UniformWithoutReplacement):
    def from_words(self, words, n):
        idx, w = super().from_words(words, n)
        return idx.astype(jnp.float32), w


class ShortWeights(fa.UniformWithoutReplacement):
    def from_words(self, words, n):
        idx, w = super().from_words(words, n)
        return idx, w[:1]


class OffByOne(fa.WithReplacement):
    """floor(u (n + 1)): index n for the largest words."""

    def from_words(self, words, n):
        return (words // jnp.uint32(2 ** 32 // (n + 1))).astype(jnp.int32), jnp.ones(words.shape)


class NegativeIndex(fa.WithReplacement):
    def from_words(self, words, n):
        idx, w = super().from_words(words, n)
        return idx - 1, w


class NegativeWeight(fa.WithReplacement):
    def from_words(self, words, n):
        idx, w = super().from_words(words, n)
        return idx, jnp.where(words > 2 ** 31, -w, w)


class NanWeight(fa.Bernoulli):
    def from_words(self, words, n):
        idx, w = super().from_words(words, n)
        return idx, w / (w - w)  # 0/0 and 1/0


BAD_SAMPLERS = [
    (ExtraSlot(3), r"ExtraSlot.from_words must return indices of shape \(num_slots=3,\)"),
    (FloatIndices(3), r"FloatIndices.from_words must return indices .* integer dtype, got float32"),
    (ShortWeights(3), r"ShortWeights.from_words must return real weights of shape \(num_slots=3,\)"),
    (OffByOne(3), rf"OffByOne.from_words returned client index 1[12] outside \[0, n={N}\)"),
    (NegativeIndex(3), rf"NegativeIndex.from_words returned client index -1 outside \[0, n={N}\)"),
    (NegativeWeight(3), r"NegativeWeight.from_words returned weight -1.0"),
    (NanWeight(0.5), r"NanWeight.from_words returned weight (nan|inf)"),
]


@pytest.mark.parametrize("sampler, match", BAD_SAMPLERS,
                         ids=[type(s).__name__ for s, _ in BAD_SAMPLERS])
def test_bad_sampler_is_named(sampler, match):
    with pytest.raises(ValueError, match=match) as info:
        check_components(PROBLEM, PROBLEM.oracle, sampler, 2, "float64")
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------------------ oracles


class NoStepAxis(fa.AbstractOracle):
    """Draws one (d,) vector for the whole round instead of (Q, d)."""

    def noise(self, key, shape, dtype):
        return jax.random.normal(key, shape[1:], dtype)

    def gradient(self, problem, client, x, z):
        return problem.local_grad(client, x) + z


class ScalarGradient(fa.AbstractOracle):
    def noise(self, key, shape, dtype):
        return jax.random.normal(key, shape, dtype)

    def gradient(self, problem, client, x, z):
        return jnp.sum(problem.local_grad(client, x) + z)


class RowGradient(fa.GaussianOracle):
    def gradient(self, problem, client, x, z):
        return super().gradient(problem, client, x, z)[None, :]


class Float64Gradient(fa.AbstractOracle):
    def noise(self, key, shape, dtype):
        return jax.random.normal(key, shape, jnp.float64)  # ignores the run's dtype

    def gradient(self, problem, client, x, z):
        return problem.local_grad(client, x) + z


class UntraceableNoise(fa.AbstractOracle):
    def noise(self, key, shape, dtype):
        return jnp.full(shape, float(jax.random.normal(key)), dtype)

    def gradient(self, problem, client, x, z):
        return problem.local_grad(client, x) + z


BAD_ORACLES = [
    (NoStepAxis(), "float64", r"NoStepAxis.noise_from_words must return leaves with leading "
                              r"axis Q=2 .* got float64\[3\]"),
    (ScalarGradient(), "float64", r"ScalarGradient.gradient must return one step's gradient of "
                                  r"shape \(d=3,\), got float64\[\]"),
    (RowGradient(1.0, 0.0), "float32", r"RowGradient.gradient .* got float32\[1, 3\]"),
    (Float64Gradient(), "float32", r"Float64Gradient.gradient must keep the run's dtype float32"),
    (UntraceableNoise(), "float64", r"UntraceableNoise.noise_from_words raised "
                                    r"ConcretizationTypeError when traced"),
]


@pytest.mark.parametrize("oracle, dtype, match", BAD_ORACLES,
                         ids=[type(o).__name__ for o, _, _ in BAD_ORACLES])
def test_bad_oracle_is_named(oracle, dtype, match):
    with pytest.raises(ValueError, match=match) as info:
        check_components(PROBLEM, oracle, fa.UniformWithoutReplacement(3), 2, dtype)
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------------ built-ins pass


class PackedLaplace(fa.AbstractOracle):
    """A custom oracle keeping its round noise as words (leaves without the axis Q)."""

    def noise(self, key, shape, dtype):
        return jax.random.laplace(key, shape, dtype)

    def num_words(self, shape):
        return 2

    def noise_from_words(self, words, shape, dtype):
        return words

    def step_noise(self, noise, step, shape, dtype):
        key = jax.random.fold_in(jax.random.wrap_key_data(noise), step)
        return jax.random.laplace(key, shape[1:], dtype)

    def gradient(self, problem, client, x, z):
        return problem.local_grad(client, x) + z


SAMPLERS = [fa.UniformWithoutReplacement(1), fa.UniformWithoutReplacement(4),
            fa.UniformWithoutReplacement(N), fa.WithReplacement(5), fa.Bernoulli(0.3),
            fa.FullParticipation()]
ORACLES = [fa.GaussianOracle(1.0, 0.5), fa.RademacherOracle(), fa.ExactOracle(), PackedLaplace()]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("Q", [1, 7, 40])
def test_builtins_pass(dtype, Q):
    for sampler in SAMPLERS:
        for oracle in ORACLES:
            check_components(PROBLEM, oracle, sampler, Q, dtype)
    check_components(PROBLEM_1D, PROBLEM_1D.oracle, fa.UniformWithoutReplacement(4), Q, dtype)


# ------------------------------------------------------------------- through simulate


def _kw(**changes):
    kw = dict(local_steps=2, stepsize=0.01, rounds=4, x0=np.asarray(PROBLEM.x_star) + 1.0,
              trials=2, key=jax.random.key(0), record_every=2)
    kw.update(changes)
    return kw


@pytest.mark.parametrize("changes, match", [
    (dict(sampler=OffByOne(3)), r"OffByOne.from_words returned client index"),
    (dict(sampler=ShortWeights(3)), r"ShortWeights.from_words must return real weights"),
    (dict(num_sampled=3, oracle=NoStepAxis()), r"NoStepAxis.noise_from_words"),
    (dict(num_sampled=3, oracle=Float64Gradient(), dtype="float32"), r"Float64Gradient"),
])
def test_simulate_rejects_before_the_run(changes, match):
    ran = []  # the progress callback hears of every segment run
    with pytest.raises(ValueError, match=match):
        fa.simulate(PROBLEM, **_kw(**changes), progress=lambda *a: ran.append(a))
    assert ran == []


def test_simulate_still_runs_custom_components():
    res = fa.simulate(PROBLEM, sampler=fa.WithReplacement(3), oracle=PackedLaplace(),
                      **_kw(dtype="float32"))
    assert res.gap.shape == (2, 3) and np.all(np.isfinite(res.gap))
