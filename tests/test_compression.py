"""Compressors, error feedback and Gaussian noise as message transforms: closed forms, hand
cases, exact bit counts, and the noise of DP-FedAvg's aggregate."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa

T = fa.transforms
INFO = T.no_info()
V = np.array([0.3, -1.2, 0.0, 2.5, -0.7, 0.05, 1.1, -0.4, 0.9, -2.0, 0.2, 0.6])
N = 100_000


def _draws(compressor, v, n=N, seed=0):
    """n draws of C(v), each from its own words."""
    d = v.size
    words = jax.random.bits(jax.random.key(seed), (n, max(compressor.num_words(d), 1)),
                            jnp.uint32)
    out = jax.jit(jax.vmap(lambda w: compressor.compress(w, jnp.asarray(v))[0]))(words)
    return np.asarray(out)


def _mean_and_error_z(compressor, v, draws):
    """|z| of the per-coordinate means against v, and of E||C(v) - v||^2 against the closed
    form (standard errors from the draws)."""
    n = draws.shape[0]
    se = draws.std(axis=0, ddof=1) / np.sqrt(n)
    zmean = np.abs(draws.mean(axis=0) - v) / np.where(se > 0, se, np.inf)
    err = np.sum((draws - v) ** 2, axis=1)
    exact = fa.theory.compression_error(compressor, v)
    zerr = abs(err.mean() - exact) / (err.std(ddof=1) / np.sqrt(n))
    return zmean, zerr, err.mean(), exact


@pytest.mark.parametrize("compressor", [T.RandK(3), T.QSGD(1), T.QSGD(4), T.Natural()],
                         ids=["randk3", "qsgd1", "qsgd4", "natural"])
def test_unbiased_compressors_mean_and_variance_within_4_se_of_closed_forms(compressor):
    draws = _draws(compressor, V)
    zmean, zerr, measured, exact = _mean_and_error_z(compressor, V, draws)
    assert np.all(zmean < 4.0), zmean
    assert zerr < 4.0, (measured, exact)
    # the closed form lies within the stated omega bound, with equality for RandK
    omega = fa.theory.compressor_omega(compressor, V.size)
    assert exact <= omega * V @ V * (1 + 1e-12)
    if isinstance(compressor, T.RandK):
        np.testing.assert_allclose(exact, omega * V @ V, rtol=1e-12)


def test_the_mean_check_detects_a_biased_compressor():
    """Negative control: RandK without its d/k scale is caught by the same 4 s.e. check."""
    draws = _draws(T.RandK(3), V) * 3 / V.size
    zmean, *_ = _mean_and_error_z(T.RandK(3), V, draws)
    assert np.max(zmean) > 40


def test_natural_compression_rounds_to_the_two_nearest_powers_of_two():
    draws = _draws(T.Natural(), np.array([3.0, -0.75, 4.0, 0.0]), n=2000)
    assert set(np.unique(draws[:, 0])) == {2.0, 4.0}
    assert set(np.unique(draws[:, 1])) == {-0.5, -1.0}
    assert np.all(draws[:, 2] == 4.0) and np.all(draws[:, 3] == 0.0)


def test_topk_sign_and_clip_on_hand_cases():
    v = jnp.array([1.0, -4.0, 3.0, 3.0])
    sent, bits = T.TopK(2).compress(None, v)
    np.testing.assert_array_equal(sent, [0.0, -4.0, 3.0, 0.0])  # the tie goes to index 2
    assert bits == 2 * (32 + 2)
    sent, bits = T.Sign().compress(None, v)
    np.testing.assert_array_equal(sent, [2.75, -2.75, 2.75, 2.75])  # ||v||_1 / d = 11 / 4
    assert bits == 4 + 32
    u, _, s = T.Clip(2.5).apply(None, jnp.array([3.0, 4.0]), (), INFO)
    np.testing.assert_allclose(u, [1.5, 2.0], rtol=1e-15)
    assert float(s["clipped"]) == 1.0
    u, _, s = T.Clip(5.0).apply(None, jnp.array([3.0, 4.0]), (), INFO)
    np.testing.assert_array_equal(u, [3.0, 4.0])
    assert float(s["clipped"]) == 0.0
    assert fa.theory.compression_error(T.TopK(2), np.asarray(v)) == 10.0
    assert fa.theory.compression_error(T.Sign(), np.asarray(v)) == 35.0 - 121.0 / 4


def test_bit_counts_on_hand_cases():
    v = jnp.ones(1000)
    w = jnp.zeros(1000, jnp.uint32)
    # ceil(log2 1000) = 10 bits an index; QSGD(s): ceil(log2(2 s + 1)) bits a level
    cases = [(T.NoCompression(), 32000), (T.NoCompression(value_bits=16), 16000),
             (T.RandK(7), 7 * 42), (T.TopK(7, value_bits=64), 7 * 74), (T.Sign(), 1032),
             (T.QSGD(1), 32 + 2000), (T.QSGD(2), 32 + 3000), (T.QSGD(3), 32 + 3000),
             (T.QSGD(4), 32 + 4000), (T.QSGD(127), 32 + 8000), (T.QSGD(128), 32 + 9000),
             (T.Natural(), 9000)]
    for compressor, bits in cases:
        _, _, stats = compressor.apply(w[:compressor.num_words(1000)], v, (), INFO)
        assert float(stats["bits"]) == bits, type(compressor).__name__
    assert T.index_bits(1) == 0 and T.index_bits(2) == 1 and T.index_bits(1024) == 10
    assert T.index_bits(1025) == 11


def test_error_feedback_and_ef21_two_steps_by_hand():
    ef = T.ErrorFeedback(T.TopK(1))
    state = ef.init(jnp.zeros(2))
    sent, state, _ = ef.apply(None, jnp.array([2.0, 1.0]), state, INFO)
    np.testing.assert_array_equal(sent, [2.0, 0.0])
    sent, state, _ = ef.apply(None, jnp.array([0.5, 0.8]), state, INFO)
    # p = [0.5, 0.8] + e = [0.5, 1.8]: top-1 keeps 1.8; e = [0.5, 0]
    np.testing.assert_array_equal(sent, [0.0, 1.8])
    np.testing.assert_array_equal(state[0], [0.5, 0.0])
    ef21 = T.EF21(T.TopK(1))
    state = ef21.init(jnp.zeros(2))
    g, state, _ = ef21.apply(None, jnp.array([2.0, 1.0]), state, INFO)
    g, state, _ = ef21.apply(None, jnp.array([1.0, 3.0]), state, INFO)
    # g = [2, 0] + TopK([1, 3] - [2, 0]) = [2, 0] + [0, 3]
    np.testing.assert_array_equal(g, [2.0, 3.0])


def test_bits_per_round_in_a_run_and_mask_equals_gather():
    p = fa.problems.huber_offsets(jax.random.key(0), n=10, d_max=20.0)
    kw = dict(num_sampled=3, stepsize=1e-2, rounds=6, x0=p.x_star + 1.0, trials=4,
              key=jax.random.key(1), record_every=1, local_steps=2)
    for compressor, bits in [(T.QSGD(2), 32 + 3), (T.ErrorFeedback(T.Sign()), 33)]:
        a = fa.simulate(p, mode="mask", transform=compressor, **kw)
        b = fa.simulate(p, mode="gather", transform=compressor, **kw)
        np.testing.assert_array_equal(a.x, b.x)
        np.testing.assert_array_equal(a.metrics["bits"], b.metrics["bits"])
        np.testing.assert_array_equal(np.diff(a.metrics["bits"], axis=1), 3 * bits)


@pytest.mark.slow  # 7-25 s: with the long checks, for the default run's 10 minutes
def test_gaussian_noise_shared_by_the_round_gives_the_sum_its_variance():
    """DP-FedAvg's aggregate: updates that are zero (every client at its minimum), so
    x_1 - x_0 is the noise alone: N(0, z^2 c^2 / S^2) with the paper's sampler (sum over S
    participants divided by S), N(0, z^2 c^2 / (n q)^2) with Poisson(q)'s unbiased
    weights; per-client noise (shared=False) gives z^2 c^2 / S instead (the control)."""
    n, R = 12, 6000
    p = fa.problems.quadratics(jax.random.key(0), n=n, d=3, spread=0.0)  # all minima at 0
    kw = dict(stepsize=0.1, rounds=1, x0=jnp.zeros(3), trials=R, key=jax.random.key(3),
              local_steps=2, oracle=fa.ExactOracle())
    c, z, S, q = 0.5, 1.3, 4, 0.25
    sigma2 = (z * c) ** 2

    def variance_z(x, expected):
        x = x.reshape(-1)
        var = x.var()
        return abs(var - expected) / (expected * np.sqrt(2 / x.size))

    a = fa.simulate(p, num_sampled=S, transform=T.dp_fedavg(c, z), **kw).x_final
    assert variance_z(a, sigma2 / S ** 2) < 4
    b = fa.simulate(p, sampler=fa.Poisson(np.full(n, q)), transform=T.dp_fedavg(c, z),
                    **kw).x_final
    nonempty = np.any(b != 0, axis=1)  # a round without participants, probability 0.75^12 = 3%, stays
    assert variance_z(b[nonempty], sigma2 / (n * q) ** 2) < 4
    local = fa.simulate(p, num_sampled=S, transform=T.GaussianNoise(z * c), **kw).x_final
    assert variance_z(local, sigma2 / S) < 4
    assert variance_z(local, sigma2 / S ** 2) > 40  # the shared variance is not the local one


def test_no_clipped_update_above_the_bound():
    words = jnp.zeros((0,), jnp.uint32)
    v = jax.random.normal(jax.random.key(4), (5000, 20)) * jnp.logspace(-3, 2, 5000)[:, None]
    out = jax.vmap(lambda u: T.Clip(0.7).apply(words, u, (), INFO)[0])(v)
    assert float(jnp.max(jnp.linalg.norm(out, axis=1))) <= 0.7 * (1 + 1e-15)


def test_compressed_oracle_abc_constants_against_the_prediction():
    """Problem (25)'s oracle (26), C = 1, D = 1/2, L = 1, compressed by Natural
    (omega = 1/8): at the predicted C' = (1 + omega) C + 2 L omega the measured D is at most
    D' = (1 + omega) D; at the uncompressed C the measured D exceeds the uncompressed D
    (the control: the check sees what compression costs)."""
    p = fa.problems.softplus_huber()
    base = fa.theory.abc_constants(p, domain=(-50.0, 50.0), num_points=201)
    oracle = T.CompressedOracle(p.oracle, T.Natural())
    pred = fa.theory.compressed_abc(base.C, base.D, fa.theory.compressor_omega(T.Natural(), 1),
                                    L=1.0)
    kw = dict(domain=(-50.0, 50.0), num_points=201, key=jax.random.key(0), num_samples=4096)
    at_pred = fa.theory.abc_constants(p, oracle, C=pred.C, **kw)
    at_base = fa.theory.abc_constants(p, oracle, C=base.C, **kw)
    assert at_pred.D <= pred.D
    assert at_base.D > base.D + 1.0


def test_bad_arguments_get_one_line_errors():
    for make, match in [(lambda: T.RandK(0), "RandK's k"), (lambda: T.TopK(1.5), "TopK's k"),
                        (lambda: T.QSGD(0), "levels"), (lambda: T.Sign(value_bits=0), "value_bits"),
                        (lambda: T.GaussianNoise(-1.0), "stddev"),
                        (lambda: T.dp_fedavg(0.0, 1.0), "clip_norm"),
                        (lambda: T.ErrorFeedback("topk"), "compressor"),
                        (lambda: T.ErrorFeedback(T.Clip(1.0)), "compressor .* got Clip"),
                        (lambda: T.EF21(T.GaussianNoise(0.1)), "compressor .* got GaussianNoise"),
                        (lambda: fa.theory.compressor_omega(T.TopK(2), 4), "biased")]:
        with pytest.raises(ValueError, match=match):
            make()
    with pytest.raises(ValueError, match="k must be <= d"):
        T.RandK(5).num_words(3)


@pytest.mark.slow  # 7-25 s: with the long checks, for the default run's 10 minutes
def test_a_sweep_over_a_transform_parameter_matches_separate_runs():
    """QSGD's levels and dp_fedavg's noise are data: one sweep, the numbers of simulate."""
    p = fa.problems.huber_offsets(jax.random.key(0), n=10, d_max=20.0)
    kw = dict(num_sampled=3, stepsize=1e-2, rounds=12, x0=p.x_star + 1.0, trials=4,
              key=jax.random.key(1), record_every=3, local_steps=2)
    sw = fa.sweep(p, grid={"transform.levels": [1, 4]}, transform=T.QSGD(1), **kw)
    for res, s in zip(sw.results, [1, 4]):
        one = fa.simulate(p, transform=T.QSGD(s), **kw)
        np.testing.assert_array_equal(res.x, one.x)
        np.testing.assert_array_equal(res.metrics["bits"], one.metrics["bits"])
    sw = fa.sweep(p, grid={"transform.noise_multiplier": [0.0, 0.02]},
                  transform=T.dp_fedavg(0.5, 1.0), **kw)
    one = fa.simulate(p, transform=T.chain(T.Clip(0.5), T.GaussianNoise(0.01, shared=True)), **kw)
    np.testing.assert_array_equal(sw.results[1].x, one.x)
    with pytest.raises(ValueError, match="needs a transform= to vary"):
        fa.sweep(p, grid={"transform.levels": [1]}, **kw)


def test_dp_fedavg_is_clip_then_shared_noise_and_keeps_z_over_a_clip_sweep():
    """DPFedAvg(c, z) has the bits of chain(Clip(c), GaussianNoise(z c, shared=True)) in
    float64 (the published DP-FedAvg runs), and a sweep over c keeps the noise multiplier."""
    p = fa.problems.quadratics(jax.random.key(0), n=8, d=3)
    kw = dict(num_sampled=3, stepsize=5e-2, rounds=10, x0=np.ones(3), trials=4,
              key=jax.random.key(1), local_steps=2)
    for c, z in [(0.3, 1.7), (0.05, 0.0), (2.0, 0.9)]:
        by_hand = T.chain(T.Clip(c), T.GaussianNoise(z * c, shared=True))
        np.testing.assert_array_equal(fa.simulate(p, transform=T.dp_fedavg(c, z), **kw).x,
                                      fa.simulate(p, transform=by_hand, **kw).x)
    sw = fa.sweep(p, grid={"transform.clip_norm": [0.1, 0.4]}, transform=T.dp_fedavg(0.2, 1.5),
                  **kw)
    for res, c in zip(sw.results, [0.1, 0.4]):  # to rounding: z c is batched in the sweep
        np.testing.assert_allclose(res.x, fa.simulate(p, transform=T.dp_fedavg(c, 1.5),
                                                      **kw).x, rtol=1e-13, atol=1e-15)
    assert sw.results[0].config["transform"] == "DPFedAvg(clip_norm=0.1, noise_multiplier=1.5)"
    with pytest.raises(ValueError, match=r"transform.noise_multiplier' value -1.0: "
                                         r"noise_multiplier \(z\) must be >= 0"):
        fa.sweep(p, grid={"transform.noise_multiplier": [1.0, -1.0]},
                 transform=T.dp_fedavg(0.2, 1.5), **kw)


class Quarters(T.AbstractCompressor):
    """A user's compressor: each coordinate kept with probability 1/4 and scaled by 4
    (unbiased; E (C(v)_j - v_j)^2 = (9/4 + 3/4) v_j^2: omega = 3); one word a coordinate,
    d values sent."""

    def num_words(self, d):
        return d

    def compress(self, words, v):
        keep = (words & 3) == 0
        return jnp.where(keep, 4 * v, 0), 32 * v.shape[-1]

    def omega(self, d):
        return 3.0

    def error(self, v):
        return 3.0 * float(v @ v)


def test_a_users_compressor_gets_its_theory_and_a_run():
    v = np.array([3.0, -1.0, 0.5, 2.0])
    assert fa.theory.compressor_omega(Quarters(), 4) == 3.0
    assert fa.theory.compressor_delta(Quarters(), 4) == 0.25  # 1 / (1 + omega) by default
    assert fa.theory.compression_error(Quarters(), v) == 3.0 * float(v @ v)
    words = np.random.default_rng(3).integers(0, 2 ** 32, (20000, 4), dtype=np.uint32)
    sent = np.asarray(jax.vmap(lambda w: Quarters().compress(w, jnp.asarray(v))[0])(words))
    sq = np.sum((sent - v) ** 2, axis=1)  # Monte Carlo of E ||C(v) - v||^2
    assert abs(sq.mean() - 3.0 * (v @ v)) < 5 * sq.std(ddof=1) / np.sqrt(sq.size)
    se = sent.std(axis=0, ddof=1) / np.sqrt(len(words))
    assert np.all(np.abs(sent.mean(axis=0) - v) < 5 * se)  # unbiased
    p = fa.problems.quadratics(jax.random.key(0), n=6, d=4)
    res = fa.simulate(p, num_sampled=2, local_steps=2, stepsize=0.05, rounds=5, x0=np.ones(4),
                      key=jax.random.key(1), trials=3, transform=Quarters())
    assert np.all(res.metrics["bits"][:, -1] == 5 * 2 * 32 * 4)  # T S d values of 32 bits
    with pytest.raises(ValueError, match=r"no closed-form omega for Opaque \(a compressor "
                                         r"gives one through its omega method\)"):
        fa.theory.compressor_omega(type("Opaque", (Quarters,), {"omega": lambda s, d: None})(),
                                   4)
