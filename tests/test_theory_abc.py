"""ABC constants (eq. 4/8) of the paper's oracles and the failure of relaxed growth (eq. 2)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa
from fedjax_abc import theory as th

DOMAIN = (-50.0, 50.0)


@pytest.fixture(scope="module")
def sh():
    return fa.problems.softplus_huber()


@pytest.fixture(scope="module")
def huber():
    return fa.problems.huber_offsets(jax.random.key(0), 10, 20.0)


class UniformOracle(fa.AbstractOracle):
    """g = grad f_i + sqrt(f_i - f_i*) z, z ~ U[-sqrt 3, sqrt 3]: variance f_i - f_i*.

    Not one of the package's oracles, so its variance is estimated by Monte Carlo.
    """

    def noise(self, key, shape, dtype):
        return jax.random.uniform(key, shape, dtype, -jnp.sqrt(3.0), jnp.sqrt(3.0))

    def gradient(self, problem, client, x, z):
        f, g = problem.local_value_and_grad(client, x)
        return g + z * jnp.sqrt(jnp.maximum(f - client.local_min, 0))


def test_oracle26_recovers_C1_D_half(sh):
    c = th.abc_constants(sh, domain=DOMAIN)
    assert c.exact and c.max_stderr == 0.0
    assert c.C == pytest.approx(1.0, abs=1e-9)
    assert c.D == pytest.approx(0.5, abs=1e-9)
    # the paper's pair is feasible, and D = 1/2 is the smallest D for C = 1 (|x| = Huber + 1/2
    # for |x| >= 1)
    assert th.abc_slack(sh, 1.0, 0.5, domain=DOMAIN).holds
    assert not th.abc_slack(sh, 1.0, 0.49, domain=DOMAIN).holds
    assert th.abc_constants(sh, domain=DOMAIN, C=1.0).D == pytest.approx(0.5, abs=1e-12)


def test_oracle26_tradeoff_closed_form(sh):
    # client 1: D(C) = max_x |x| - C Huber(x) = max(1/(2C), 1 - C/2) for C >= 1 (at |x| = 1/C
    # and |x| = 1); the softplus clients have variance f_i = gap and need nothing for C >= 1.
    for C in (1.0, 2.0, 4.0):
        D = th.abc_constants(sh, domain=DOMAIN, C=C).D
        assert D == pytest.approx(max(1 / (2 * C), 1 - C / 2), abs=1e-9), C
    # C < 1 pays for the growth of |x|: D >= R (1 - C) + C/2 at x = R = 50
    assert th.abc_constants(sh, domain=DOMAIN, C=0.5).D == pytest.approx(50 * 0.5 + 0.25, abs=1e-9)


def test_section_4b_oracle_recovers_C1_D0(huber):
    c = th.abc_constants(huber, domain=(-30.0, 50.0))
    assert c.C == pytest.approx(1.0, abs=1e-9)
    assert c.D == pytest.approx(0.0, abs=1e-9)
    assert th.abc_slack(huber, 1.0, 0.0, domain=(-30.0, 50.0)).holds


def test_gaussian_oracle_monte_carlo_matches_exact(huber):
    oracle = fa.GaussianOracle(0.7, 0.3)
    pts = np.linspace(-5.0, 25.0, 7)[:, None]
    ex = th.oracle_variance(huber, oracle, domain=pts)
    mc = th.oracle_variance(huber, oracle, domain=pts, method="monte_carlo",
                            key=jax.random.key(0), num_samples=2048)
    assert ex.exact and not mc.exact
    np.testing.assert_allclose(ex.variance, 0.7 * ex.gap + 0.3, rtol=1e-12)
    z = (mc.variance - ex.variance) / mc.stderr
    assert np.max(np.abs(z)) < 4.5, z  # 70 estimates: |z| > 4.5 has probability ~5e-4


def test_rademacher_monte_carlo_is_exact(sh):
    pts = np.linspace(-3.0, 3.0, 5)[:, None]
    ex = th.oracle_variance(sh, domain=pts)
    mc = th.oracle_variance(sh, domain=pts, method="monte_carlo", key=jax.random.key(1),
                            num_samples=64)
    np.testing.assert_allclose(mc.variance, ex.variance, rtol=1e-12)  # |eps| = 1: no spread
    np.testing.assert_allclose(ex.variance[:, 0], np.abs(pts[:, 0]), rtol=1e-12)  # sqrt|x|^2


def test_custom_oracle_monte_carlo_constants(huber):
    oracle = UniformOracle()
    pts = np.linspace(-5.0, 25.0, 31)[:, None]
    v = th.oracle_variance(huber, oracle, domain=pts, key=jax.random.key(2), num_samples=4096)
    assert not v.exact
    ok = v.stderr > 0
    z = (v.variance[ok] - v.gap[ok]) / v.stderr[ok]
    assert np.max(np.abs(z)) < 5.0
    c = th.abc_constants(huber, oracle, domain=pts, key=jax.random.key(2), num_samples=4096)
    assert c.C == pytest.approx(1.0, abs=0.05) and c.D < 0.2
    assert c.C_upper95 + c.D_upper95 >= c.C + c.D
    with pytest.raises(ValueError, match="key"):
        th.abc_constants(huber, oracle, domain=pts)
    with pytest.raises(ValueError, match="no exact variance"):
        th.oracle_variance(huber, oracle, domain=pts, method="exact")


class UniformOracleWithVariance(UniformOracle):
    """The same oracle telling its closed-form variance: read exactly, no Monte Carlo."""

    def variance(self, problem, i, x):
        client = problem.client(i)
        return jnp.maximum(problem.local_value(client, x) - client.local_min, 0)


def test_an_oracle_that_gives_its_variance_is_read_exactly(huber):
    pts = np.linspace(-5.0, 25.0, 7)[:, None]
    v = th.oracle_variance(huber, UniformOracleWithVariance(), domain=pts)
    assert v.exact and np.all(v.stderr == 0)
    np.testing.assert_allclose(v.variance, v.gap, rtol=1e-12, atol=1e-12)
    assert th.abc_constants(huber, UniformOracleWithVariance(), domain=pts).C == \
        pytest.approx(1.0, abs=1e-9)


def test_relaxed_growth_fails_for_oracle26(sh):
    for eta_sq in (0.0, 1.0, 10.0):
        sig = [th.relaxed_growth_sigma_sq(sh, eta_sq, (-R, R), 2001).sigma_sq
               for R in (10.0, 100.0, 1000.0)]
        # Huber client: |x| - eta^2 Huber'(x)^2 = R - eta^2 at x = R
        for s, R in zip(sig, (10.0, 100.0, 1000.0)):
            assert s >= R - eta_sq - 1e-9
        assert sig[0] < sig[1] < sig[2]


def test_relaxed_growth_holds_for_gaussian_quadratics():
    # f_i = a_i (x - c_i)^2/2: variance C gap + D = (C a_i/2)(x - c_i)^2 + D and
    # ||grad f_i||^2 = a_i^2 (x - c_i)^2, so eta^2 = C/(2 min a) gives sigma^2 = D on any domain.
    a, c, C, D = np.array([0.5, 1.0, 2.0]), np.array([-1.0, 0.0, 3.0]), 1.0, 0.2
    loss = lambda prm, x: 0.5 * prm[0] * jnp.sum((x - prm[1]) ** 2)  # noqa: E731
    x_star = (a * c).sum() / a.sum()
    p = fa.make_problem(loss, (jnp.asarray(a), jnp.asarray(c)), fa.GaussianOracle(C, D),
                        local_minima=np.zeros(3), x_star=[x_star],
                        f_star=np.mean(0.5 * a * (x_star - c) ** 2))
    for R in (10.0, 1000.0):
        r = th.relaxed_growth_sigma_sq(p, C / (2 * a.min()), (-R, R), 2001)
        assert r.sigma_sq == pytest.approx(D, abs=1e-9)


def test_validation(sh):
    with pytest.raises(ValueError, match="C"):
        th.abc_constants(sh, domain=DOMAIN, C=-1.0)
    with pytest.raises(ValueError, match="method"):
        th.oracle_variance(sh, domain=DOMAIN, method="nope")
    with pytest.raises(ValueError, match="domain="):
        th.abc_constants(sh, DOMAIN)
    with pytest.raises(ValueError, match="eta_sq"):
        th.relaxed_growth_sigma_sq(sh, -1.0, DOMAIN)


@pytest.mark.parametrize("which", ["sh", "huber"])
def test_remark1_client_average_of_eq8(which, sh, huber):
    """Remark 1: the client average of (8) at x is (1/n) sum_i [C (f_i(x) - f_i*) + D] =
    C (f(x) - f*) + C sigma_f* + D, so that abc_slack >= 0 at every client bounds the average
    variance by it; on the paper's oracles, with their (C, D) from abc_constants."""
    p = sh if which == "sh" else huber
    c = th.abc_constants(p, domain=DOMAIN)
    assert th.abc_slack(p, c.C, c.D, domain=DOMAIN).holds
    v = th.oracle_variance(p, domain=DOMAIN, num_points=401)
    gap = np.asarray([float(p.gap(np.asarray(x))) for x in v.points])
    average = c.C * np.asarray(v.gap).mean(axis=1) + c.D
    remark = c.C * (gap + th.sigma_f_star(p)) + c.D
    np.testing.assert_allclose(average, remark, rtol=1e-12, atol=1e-12)
    assert np.all(np.asarray(v.variance).mean(axis=1) <= remark * (1 + 1e-10) + 1e-12)
