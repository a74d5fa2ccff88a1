"""Theorem 1: L = 9/4, sigma_f* <= 1/2 and |u'(x_k)|^2 >= (k pi)^2/8 at x_k = sqrt((2 k pi)^4 - 1)."""

import math

import numpy as np
import pytest

import fedjax_abc as fa
from fedjax_abc import theory as th


@pytest.fixture(scope="module")
def problem():
    return fa.problems.bgd_counterexample()


@pytest.fixture(scope="module")
def values(problem):
    return th.theorem1_values(ks=(1, 2, 3, 4, 5, 10), domain=(-1.0e4, 1.0e4), num_points=200_001,
                              problem=problem)


def test_smoothness_bound(values):
    assert values.L_bound == 9.0 / 4.0
    assert values.max_abs_second_derivative <= values.L_bound
    # r = 1, r' = 0, r'' = 1 at x = 0: f_1''(0) = 1 + U'(1) = 1 + sin(1)/2 + cos(1)/4, the maximum
    f1_dd_0 = 1.0 + math.sin(1.0) / 2.0 + math.cos(1.0) / 4.0
    assert values.max_abs_second_derivative == pytest.approx(f1_dd_0, abs=1e-9)
    assert abs(values.argmax_second_derivative) < 1e-3


def test_sigma_and_local_minima(values):
    # both clients are minimised at x = 0 (r = 1): f_{1,2}* = 1 +/- sin(1)/2, so sigma_f* = 0
    assert values.f1_star == pytest.approx(1.0 + math.sin(1.0) / 2.0, abs=1e-10)
    assert values.f2_star == pytest.approx(1.0 - math.sin(1.0) / 2.0, abs=1e-10)
    assert values.f1_star >= 0.5 and values.f2_star >= 0.5  # f_i >= r/2 >= 1/2
    assert -1e-10 <= values.sigma_f_star <= 0.5


def test_bgd_lhs_diverges_along_x_k(values):
    k = np.asarray(values.ks, float)
    np.testing.assert_allclose(values.x_k, np.sqrt((2 * k * np.pi) ** 4 - 1), rtol=1e-15)
    np.testing.assert_allclose(values.lower_bound, (k * np.pi) ** 2 / 8, rtol=1e-15)
    # exact jax gradients agree with U'(r(x_k)) r'(x_k) = (k pi/2) sqrt(1 - (2 k pi)^-4)
    np.testing.assert_allclose(values.bgd_lhs, values.bgd_lhs_closed_form, rtol=1e-9)
    assert np.all(values.bgd_lhs >= values.lower_bound)
    # so (3) fails for zeta^2 + psi^2 = B once (k pi)^2/8 > B, since |r'| < 1
    B = 100.0
    assert values.bgd_lhs[-1] > B


def test_bgd_sum_grows_with_the_domain(values, problem):
    p = problem
    sums = [th.bgd_sum(p, (-R, R), 20_001).total for R in (100.0, 1000.0, 4000.0)]
    assert sums[0] < sums[1] < sums[2]
    assert sums[2] >= values.bgd_lhs[3]  # x_4 ~ 632 lies inside [-4000, 4000]


def test_x_k_and_validation():
    assert float(th.theorem1_x_k(1)) == pytest.approx(math.sqrt((2 * math.pi) ** 4 - 1))
    with pytest.raises(ValueError):
        th.theorem1_values(ks=(0,))
    with pytest.raises(ValueError, match="Theorem 1"):
        th.theorem1_values(problem=fa.problems.softplus_huber())
