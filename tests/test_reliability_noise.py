"""Oracle noise is finite for every uint32 word, in float32 and float64.

float32 rounds u = (w + 1/2) / 2^31 - 1 to +-1 for the 128 outermost words, where erfinv is
infinite; the float32 map clamps |u| to 1 - 2^-24. Elsewhere both maps are unchanged: the
float64 one bit for bit, the float32 one equal to rounding the exact u to float32.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa
from fedjax_abc._problems._oracles import like_model, nonnegative, normals_from_words

EXTREME = np.array([0, 1, 2, 63, 64, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 65, 2 ** 32 - 64,
                    2 ** 32 - 2, 2 ** 32 - 1], dtype=np.uint32)
# every 4097th word, plus the 256 outermost words at each end
DENSE = np.unique(np.concatenate([
    np.arange(0, 2 ** 32, 4097, dtype=np.uint64),
    np.arange(256, dtype=np.uint64), 2 ** 32 - 1 - np.arange(256, dtype=np.uint64),
])).astype(np.uint32)
DTYPES = [jnp.float32, jnp.float64]


def _old_map(words, dtype):
    """The map before the clamp: exact u in float64, rounded to dtype, then erfinv."""
    u = (jnp.asarray(words).astype(jnp.float64) + 0.5) / 2147483648.0 - 1.0
    return (jnp.sqrt(2.0) * jax.lax.erf_inv(u.astype(dtype))).astype(dtype)


def _all_steps(oracle, words, shape, dtype):
    noise = oracle.noise_from_words(jnp.asarray(words), shape, dtype)
    steps = jnp.arange(shape[0])
    return np.asarray(jax.vmap(lambda l: oracle.step_noise(noise, l, shape, dtype))(steps))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("words", [EXTREME, DENSE], ids=["extreme", "dense"])
def test_gaussian_noise_is_finite(words, dtype):
    shape = (words.shape[0], 1)
    z = _all_steps(fa.GaussianOracle(1.0, 1.0), words, shape, dtype)
    assert z.dtype == dtype and z.shape == shape
    assert np.all(np.isfinite(z)), words.reshape(shape)[~np.isfinite(z)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("words", [EXTREME, DENSE], ids=["extreme", "dense"])
def test_rademacher_noise_is_finite_signs(words, dtype):
    oracle = fa.RademacherOracle()
    shape = (words.shape[0], 32)  # 32 signs a word: one word per step
    assert oracle.num_words(shape) == words.shape[0]
    z = _all_steps(oracle, words, shape, dtype)
    assert z.dtype == dtype and z.shape == shape
    assert set(np.unique(z)) <= {-1.0, 1.0}


def test_float64_map_is_unchanged():
    got = np.asarray(normals_from_words(jnp.asarray(DENSE), DENSE.shape[0], jnp.float64))
    np.testing.assert_array_equal(got, np.asarray(_old_map(DENSE, jnp.float64)))
    assert np.all(np.isfinite(got))


def test_float32_map_changes_only_the_outermost_words():
    got = np.asarray(normals_from_words(jnp.asarray(DENSE), DENSE.shape[0], jnp.float32))
    old = np.asarray(_old_map(DENSE, jnp.float32))
    changed = got != old
    outer = (DENSE < 64) | (DENSE >= 2 ** 32 - 64)  # u rounds to -1 / +1 in float32
    np.testing.assert_array_equal(changed, outer)
    assert np.all(np.isinf(old[outer]))
    np.testing.assert_allclose(np.abs(got[outer]), 5.41998, rtol=1e-5)  # sqrt(2) erfinv(1 - 2^-24)
    assert np.all(np.abs(got) <= np.max(np.abs(got[outer])))


def test_float32_normal_moments_on_a_grid():
    """Words evenly spread over [0, 2^32): a quadrature of the normal's moments."""
    words = (np.arange(2 ** 20, dtype=np.uint64) * 4096 + 2048).astype(np.uint32)
    z = np.asarray(normals_from_words(jnp.asarray(words), words.shape[0], jnp.float32),
                   dtype=np.float64)
    assert abs(z.mean()) < 1e-5
    assert abs(z.var() - 1.0) < 1e-4
    assert abs(np.mean(z ** 4) - 3.0) < 2e-3


@pytest.mark.slow  # 7-25 s: with the long checks, for the default run's 10 minutes
def test_float32_simulation_has_no_nan():
    p = fa.problems.quadratics(jax.random.key(0), n=10, d=100)
    res = fa.simulate(p, num_sampled=10, local_steps=10, stepsize=0.01, rounds=1000,
                      x0=p.x_star + 1, trials=64, key=jax.random.key(1), dtype="float32",
                      record_every=100)
    assert np.all(np.isfinite(res.gap)) and np.all(np.isfinite(res.x_final))


def test_nonnegative_is_maximum_with_zero_and_keeps_nan():
    a = np.array([-2.0, -1e-300, -0.0, 0.0, 1e-300, 3.0, np.inf, -np.inf, np.nan])
    for dtype in DTYPES:
        got = np.asarray(nonnegative(jnp.asarray(a, dtype)))
        want = np.maximum(a.astype(dtype), 0)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, want)  # NaN where NaN, -0.0 == 0.0


def test_oracle_magnitude_of_nan_value_is_nan():
    p = fa.problems.huber_offsets(offsets=[0.0, 4.0])
    m = fa.RademacherOracle().magnitude(p, p.client(0), jnp.array([0.0]), jnp.array(np.nan))
    assert np.isnan(m)


def test_like_model_puts_a_one_entry_models_value_in_its_shape_only():
    v = jnp.asarray(2.5)
    assert like_model(v, jnp.zeros(1)).shape == (1,)
    assert like_model(v, jnp.zeros(3)).shape == ()  # d > 1: the scalar, not d copies
    assert float(like_model(v, jnp.zeros(1))[0]) == 2.5


@pytest.mark.parametrize("dim", [1, 3])
def test_rademacher_gradient_is_the_formula_whatever_the_shape_of_the_value(dim):
    """g + eps sqrt(f_i - f_i*) / sqrt(d), written here from Section IV-B, for d = 1 (where
    the default magnitude gets f_i in x's shape) and d = 3."""
    p = fa.problems.quadratics(jax.random.key(1), n=3, d=dim)
    oracle = fa.RademacherOracle()
    x = jnp.linspace(-1.0, 2.0, dim)
    eps = jnp.where(jnp.arange(dim) % 2 == 0, 1.0, -1.0)
    for i in range(3):
        c = p.client(i)
        f, g = p.local_value_and_grad(c, x)
        want = g + eps * np.sqrt(float(f) - float(c.local_min)) / np.sqrt(dim)
        got = oracle.gradient(p, c, x, eps)
        assert got.shape == (dim,)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-14)
