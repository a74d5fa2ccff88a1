"""The NumPy references of robust aggregation and attacks (tests/reference_robust.py) against
ByzFL where it is installed, their absent-slot handling and identities, and the closed forms
of tests/robust_closed_forms.py against sampling."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.stats import norm

import byzfl_peer
import reference_robust as R
import robust_closed_forms as C

TOL = dict(rtol=1e-12, atol=1e-12)


@pytest.fixture(scope="module")
def byzfl():
    mods, reason = byzfl_peer.load_byzfl()
    if mods is None:
        pytest.skip(reason)
    return mods


@pytest.fixture
def global_rng():
    """ByzFL draws from NumPy's global generator: keep the caller's state."""
    state = np.random.get_state()
    yield
    np.random.set_state(state)


def _cases():
    """(name, x, f): m = 7, d = 5, f = 2; m = 2f + 3 (f = 3, m = 9); ties (duplicated rows)."""
    rng = np.random.default_rng(73)
    out = [("m7_f2", rng.normal(size=(7, 5)), 2), ("m2f+3", rng.normal(size=(9, 5)) * 3.0, 3)]
    x = rng.normal(size=(7, 5))
    x[[2, 5]] = x[0]  # three equal rows
    x[6] = x[3]
    out.append(("ties", x, 2))
    y = rng.normal(size=(8, 4))
    y[4:] = y[0]  # half the rows equal: ties in every rule's selection
    out.append(("ties_even", y, 3))
    return out


CASES = _cases()
IDS = [c[0] for c in CASES]


# ------------------------------------------------------------------ (a) against ByzFL itself


@pytest.mark.parametrize("name,x,f", CASES, ids=IDS)
def test_aggregators_equal_byzfl(byzfl, name, x, f):
    A = byzfl.aggregators
    np.testing.assert_allclose(R.average(x), A.Average()(x.copy()), **TOL)
    np.testing.assert_allclose(R.coordinate_median(x), A.Median()(x.copy()), **TOL)
    np.testing.assert_allclose(R.trimmed_mean(x, f=f), A.TrMean(f)(x.copy()), **TOL)
    np.testing.assert_allclose(R.krum(x, f=f), A.Krum(f)(x.copy()), **TOL)
    np.testing.assert_allclose(R.multi_krum(x, f=f), A.MultiKrum(f)(x.copy()), **TOL)
    np.testing.assert_allclose(R.mda(x, f=f), A.MDA(f)(x.copy()), **TOL)
    for nu, T in [(0.1, 3), (1e-3, 10), (0.5, 0)]:
        np.testing.assert_allclose(R.geometric_median(x, nu=nu, T=T),
                                   A.GeometricMedian(nu, T)(x.copy()), **TOL)
    for tau, L in [(100.0, 1), (0.5, 3), (2.0, 5)]:
        np.testing.assert_allclose(R.centered_clipping(x, tau=tau, L=L),
                                   A.CenteredClipping(L=L, tau=tau)(x.copy()), **TOL)
    center = np.linspace(-1.0, 1.0, x.shape[1])
    cc = A.CenteredClipping(L=2, tau=0.7)
    cc.m = center.copy()  # ByzFL's constructor rejects any m; its state takes one
    np.testing.assert_allclose(R.centered_clipping(x, tau=0.7, L=2, center=center), cc(x.copy()), **TOL)


@pytest.mark.parametrize("name,x,f", CASES, ids=IDS)
def test_preaggregators_and_compositions_equal_byzfl(byzfl, global_rng, name, x, f):
    A, P = byzfl.aggregators, byzfl.preaggregators
    np.testing.assert_allclose(R.nnm(x, f=f), P.NNM(f)(x.copy()), **TOL)
    np.testing.assert_allclose(R.clipping(x, c=1.5), P.Clipping(1.5)(x.copy()), **TOL)
    for s in (1, 2, 3, len(x)):
        np.random.seed(1000 + s)
        perm = np.random.permutation(len(x))
        np.random.seed(1000 + s)
        np.testing.assert_allclose(R.bucketing(x, s=s, perm=perm), P.Bucketing(s)(x.copy()), **TOL)
    # compositions: aggregator after pre-aggregators
    pairs = [
        (R.compose(lambda v: R.trimmed_mean(v, f=f), [lambda v: R.nnm(v, f=f)]),
         lambda v: A.TrMean(f)(P.NNM(f)(v))),
        (R.compose(lambda v: R.krum(v, f=f), [lambda v: R.clipping(v, c=1.0), lambda v: R.nnm(v, f=f)]),
         lambda v: A.Krum(f)(P.NNM(f)(P.Clipping(1.0)(v)))),
        (R.compose(R.coordinate_median, [lambda v: R.nnm(v, f=f)]), lambda v: A.Median()(P.NNM(f)(v))),
        (R.compose(lambda v: R.geometric_median(v), [lambda v: R.nnm(v, f=f)]),
         lambda v: A.GeometricMedian()(P.NNM(f)(v))),
    ]
    for ours, theirs in pairs:
        np.testing.assert_allclose(ours(x), theirs(x.copy()), **TOL)


@pytest.mark.parametrize("name,x,f", CASES, ids=IDS)
def test_attacks_equal_byzfl(byzfl, global_rng, name, x, f):
    K = byzfl.attacks
    h = x[: len(x) - f]
    np.testing.assert_allclose(R.sign_flip(h), K.SignFlipping()(h.copy()), **TOL)
    np.testing.assert_allclose(R.ipm(h, tau=1.7), K.InnerProductManipulation(1.7)(h.copy()), **TOL)
    np.testing.assert_allclose(R.alie(h, tau=1.2), K.ALittleIsEnough(1.2)(h.copy()), **TOL)
    np.testing.assert_allclose(R.mimic(h, epsilon=1), K.Mimic(1)(h.copy()), **TOL)
    np.testing.assert_array_equal(R.inf_attack(h), K.Inf()(h.copy()))
    np.random.seed(7)
    z = np.random.standard_normal(h.shape[1])
    np.random.seed(7)
    np.testing.assert_allclose(R.gaussian(h, mu=0.3, sigma=2.0, z=z), K.Gaussian(0.3, 2.0)(h.copy()), **TOL)


@pytest.mark.parametrize("name,x,f", CASES, ids=IDS)
def test_optimal_attacks_equal_byzfl(byzfl, name, x, f):
    A, P, K = byzfl.aggregators, byzfl.preaggregators, byzfl.attacks
    h = x[: len(x) - f]
    setups = [
        # (our aggregator, our pre-aggregators, ByzFL's aggregator, ByzFL's pre-aggregators)
        (R.average, [lambda v: R.clipping(v, c=2.0)], A.Average(), [P.Clipping()]),  # ByzFL's defaults
        (lambda v: R.trimmed_mean(v, f=f), [lambda v: R.nnm(v, f=f)], A.TrMean(f), [P.NNM(f)]),
        (lambda v: R.krum(v, f=f), [], A.Krum(f), []),
        (R.coordinate_median, [], A.Median(), []),
        (lambda v: R.geometric_median(v), [lambda v: R.nnm(v, f=f)], A.GeometricMedian(), [P.NNM(f)]),
    ]
    for agg, pre, byz_agg, byz_pre in setups:
        for kw in (dict(), dict(evals=7, start=0.5, delta=-3.0, ratio=0.6)):
            ours = R.optimal_ipm(h, f=f, aggregator=agg, pre_aggregators=pre, **kw)
            theirs = K.Optimal_InnerProductManipulation(agg=byz_agg, pre_agg_list=byz_pre, f=f, **kw)(h.copy())
            np.testing.assert_allclose(ours, theirs, **TOL)
            ours = R.optimal_alie(h, f=f, aggregator=agg, pre_aggregators=pre, **kw)
            theirs = K.Optimal_ALittleIsEnough(agg=byz_agg, pre_agg_list=byz_pre, f=f, **kw)(h.copy())
            np.testing.assert_allclose(ours, theirs, **TOL)
    # the defaults are ByzFL's defaults
    np.testing.assert_allclose(R.optimal_ipm(h, f=1), K.Optimal_InnerProductManipulation()(h.copy()), **TOL)
    np.testing.assert_allclose(R.optimal_alie(h, f=1), K.Optimal_ALittleIsEnough()(h.copy()), **TOL)


def test_loader_does_not_run_the_package_init(byzfl):
    # in a fresh interpreter: the robustness benchmark's loader, which a test of this
    # session's worker may have run, imports ByzFL's fed_framework on purpose
    import os
    import subprocess
    import sys

    probe = ("import sys, byzfl_peer; m, _ = byzfl_peer.load_byzfl(); "
             "print('byzfl.benchmark' in sys.modules, 'byzfl.fed_framework' in sys.modules, "
             "hasattr(m.aggregators, 'Krum'), hasattr(m.attacks, 'Optimal_ALittleIsEnough'))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=300, check=True, cwd=os.path.dirname(os.path.abspath(__file__)))
    assert out.stdout.split() == ["False", "False", "True", "True"]


# ------------------------------------------------------------------ (b) absent slots


RULES = {
    "average": R.average,
    "median": R.coordinate_median,
    "trimmed_mean": lambda x, w=None: R.trimmed_mean(x, w, f=2),
    "krum": lambda x, w=None: R.krum(x, w, f=2),
    "multi_krum": lambda x, w=None: R.multi_krum(x, w, f=2),
    "geometric_median": lambda x, w=None: R.geometric_median(x, w, nu=0.01, T=8),
    "centered_clipping": lambda x, w=None: R.centered_clipping(x, w, tau=0.8, L=3),
    "mda": lambda x, w=None: R.mda(x, w, f=2),
    "nnm": lambda x, w=None: R.nnm(x, w, f=2),
    "clipping": lambda x, w=None: R.clipping(x, w, c=1.0),
    "bucketing": lambda x, w=None: R.bucketing(x, w, s=2),
    "sign_flip": R.sign_flip,
    "ipm": lambda x, w=None: R.ipm(x, w, tau=0.5),
    "alie": lambda x, w=None: R.alie(x, w, tau=1.5),
    "mimic": lambda x, w=None: R.mimic(x, w, epsilon=3),
    "optimal_ipm": lambda x, w=None: R.optimal_ipm(x, f=2, aggregator=lambda v: R.trimmed_mean(v, f=2), w=w),
    "optimal_alie": lambda x, w=None: R.optimal_alie(x, f=2, aggregator=R.coordinate_median, w=w),
}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_absent_slots_are_dropped(rule):
    rng = np.random.default_rng(5)
    k, extra, d = 7, 4, 5
    v = rng.normal(size=(k, d))
    m = k + extra
    slots = np.sort(rng.choice(m, size=k, replace=False))
    x = np.full((m, d), np.nan)
    x[np.setdiff1d(np.arange(m), slots)] = rng.normal(size=(extra, d)) * 1e6  # garbage, absent
    x[slots] = v
    w = np.zeros(m)
    w[slots] = rng.uniform(0.5, 2.0, size=k)  # any non-zero weight means present
    np.testing.assert_array_equal(RULES[rule](x, w), RULES[rule](v))


def test_bucketing_permutation_of_slots_or_of_present_rows():
    rng = np.random.default_rng(6)
    x = rng.normal(size=(9, 3))
    w = np.array([1, 0, 1, 1, 0, 1, 1, 1, 1.0])
    perm_slots = rng.permutation(9)
    present_idx = np.flatnonzero(w)
    order = [i for i in perm_slots if w[i]]  # slots in permuted order, absent skipped
    perm_present = np.array([np.flatnonzero(present_idx == i)[0] for i in order])
    a = R.bucketing(x, w, s=3, perm=perm_slots)
    b = R.bucketing(x[present_idx], None, s=3, perm=perm_present)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (3, 3)
    c = R.bucketing(x[present_idx], None, s=4, perm=perm_present)
    np.testing.assert_allclose(c[-1], x[present_idx][perm_present[4:]].mean(0), **TOL)  # partial bucket


# ------------------------------------------------------------------ (c) identities


def test_identical_messages_give_the_mean():
    x = np.tile(np.array([1.5, -2.0, 0.25, 3.0]), (9, 1))
    mean = x[0]
    for name, rule in RULES.items():
        if name in {"sign_flip", "ipm", "alie", "mimic", "optimal_ipm", "optimal_alie", "clipping",
                    "centered_clipping"}:
            continue
        out = np.atleast_2d(rule(x))
        np.testing.assert_allclose(out, np.broadcast_to(mean, out.shape), rtol=1e-14, atol=1e-14, err_msg=name)
    # centered clipping reaches the common message when tau covers its distance to the centre
    np.testing.assert_allclose(R.centered_clipping(x, tau=100.0, L=1), mean, rtol=1e-14, atol=1e-14)


def test_f_zero_gives_the_mean():
    rng = np.random.default_rng(8)
    x = rng.normal(size=(8, 6))
    mean = x.mean(0)
    for out in (R.trimmed_mean(x, f=0), R.multi_krum(x, f=0), R.mda(x, f=0),
                R.average(R.nnm(x, f=0)), R.coordinate_median(R.nnm(x, f=0)),
                R.centered_clipping(x, tau=np.inf, L=1, center=rng.normal(size=6))):
        np.testing.assert_allclose(out, mean, rtol=1e-13, atol=1e-13)


def test_permutation_invariance():
    rng = np.random.default_rng(9)
    x = rng.normal(size=(9, 4))
    p = rng.permutation(9)
    for name in ["average", "median", "trimmed_mean", "krum", "multi_krum", "geometric_median",
                 "centered_clipping", "mda"]:
        np.testing.assert_allclose(RULES[name](x[p]), RULES[name](x), rtol=1e-12, atol=1e-12, err_msg=name)
    np.testing.assert_allclose(R.nnm(x[p], f=2), R.nnm(x, f=2)[p], **TOL)  # equivariant


def test_ipm_against_the_mean_is_the_closed_form():
    rng = np.random.default_rng(10)
    n, f, tau = 10, 3, 2.5
    h = rng.normal(size=(n - f, 4)) + 1.0
    agg = R.average(R.with_byzantine(h, R.ipm(h, tau=tau), f))
    np.testing.assert_allclose(agg, C.ipm_mean_factor(n, f, tau) * h.mean(0), **TOL)


def test_alie_z_max():
    for n, f in [(50, 24), (20, 4), (7, 2), (10, 0)]:
        s = math.floor(n / 2 + 1) - f
        assert R.alie_z_max(n, f) == pytest.approx(norm.ppf((n - s) / n), abs=1e-15)
        z = R.alie_z_max(n, f)
        assert norm.cdf(z) == pytest.approx((n - s) / n, abs=1e-12)
    assert R.alie_z_max(50, 24) == pytest.approx(1.7506860712521692, abs=1e-12)  # s = 2, Phi^-1(0.96)


def test_bad_inputs_raise():
    x = np.zeros((6, 2))
    for call in (lambda: R.trimmed_mean(x, f=3), lambda: R.krum(x, f=3), lambda: R.mda(x, f=3),
                 lambda: R.nnm(x, f=6), lambda: R.bucketing(x, s=0), lambda: R.present(x, np.ones(5)),
                 lambda: R.optimal_ipm(x, ratio=0.4), lambda: R.mimic(x, epsilon=6)):
        with pytest.raises(ValueError):
            call()


# ------------------------------------------------------------------ closed forms vs sampling


def _z(sample_mean, expected, var, n):
    return (sample_mean - expected) / math.sqrt(var / n)


@pytest.mark.parametrize("n,f", [(7, 2), (10, 3), (11, 5), (12, 0)])
def test_median_and_trimmed_mean_under_inf_attack(n, f):
    rng = np.random.default_rng(100 + n + f)
    N, mu, sigma = 40_000, 0.5, 2.0
    honest = mu + sigma * rng.normal(size=(N, n - f))
    x = np.concatenate([honest, np.full((N, f), np.inf)], axis=1)
    med = np.median(x, axis=1)
    e, v = C.median_inf_moments(n, f, mu, sigma)
    assert abs(_z(med.mean(), e, v, N)) < 4.5
    assert med.var() == pytest.approx(v, rel=0.05)
    tm = np.sort(x, axis=1)[:, f : n - f].mean(axis=1)
    e2, v2 = C.trimmed_mean_inf_moments(n, f, mu, sigma)
    assert abs(_z(tm.mean(), e2, v2, N)) < 4.5
    assert tm.var() == pytest.approx(v2, rel=0.05)
    # the reference rules themselves on a few rows give the same numbers
    for row in x[:3]:
        col = row[:, None]
        assert R.coordinate_median(col)[0] == np.median(row)
        assert R.trimmed_mean(col, f=f)[0] == pytest.approx(np.sort(row)[f : n - f].mean(), rel=1e-14)


def test_order_statistic_identities():
    # sum over s of E[Z_(r) Z_(s)] = 1 (Cov(Z_(r), sum Z_i) = 1 for standard normals)
    h, r = 6, 2
    tot = C.normal_order_stat_moment(r, h, 2) + sum(
        C.normal_order_stat_cross_moment(min(r, s), max(r, s), h) for s in range(1, h + 1) if s != r)
    assert tot == pytest.approx(1.0, abs=1e-10)
    # the median of n = 10 with f = 4 is the trimmed mean with trim 4: two formulas, one value
    a, b = C.median_inf_moments(10, 4), C.trimmed_mean_inf_moments(10, 4)
    assert a[0] == pytest.approx(b[0], abs=1e-12) and a[1] == pytest.approx(b[1], abs=1e-12)
    # the large-n approximation approaches the exact bias
    exact = C.median_inf_moments(201, 40)[0]
    assert exact == pytest.approx(C.median_inf_bias_large_n(201, 40), abs=0.01)
    assert list(C.trimmed_mean_inf_surviving_ranks(10, 2)) == list(range(3, 9))
    assert list(C.trimmed_mean_inf_surviving_ranks(10, 2, trim=3)) == list(range(4, 8))
    assert C.median_inf_order_statistics(7, 2) == (4,) and C.median_inf_order_statistics(10, 3) == (5, 6)


def test_krum_variance_ratio_within_bounds():
    rng = np.random.default_rng(11)
    n, d, f, trials = 10, 50, 2, 400
    x = rng.normal(size=(trials, n, d))
    krum_err = np.array([np.sum(R.krum(xi, f=f) ** 2) for xi in x])
    mean_err = np.sum(x.mean(axis=1) ** 2, axis=1)
    assert mean_err.mean() == pytest.approx(C.mean_mse(n, d), rel=4 * math.sqrt(2 / (d * trials)))
    lo, hi = C.krum_mse_bounds(n, d)
    se = krum_err.std() / math.sqrt(trials)
    assert lo - 4 * se < krum_err.mean() < hi + 4 * se
    assert krum_err.mean() < d  # selection favours central messages
    rlo, rhi = C.krum_mean_ratio_bounds(n, d)
    assert rlo < n < rhi


def test_kappa_bounds_hold_on_adversarial_draws():
    rng = np.random.default_rng(12)
    n, f, d = 7, 2, 2
    rules = {
        "trimmed_mean": lambda v: R.trimmed_mean(v, f=f),
        "krum": lambda v: R.krum(v, f=f),
        "coordinate_median": R.coordinate_median,
        "geometric_median": lambda v: R.geometric_median(v, nu=1e-9, T=300),
    }
    worst = dict.fromkeys([*rules, "mda"], 0.0)
    for t in range(40):
        h = rng.normal(size=(n - f, d)) * rng.exponential(size=(n - f, 1))
        byz = np.tile(h.mean(0) + rng.normal(size=d) * rng.choice([0.5, 2.0, 8.0]), (f, 1))
        x = np.concatenate([h, byz])
        for name, rule in [*rules.items(), ("mda", lambda v: R.mda(v, f=f))]:
            out = rule(x)
            for S in itertools.combinations(range(n), n - f):
                xs = x[list(S)]
                mu = xs.mean(0)
                var = np.mean(np.sum((xs - mu) ** 2, axis=1))
                worst[name] = max(worst[name], np.sum((out - mu) ** 2) / var)
    for name in rules:
        assert worst[name] <= C.kappa(name, n, f), name
    assert worst["mda"] <= C.kappa_mda_derived(n, f)
    assert C.kappa("mda", n, f) is None and C.kappa("krum", n, f, nnm=True) is None
    assert C.kappa_lower_bound(n, f) == pytest.approx(2 / 3)


def test_breakdown_from_heterogeneity():
    for n in (10, 17, 40):
        for B in (0.0, 0.5, 1.0, 2.0):
            f_star = C.breakdown_f(C.kappa_lower_bound, n, B)
            frac = C.breakdown_fraction(B)
            first = next((f for f in range((n + 1) // 2) if f / n >= frac - 1e-12), None)
            assert f_star == first, (n, B)
    # with the optimal kappa the floor's shape is the lower bound's shape
    n, f, G, B = 20, 4, 1.3, 0.8
    assert C.error_floor_shape(C.kappa_lower_bound(n, f), G, B) == pytest.approx(
        C.error_lower_bound_shape(n, f, G, B), rel=1e-14)
    assert C.error_floor_shape(2.0, 1.0, 1.0) == math.inf
