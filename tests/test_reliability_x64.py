"""Client sampling is uniform in float32 with ``jax_enable_x64`` switched off after the
problem is built.

A uint64 product silently becomes uint32 without x64, which made ``_uniform_below`` return 0
for every word (the same clients every round). Without x64 it now multiplies 16-bit halves
in uint32 (with x64, one uint64 product): the same integers as the exact product in both
modes.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa
from fedjax_abc._problems._samplers import _uniform_below

RNG = np.random.default_rng(7)
WORDS = np.concatenate([
    np.array([0, 1, 2, 0xFFFF, 0x10000, 0x10001, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 2, 2 ** 32 - 1],
             dtype=np.uint32),
    RNG.integers(0, 2 ** 32, 2000, dtype=np.uint32),
])
QUADRATICS = fa.problems.quadratics(jax.random.key(0), n=6, d=3)  # built with x64 on
BOUNDS = np.concatenate([
    np.array([1, 2, 3, 40, 0xFFFF, 0x10000, 0x10001, 10 ** 6, 2 ** 31 - 1, 2 ** 31],
             dtype=np.uint32),
    RNG.integers(1, 2 ** 31, 40, dtype=np.uint32),
])


@pytest.fixture(params=[True, False], ids=["x64_on", "x64_off"])
def x64(request):
    """Runs the test with jax_enable_x64 as the parameter says, restoring it afterwards."""
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", request.param)
    try:
        yield request.param
    finally:
        jax.config.update("jax_enable_x64", before)


@pytest.fixture
def x64_off():
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", False)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", before)


def test_uniform_below_is_the_high_half_of_the_product(x64):
    got = np.asarray(jax.jit(jax.vmap(_uniform_below, in_axes=(None, 0)))(
        jnp.asarray(WORDS), jnp.asarray(BOUNDS)))
    assert got.dtype == np.int32
    expected = [[(int(w) * int(b)) >> 32 for w in WORDS] for b in BOUNDS]
    np.testing.assert_array_equal(got.astype(np.int64), np.array(expected, dtype=np.int64))


def test_the_x64_fixture_restores_the_flag():
    assert jax.config.jax_enable_x64  # the tests' set-up switched it on; the fixtures put it back


def _frequencies(sampler, n, sets):
    words = RNG.integers(0, 2 ** 32, (sets, sampler.num_words(n)), dtype=np.uint32)
    idx, w = jax.jit(jax.vmap(lambda ws: sampler.from_words(ws, n)))(jnp.asarray(words))
    mask = np.zeros((sets, n))
    np.add.at(mask, (np.arange(sets)[:, None], np.asarray(idx)), np.asarray(w))
    return mask


@pytest.mark.parametrize("sampler", [fa.UniformWithoutReplacement(4),
                                     fa.UniformWithoutReplacement(20), fa.WithReplacement(4)],
                         ids=["without_S4", "without_S20", "with_S4"])
def test_samplers_are_uniform_without_x64(x64_off, sampler):
    n, sets = 40, 20_000
    mask = _frequencies(sampler, n, sets)
    S = sampler.num_sampled
    assert np.all(mask.sum(1) == S)
    if isinstance(sampler, fa.UniformWithoutReplacement):
        assert mask.max() == 1  # S distinct clients
        p = S / n
    else:  # the chance that a client is drawn at least once in S draws
        p = 1 - (1 - 1 / n) ** S
    freq = (mask > 0).mean(0)
    se = np.sqrt(p * (1 - p) / sets)
    assert np.all(np.abs(freq - p) < 5 * se), (freq.min(), freq.max(), p)


def _one_hot_problem(n):
    """f_i(x) = |x - e_i|^2 / 2 on R^n: one exact step of size 1 from 0 lands on the mean of
    the sampled e_i, so x_1 S is the round's participation mask."""
    eye = np.eye(n, dtype=np.float32)
    x_star = np.full(n, 1.0 / n, dtype=np.float32)
    return fa.Problem(loss=lambda c, x: 0.5 * jnp.sum((x - c) ** 2), params=jnp.asarray(eye),
                      local_minima=jnp.zeros(n),
                      f_star=jnp.asarray(0.5 * np.sum((x_star - eye[0]) ** 2)),
                      x_star=jnp.asarray(x_star), oracle=fa.ExactOracle(), name="one-hot")


ONE_HOT = _one_hot_problem(40)  # built with x64 on (a Problem needs it), run with it off


@pytest.mark.parametrize("mode", ["mask", "gather"])
def test_float32_simulate_samples_every_client_without_x64(x64_off, mode):
    n, S, trials = 40, 4, 4000
    p = ONE_HOT
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. "Explicitly requested dtype uint64 ... truncated"
        res = fa.simulate(p, sampler=fa.UniformWithoutReplacement(S), local_steps=1,
                          stepsize=1.0, rounds=1, x0=np.zeros(n), trials=trials,
                          key=jax.random.key(3), dtype="float32", mode=mode, record_x=False)
    assert res.x_final.dtype == np.float32
    mask = res.x_final * S
    np.testing.assert_allclose(mask.sum(1), S, rtol=1e-6)
    assert set(np.unique(np.round(mask, 6))) <= {0.0, 1.0}
    p_in = S / n
    se = np.sqrt(p_in * (1 - p_in) / trials)
    freq = (mask > 0.5).mean(0)
    assert np.all(np.abs(freq - p_in) < 5 * se), (freq.min(), freq.max())


@pytest.mark.parametrize("oracle", [fa.GaussianOracle(1.0, 0.5), fa.RademacherOracle(),
                                    fa.ExactOracle()], ids=lambda o: type(o).__name__)
@pytest.mark.parametrize("sampler", [fa.UniformWithoutReplacement(3), fa.WithReplacement(3),
                                     fa.Bernoulli(0.3), fa.FullParticipation()],
                         ids=lambda s: type(s).__name__)
def test_float32_path_asks_for_no_64_bit_type_without_x64(x64_off, sampler, oracle):
    """JAX warns whenever a 64-bit dtype is requested without x64: none may be."""
    p = QUADRATICS
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = fa.simulate(p, sampler=sampler, oracle=oracle, local_steps=2, stepsize=0.05,
                          rounds=4, x0=np.asarray(p.x_star) + 1.0, trials=3, key=jax.random.key(1),
                          dtype="float32", record_every=2)
    assert res.gap.dtype == np.float32 and np.all(np.isfinite(res.gap))
