"""simulate agrees in distribution with an independent NumPy implementation of Algorithm 1.

The last iterate x_T over many trials is compared with tests/reference_numpy.py, which shares
no code with the package: mean and variance agree within 4 standard errors (standard error of
a difference of means, and of a difference of sample variances via the 4th central moment).
Sizes are chosen so that x_T has a clearly non-degenerate distribution.
"""

import functools

import jax
import numpy as np
import pytest

import fedjax_abc as fa
import reference_numpy as ref

TRIALS = 1000
Q = 5
T = 40
ALPHA = 0.05


@functools.lru_cache(maxsize=None)
def softplus_huber_runs(S):
    """(package x_T, reference x_T) on problem (25)-(26), n = 16, x0 = x* + 3."""
    p = fa.problems.softplus_huber()
    x0 = float(p.x_star[0]) + 3.0
    res = fa.simulate(p, num_sampled=S, local_steps=Q, stepsize=ALPHA, rounds=T, x0=x0,
                      trials=TRIALS, key=jax.random.key(101 + S), record_every=T // 4)
    rng = np.random.default_rng(201 + S)
    x_ref = ref.fedavg(ref.SoftplusHuber(16), x0, S=S, Q=Q, stepsizes=np.full(T, ALPHA),
                       trials=TRIALS, rng=rng)
    return p, res, x_ref[:, 0]


OFFSETS_KEY = 7
N27, DMAX27 = 10, 20.0


@functools.lru_cache(maxsize=None)
def huber_offsets_runs(S):
    """(package x_T, reference x_T) on problem (27), n = 10, Dmax = 20, x0 = x* + 5."""
    p = fa.problems.huber_offsets(jax.random.key(OFFSETS_KEY), n=N27, d_max=DMAX27)
    offsets = np.asarray(p.params).reshape(-1)
    x0 = float(p.x_star[0]) + 5.0
    res = fa.simulate(p, num_sampled=S, local_steps=Q, stepsize=ALPHA, rounds=T, x0=x0,
                      trials=TRIALS, key=jax.random.key(301 + S), record_every=T // 4)
    rng = np.random.default_rng(401 + S)
    x_ref = ref.fedavg(ref.HuberOffsets(offsets), x0, S=S, Q=Q, stepsizes=np.full(T, ALPHA),
                       trials=TRIALS, rng=rng)
    return p, res, x_ref[:, 0]


@pytest.mark.parametrize("S", [4, 16])
def test_softplus_huber_matches_numpy(S):
    _, res, x_ref = softplus_huber_runs(S)
    ref.assert_same_distribution(res.x_final[:, 0], x_ref, what=f"problem (25), S={S}")


@pytest.mark.parametrize("S", [3, 10])
def test_huber_offsets_matches_numpy(S):
    _, res, x_ref = huber_offsets_runs(S)
    ref.assert_same_distribution(res.x_final[:, 0], x_ref, what=f"problem (27), S={S}")


def test_offsets_follow_the_paper():
    """d_1 = d_2 = 0 and d_3..d_n in [0, Dmax] (eq. 27)."""
    p = fa.problems.huber_offsets(jax.random.key(OFFSETS_KEY), n=N27, d_max=DMAX27)
    d = np.asarray(p.params).reshape(-1)
    assert d.shape == (N27,)
    assert d[0] == 0 and d[1] == 0
    assert np.all((d[2:] >= 0) & (d[2:] <= DMAX27)) and np.unique(d[2:]).size == N27 - 2


def test_comparison_has_power():
    """The same comparison tells S = 4 from S = n apart: the agreement above is not vacuous."""
    _, res4, _ = softplus_huber_runs(4)
    _, _, x_ref16 = softplus_huber_runs(16)
    with pytest.raises(AssertionError):
        ref.assert_same_distribution(res4.x_final[:, 0], x_ref16)


@pytest.mark.parametrize("S", [4, 16])
def test_records_are_consistent(S):
    """x, gap, grad_norm_sq, rounds, x_final of a SimResult agree with each other and with eq. (25)."""
    p, res, _ = softplus_huber_runs(S)
    prob = ref.SoftplusHuber(16)
    assert res.rounds.tolist() == [0, 10, 20, 30, 40]
    assert res.gap.shape == (TRIALS, 5) and res.grad_norm_sq.shape == (TRIALS, 5)
    assert res.x.shape == (TRIALS, 5, 1) and res.x_final.shape == (TRIALS, 1)
    np.testing.assert_array_equal(res.x[:, -1], res.x_final)
    np.testing.assert_array_equal(res.x[:, 0, 0], float(p.x_star[0]) + 3.0)
    xs = res.x[:, :, 0]
    f_star = prob.f(float(p.x_star[0]))
    gap = np.vectorize(prob.f)(xs) - f_star
    gns = np.vectorize(prob.fprime)(xs) ** 2
    np.testing.assert_allclose(res.gap, gap, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(res.grad_norm_sq, gns, rtol=1e-10, atol=1e-15)
    assert np.all(res.gap >= -1e-15)


# ---------------------------------------------------- the other samplers: same semantics


SAMPLER_CASES = {
    "with_replacement": (lambda: fa.WithReplacement(3), ref.with_replacement_counts(3)),
    "bernoulli": (lambda: fa.Bernoulli(0.15), ref.bernoulli_indicators(0.15)),
}


@pytest.mark.parametrize("name", sorted(SAMPLER_CASES))
def test_other_samplers_match_numpy(name):
    """WithReplacement (repeats count twice) and Bernoulli (an empty round keeps x_t)."""
    make_sampler, weights = SAMPLER_CASES[name]
    p = fa.problems.huber_offsets(jax.random.key(OFFSETS_KEY), n=N27, d_max=DMAX27)
    offsets = np.asarray(p.params).reshape(-1)
    x0 = float(p.x_star[0]) + 5.0
    res = fa.simulate(p, sampler=make_sampler(), local_steps=Q, stepsize=ALPHA, rounds=T, x0=x0,
                      trials=TRIALS, key=jax.random.key(5), record_every=T)
    x_ref = ref.fedavg_weighted(ref.HuberOffsets(offsets), x0, weights=weights, Q=Q,
                                stepsizes=np.full(T, ALPHA), trials=TRIALS,
                                rng=np.random.default_rng(6))
    ref.assert_same_distribution(res.x_final[:, 0], x_ref[:, 0], what=name)


# ------------------------------------------------------------- larger runs (pytest -m slow)


@pytest.mark.slow
@pytest.mark.parametrize("which,S", [("softplus_huber", 1), ("softplus_huber", 8), ("softplus_huber", 16),
                                     ("huber_offsets", 4), ("huber_offsets", 40)])
def test_paper_sizes_match_numpy_with_many_trials(which, S):
    """20000 trials at the paper's n (16 for (25), 40 for (27)) and Q = 10; mean and variance within 4 se."""
    trials, T, Qp, alpha = 20000, 30, 10, 0.02
    if which == "softplus_huber":
        p = fa.problems.softplus_huber()
        prob = ref.SoftplusHuber(16)
        x0 = float(p.x_star[0]) + 3.0
    else:
        p = fa.problems.huber_offsets(jax.random.key(11), n=40, d_max=20.0)
        prob = ref.HuberOffsets(np.asarray(p.params).reshape(-1))
        x0 = float(p.x_star[0]) + 10.0
    res = fa.simulate(p, num_sampled=S, local_steps=Qp, stepsize=alpha, rounds=T, x0=x0, trials=trials,
                      key=jax.random.key(500 + S), record_every=T, mode="gather")
    x_ref = ref.fedavg(prob, x0, S=S, Q=Qp, stepsizes=np.full(T, alpha), trials=trials,
                       rng=np.random.default_rng(600 + S))
    ref.assert_same_distribution(res.x_final[:, 0], x_ref[:, 0], what=f"{which}, S={S}")
