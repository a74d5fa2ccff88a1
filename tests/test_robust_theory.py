"""The theory of robust aggregation against closed forms and simulated runs.

- ``fa.theory``'s closed forms (expected normal order statistics by adaptive quadrature)
  against the independent ones of ``robust_closed_forms.py`` (Gauss-Legendre panels).
- In a run, 2,000 trials of one round in one program: the coordinate median's and the trimmed
  mean's bias with f Byzantine clients at +infinity and Gaussian honest updates (z within 4
  s.e.), the mean's and Krum's mean squared error without attack (Krum's between the bounds
  of a selected message, the mean's d sigma^2 / n); each shown failing on a wrong rule.
- The empirical kappa of each rule under each attack at most its published coefficient; the
  plain mean's unbounded under a sign flip of growing size.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa
from fedjax_abc import robust as rb
import robust_closed_forms as cf

TRIALS = 2000


@pytest.mark.parametrize("n, f", [(10, 3), (11, 4), (21, 5), (7, 0)])
def test_the_biases_equal_the_independent_closed_forms(n, f):
    assert fa.theory.median_bias_at_infinity(n, f) == pytest.approx(
        cf.median_inf_moments(n, f)[0], abs=1e-10)
    assert fa.theory.trimmed_mean_bias_at_infinity(n, f, sigma=2.0) == pytest.approx(
        cf.trimmed_mean_inf_moments(n, f, sigma=2.0)[0], abs=1e-10)


def test_the_ipm_factor_is_the_closed_form():
    assert fa.theory.ipm_contraction(10, 3, 2.0) == pytest.approx(cf.ipm_mean_factor(10, 3, 2.0))
    assert fa.theory.ipm_contraction(10, 3, 0.0) == pytest.approx(0.7)


def _noise_round(aggregator, byzantine, n=11):
    """x_1 - x_0 of 2,000 trials of one round: n identical clients at their optimum (d = 1),
    every client sampled, one local step of size 1 with N(0, 1) noise: the honest updates
    are independent N(0, 1), and the Byzantine ones the attack's."""
    p = fa.problems.huber_offsets(offsets=[0.0] * n)
    res = fa.simulate(p, num_sampled=None, local_steps=1, stepsize=1.0, rounds=1, x0=0.0,
                      trials=TRIALS, key=jax.random.key(5), record_every=1,
                      oracle=fa.GaussianOracle(C=0.0, D=1.0), aggregator=aggregator,
                      byzantine=byzantine)
    return res.x_final[:, 0]


def _z(values, expected):
    return (values.mean() - expected) / (values.std(ddof=1) / np.sqrt(len(values)))


@pytest.mark.parametrize("n, f", [(11, 4), (10, 3)])
def test_the_median_and_trimmed_mean_bias_under_infinite_attackers(n, f):
    byz = rb.Byzantine(rb.Inf(), clients=list(range(f)))
    med = _noise_round(rb.Median(), byz, n)
    assert abs(_z(med, fa.theory.median_bias_at_infinity(n, f))) < 4
    trim = _noise_round(rb.TrimmedMean(f), byz, n)
    assert abs(_z(trim, fa.theory.trimmed_mean_bias_at_infinity(n, f))) < 4
    # a wrong rule: the trimmed mean trimming one fewer keeps an infinity
    assert not np.all(np.isfinite(_noise_round(rb.TrimmedMean(f - 1), byz, n)))
    # a wrong bias: the median's, without the attackers (0), is far from what is measured
    assert abs(_z(med, 0.0)) > 8


def test_krum_and_the_mean_without_attack():
    n = 11
    mean = _noise_round(rb.WeightedMean(), rb.Byzantine(rb.SignFlip(), f=0), n)
    assert abs(_z(mean ** 2, cf.mean_mse(n, 1))) < 4
    krum = _noise_round(rb.Krum(2), None, n)
    lo, hi = cf.krum_mse_bounds(n, 1)
    mse, se = np.mean(krum ** 2), np.std(krum ** 2, ddof=1) / np.sqrt(TRIALS)
    assert lo - 4 * se < mse < hi + 4 * se
    assert mse > 2 * cf.mean_mse(n, 1)  # Krum selects one message: far above the mean's


@pytest.mark.parametrize("rule", [rb.Median(), rb.TrimmedMean(2), rb.Krum(2),
                                  rb.GeometricMedian(1e-6, 60)], ids=lambda r: type(r).__name__)
def test_the_empirical_kappa_is_within_the_published_bound(rule):
    honest = jax.random.normal(jax.random.key(3), (TRIALS, 7, 3)) * 2.0 + 1.0
    worst = 0.0
    for attack in (rb.SignFlip(), rb.InnerProductManipulation(0.5), rb.ALittleIsEnough(1.0),
                   rb.Mimic(), rb.OptimalALittleIsEnough(evals=8),
                   rb.OptimalInnerProductManipulation(evals=8)):
        k = fa.theory.robustness(rule, attack, honest, f=2)
        assert k.published is not None and k.lower_bound == pytest.approx(2 / 5)
        worst = max(worst, k.worst)
    assert 0 < worst <= rule.kappa(9, 2)


def test_the_plain_mean_has_no_bounded_kappa():
    honest = jax.random.normal(jax.random.key(3), (200, 7, 3))
    small = fa.theory.robustness(rb.WeightedMean(), rb.InnerProductManipulation(1.0), honest, 2)
    large = fa.theory.robustness(rb.WeightedMean(), rb.InnerProductManipulation(1e4), honest, 2)
    assert large.worst > 1e6 * small.worst / 1e4 and large.worst > rb.Median().kappa(9, 2)
    assert rb.WeightedMean().kappa(9, 2) is None


def test_published_coefficients_and_the_lower_bound():
    n, f = 9, 2
    r = f / (n - 2 * f)
    assert rb.TrimmedMean(f).kappa(n, f) == pytest.approx(cf.kappa("trimmed_mean", n, f))
    assert rb.Krum(f).kappa(n, f) == pytest.approx(6 * (1 + r))
    assert rb.Median().kappa(n, f) == pytest.approx(4 * (1 + r) ** 2)
    assert rb.MDA(f).kappa(n, f) is None and rb.MultiKrum(f).kappa(n, f) is None
    assert rb.Krum(4).kappa(8, 4) is None  # n <= 2f: no rule is robust


def test_the_breakdown_fraction_is_where_the_optimal_floor_blows_up():
    for B in (0.0, 0.5, 1.0, 3.0):
        frac = fa.theory.breakdown_fraction(B)
        assert frac == pytest.approx(cf.breakdown_fraction(B))
        # with kappa = f / (n - 2f) at f = frac n: kappa B^2 = 1 (for B > 0)
        n = 1_000_000
        f = frac * n
        if B > 0:
            assert f / (n - 2 * f) * B ** 2 == pytest.approx(1.0)
    with pytest.raises(ValueError, match="B"):
        fa.theory.breakdown_fraction(-1.0)


def test_robustness_refuses_bad_input_in_one_line():
    with pytest.raises(ValueError, match="rounds, n - f, d"):
        fa.theory.robustness(rb.Median(), rb.SignFlip(), jnp.zeros((3, 4)), f=1)
    with pytest.raises(ValueError, match="key"):
        fa.theory.robustness(rb.Median(), rb.Gaussian(), jnp.zeros((3, 4, 2)), f=1)
    with pytest.raises(ValueError, match=r"Krum\(f=3\) needs n >= 2f \+ 3"):
        fa.theory.robustness(rb.Krum(3), rb.SignFlip(), jnp.zeros((3, 4, 2)), f=1)


def test_robustness_compiles_once_per_rule_and_attack_structure():
    from conftest import count_compilations
    honest = jax.random.normal(jax.random.key(3), (50, 7, 3))
    fa.theory.robustness(rb.TrimmedMean(2), rb.ALittleIsEnough(1.0), honest, f=2)
    with count_compilations() as events:
        fa.theory.robustness(rb.TrimmedMean(1), rb.ALittleIsEnough(3.0), honest, f=2)
    assert events == []
