"""sigma_f* (eq. 11), I_S (eq. 10), the optimized BGD sum (eq. 3, Table II) and Lemma 1 (eq. 12)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa
from fedjax_abc import theory as th
from fedjax_abc._theory._grid import local_values_and_grads


@pytest.fixture(scope="module")
def paper_problems():
    """The paper's problems with their smoothness constants, built once."""
    return {
        "huber20": (fa.problems.huber_offsets(jax.random.key(0), 40, 20.0), 1.0),
        "huber200": (fa.problems.huber_offsets(jax.random.key(0), 40, 200.0), 1.0),
        "softplus_huber": (fa.problems.softplus_huber(), 1.0),
        "theorem1": (fa.problems.bgd_counterexample(), 9.0 / 4.0),
    }


@pytest.fixture(scope="module")
def huber20(paper_problems):
    return paper_problems["huber20"][0]


NAMES = ["huber20", "huber200", "softplus_huber", "theorem1"]


def _quadratic_problem(curv, centres):
    """f_i(x) = a_i (x - c_i)^2 / 2 in 1-D, exact infima given in closed form."""
    a, c = np.asarray(curv, float), np.asarray(centres, float)
    x_star = float((a * c).sum() / a.sum())
    f_star = float(np.mean(0.5 * a * (x_star - c) ** 2))
    loss = lambda p, x: 0.5 * p[0] * jnp.sum((x - p[1]) ** 2)  # noqa: E731
    return fa.make_problem(loss, (jnp.asarray(a), jnp.asarray(c)), fa.GaussianOracle(1.0, 0.0),
                           local_minima=np.zeros(len(a)), f_star=f_star, x_star=[x_star])


# ------------------------------------------------------------------- eq. (11), eq. (10)


def test_sigma_f_star_closed_form():
    # offsets 0, 0, 4: f' = (2 clip(x) + clip(x - 4))/3 = 0 at x = 1/2; f* = (2/8 + 3)/3.
    p = fa.problems.huber_offsets(offsets=[0.0, 0.0, 4.0])
    assert float(p.x_star[0]) == pytest.approx(0.5, abs=1e-14)
    assert th.sigma_f_star(p) == pytest.approx(13.0 / 12.0, abs=1e-14)
    q = _quadratic_problem([1.0, 1.0], [0.0, 2.0])  # x* = 1, f* = 1/2, f_i* = 0
    assert th.sigma_f_star(q) == pytest.approx(0.5, abs=1e-15)


@pytest.mark.parametrize("name", NAMES[1:])
def test_stored_infima_are_consistent(paper_problems, name):
    p = paper_problems[name][0]
    x0 = float(p.x_star[0])
    chk = th.infima_check(p, (x0 - 300.0, x0 + 300.0), 20_001)
    assert chk.consistent, chk
    assert th.sigma_f_star(p) >= -1e-12
    # sigma_f* = inf_x mean_i (f_i - f_i*): the grid minimum of the average gap is >= it.
    vals, _ = local_values_and_grads(p, np.linspace(x0 - 5, x0 + 5, 20_001)[:, None])
    avg_gap = (vals - np.asarray(p.local_minima)).mean(axis=1)
    assert avg_gap.min() >= th.sigma_f_star(p) - 1e-12
    assert avg_gap.min() == pytest.approx(th.sigma_f_star(p), abs=1e-6)


def test_sampling_factor_values_and_validation():
    assert th.sampling_factor(40, 40) == 0.0  # I_n = 0: full participation
    assert th.sampling_factor(40, 1) == 1.0   # I_1 = 1
    assert th.sampling_factor(16, 4) == pytest.approx(12 / 15)
    assert th.sampling_factor(np.int64(5), np.int32(2)) == pytest.approx(0.75)
    with pytest.raises(ValueError, match=r"num_sampled \(S=50\) must be an integer in \[1, n=40\]"):
        th.sampling_factor(40, 50)
    for n, S in [(40, 0), (1, 1), (4, 2.0), (4, True)]:
        with pytest.raises(ValueError):
            th.sampling_factor(n, S)


# ---------------------------------------------------------------------- eq. (3): BGD


def _brute_force_bgd(lhs, gns, psi_max):
    """min over psi^2 of psi^2 + max(0, max_k lhs_k - psi^2 gns_k), by nested grid scans (no LP)."""

    def total(p):
        return p + max(0.0, float(np.max(lhs - p * gns)))

    lo, hi = 0.0, psi_max
    for _ in range(4):
        ps = np.linspace(lo, hi, 401)
        vals = [total(p) for p in ps]
        j = int(np.argmin(vals))
        step = ps[1] - ps[0]
        lo, hi = max(0.0, ps[j] - step), ps[j] + step
    return min(vals)


def test_bgd_closed_form_equal_curvatures():
    # f_i = (x - c_i)^2 / 2: grad f_i - grad f = mean(c) - c_i, constant: zeta^2 = var(c).
    c = np.array([0.0, 1.0, 3.0, 8.0])
    res = th.bgd_sum(_quadratic_problem(np.ones(4), c), (-20.0, 20.0), 4001)
    assert res.zeta_sq == pytest.approx(np.var(c), rel=1e-12)
    assert res.psi_sq == pytest.approx(0.0, abs=1e-12)
    assert res.total == pytest.approx(np.var(c), rel=1e-12)


def test_bgd_huber_two_groups():
    # offsets 0, 0, 4, 4: at x = 2 the gradients are -1, -1, 1, 1 and grad f = 0.
    res = th.bgd_sum(fa.problems.huber_offsets(offsets=[0.0, 0.0, 4.0, 4.0]), (-2.0, 6.0), 8001)
    assert res.total == pytest.approx(1.0, abs=1e-12)
    assert res.max_dissimilarity == pytest.approx(1.0, abs=1e-12)


def test_bgd_lp_against_brute_force_with_tradeoff():
    # f_1 = x^2/2, f_2 = (x - 1)^2: LHS = (2 - x)^2/4, ||grad f||^2 = (3x - 2)^2/4. The optimum
    # needs both zeta^2 > 0 (at x = 2/3) and psi^2 > 0 (for large |x|).
    p = _quadratic_problem([1.0, 2.0], [0.0, 1.0])
    dom = (-10.0, 10.0)
    res = th.bgd_sum(p, dom, 20_001)
    lhs, gns = th.gradient_dissimilarity(p, np.linspace(*dom, 20_001)[:, None])
    # feasibility at every grid point, to rounding
    assert np.all(lhs <= res.zeta_sq + res.psi_sq * gns + 1e-12)
    assert res.zeta_sq > 0.1 and res.psi_sq > 0.05
    # optimality: an independent scan over psi^2
    assert res.total == pytest.approx(_brute_force_bgd(lhs, gns, 5.0), abs=1e-6)
    assert res.total <= _brute_force_bgd(lhs, gns, 5.0) + 1e-9


def test_bgd_table2_range_and_domain_convention(huber20):
    d = np.asarray(huber20.params).ravel()
    res = th.bgd_sum(huber20, (d.min() - 2.0, d.max() + 2.0), 100_001)
    wide = th.bgd_sum(huber20, (d.min() - 20.0, d.max() + 20.0), 100_001)
    grid = np.linspace(d.min() - 2, d.max() + 2, 100_001)[:, None]
    lhs, gns = th.gradient_dissimilarity(huber20, grid)
    # ||grad f|| <= 1 for Huber clients, so the optimum equals the largest dissimilarity.
    assert gns.max() <= 1.0 + 1e-15
    assert res.total == pytest.approx(res.max_dissimilarity, abs=1e-12)
    assert res.total == pytest.approx(_brute_force_bgd(lhs, gns, 2.0), abs=1e-6)
    # the paper's Table II range is 0.956 - 0.998; this draw gives about 0.980
    assert 0.95 <= res.total <= 1.0
    # outside [min d - 1, max d + 1] the dissimilarity vanishes: the margin does not matter
    assert wide.total == pytest.approx(res.total, abs=5e-5)  # grid error O(step) at kinks


def test_bgd_rejects_bad_domain(huber20):
    with pytest.raises(ValueError, match="finite interval"):
        th.bgd_sum(huber20, (1.0, -1.0))
    with pytest.raises(ValueError, match="num_points"):
        th.bgd_sum(huber20, (0.0, 1.0), 1)


# ------------------------------------------------------------------- Lemma 1, eq. (12)


@pytest.mark.parametrize("name", NAMES)
def test_lemma1_holds(paper_problems, name):
    p, L = paper_problems[name]
    x0 = float(p.x_star[0])
    res = th.lemma1_slack(p, L, (x0 - 300.0, x0 + 300.0), 20_001)
    assert res.holds and res.min_slack >= -1e-10, res.min_slack
    assert np.all(res.rhs - res.lhs >= res.min_slack)


def test_lemma1_in_d_dimensions_with_points():
    rng = np.random.default_rng(3)
    a, c = rng.uniform(0.5, 2.0, (6, 5)), rng.normal(size=(6, 5))
    x_star = (a * c).sum(0) / a.sum(0)
    f_star = np.mean(0.5 * np.sum(a * (x_star - c) ** 2, axis=1))
    loss = lambda prm, x: 0.5 * jnp.sum(prm[0] * (x - prm[1]) ** 2)  # noqa: E731
    p = fa.make_problem(loss, (jnp.asarray(a), jnp.asarray(c)), fa.ExactOracle(), dim=5,
                        local_minima=np.zeros(6), f_star=f_star, x_star=x_star)
    pts = x_star + 3.0 * rng.normal(size=(500, 5))
    L = float(a.max())
    assert th.lemma1_slack(p, L, pts).holds
    # a too small L breaks (12): the check is not vacuous
    assert not th.lemma1_slack(p, 0.05, pts).holds


def test_lemma1_fails_with_too_small_L(paper_problems):
    p = paper_problems["softplus_huber"][0]
    assert not th.lemma1_slack(p, 0.01, (-30.0, 30.0), 20_001).holds


@pytest.mark.parametrize("name", ["huber20", "huber200", "softplus_huber"])
def test_assumption1_on_the_paper_problems(paper_problems, name):
    """Assumption 1 on the problems of Section IV, with the functions the report's constants
    come from: each f_i is L-smooth with L = 1 (power iteration on a grid over every client's
    kink: max |f_i''| = 1, attained inside the Huber zones and bounded by 1/4 for softplus)
    and lower bounded, the stored f_i* = inf f_i (a grid does not go below them)."""
    p, L = paper_problems[name]
    kinks = np.concatenate([np.asarray(p.params).ravel(), np.asarray(p.x_star).ravel()]) \
        if name != "softplus_huber" else np.array([-2.0, float(p.num_clients) + 2.0])
    grid = np.linspace(kinks.min() - 2.0, kinks.max() + 2.0, 2001)[:, None]
    est = th.smoothness_estimate(p, grid)
    assert est.L <= L + 1e-9 and est.L == pytest.approx(L, abs=1e-6)
    x0 = float(p.x_star[0])
    assert th.infima_check(p, (x0 - 300.0, x0 + 300.0), 20_001).consistent
