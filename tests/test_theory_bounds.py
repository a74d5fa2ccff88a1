"""Theorem 2 (eq. 20-24), Remark 3 and Theorem 3's schedules, re-derived from Appendix G.

The Appendix G derivation applies Lemma 9 to s_t = E[f(x_t) - f*], q_t = E||grad f(x_t)||^2
with b = alpha Q / 4 and a, c as written there; the tests rebuild a, b, c independently and
check (20) -> (1 + a)^T <= 3, (21) = 3 s_0/(bT) + c/b, (22) satisfies (20), and (21) at (22)
is within Appendix G's (46)-(47) and a numerical constant of (24).
"""

import math

import numpy as np
import pytest

import fedjax_abc as fa
from fedjax_abc import theory as th
from fedjax_abc._theory._bounds import bound_terms, explicit_rate, validated_params
from fedjax_abc._theory._theorem3 import EXACT_RESOLUTION


def _random_params(rng, full=False):
    n = int(rng.integers(2, 200))
    S = n if full else int(rng.integers(1, n + 1))
    return dict(L=10 ** rng.uniform(-2, 2), C=10 ** rng.uniform(-3, 2) * rng.integers(0, 2),
                D=10 ** rng.uniform(-3, 2) * rng.integers(0, 2),
                sigma_f_star=10 ** rng.uniform(-3, 2) * rng.integers(0, 2),
                delta_f=10 ** rng.uniform(-3, 3), n=n, S=S, Q=int(rng.integers(1, 300)),
                T=int(10 ** rng.uniform(0, 6)))


def _appendix_g_abc(alpha, L, C, D, sigma_f_star, n, S, Q, T, **_):
    I = (n - S) / (n - 1)
    s = sigma_f_star
    a = 2 * alpha**2 * Q * C * L / S + 4 * alpha**2 * Q**2 * L**2 * I / S \
        + 12 * alpha**3 * Q**3 * L**2 * (L + C)
    b = alpha * Q / 4
    c = alpha**2 * L * Q * D * (1 + 2 * alpha * Q * L * S) / S \
        + 2 * alpha**2 * Q**2 * L * s / S * (2 * L * I + C / Q) \
        + 12 * alpha**3 * Q**3 * L**2 * (L + C) * s
    return a, b, c


def _args(p):
    return (p["L"], p["C"], p["D"], p["sigma_f_star"], p["delta_f"], p["n"], p["S"], p["Q"], p["T"])


def test_stepsize22_satisfies_constraint20():
    rng = np.random.default_rng(0)
    for _ in range(500):
        p = _random_params(rng)
        alpha = th.theorem2_stepsize(*_args(p))
        limit = th.theorem2_stepsize_limit(p["L"], p["C"], p["n"], p["S"], p["Q"], p["T"])
        assert 0 < alpha <= limit, p


def test_constraint20_gives_growth_factor_at_most_3():
    rng = np.random.default_rng(1)
    for _ in range(500):
        p = _random_params(rng)
        limit = th.theorem2_stepsize_limit(p["L"], p["C"], p["n"], p["S"], p["Q"], p["T"])
        a, _, _ = _appendix_g_abc(limit, **p)
        assert a * p["T"] <= 1.0 + 1e-12, p
        assert (1 + a) ** p["T"] <= math.e * (1 + 1e-12) < 3


def test_bound21_is_lemma9_with_appendix_g_constants():
    rng = np.random.default_rng(2)
    for _ in range(500):
        p = _random_params(rng)
        limit = th.theorem2_stepsize_limit(p["L"], p["C"], p["n"], p["S"], p["Q"], p["T"])
        alpha = limit * rng.uniform(0.01, 1.0)
        _, b, c = _appendix_g_abc(alpha, **p)
        lemma9 = 3 * p["delta_f"] / (b * p["T"]) + c / b
        assert th.theorem2_bound(alpha, *_args(p)) == pytest.approx(lemma9, rel=1e-12), p


def test_bound_at_stepsize22_within_46_47_and_24():
    rng = np.random.default_rng(3)
    for _ in range(500):
        p = _random_params(rng)
        alpha = th.theorem2_stepsize(*_args(p))
        bound = th.theorem2_bound(alpha, *_args(p))
        explicit = explicit_rate(validated_params(*_args(p)))
        lead = th.theorem2_leading_terms(*_args(p))
        assert bound <= explicit * (1 + 1e-12), p
        # Appendix G's constants: at most 96 times the O-terms of (24)
        assert explicit <= 96.1 * lead.total, (p, explicit / lead.total)
        assert lead.total == pytest.approx(lead.noise + lead.sampling + lead.drift
                                           + lead.stability + lead.stability_cubic)


def test_full_participation_has_no_sampling_terms():
    rng = np.random.default_rng(4)
    for _ in range(50):
        p = _random_params(rng, full=True)
        lead = th.theorem2_leading_terms(*_args(p))
        assert lead.sampling == 0.0
        alpha = th.theorem2_stepsize(*_args(p))
        # I_S = 0: (21) has no 16 alpha Q L^2 I_S sigma / S term
        assert bound_terms(alpha, validated_params(*_args(p)))["sampling"] == 0.0


def test_bound_rejects_stepsize_beyond_limit():
    args = (1.0, 1.0, 0.0, 4.5, 5.0, 40, 4, 10, 1000)
    limit = th.theorem2_stepsize_limit(1.0, 1.0, 40, 4, 10, 1000)
    with pytest.raises(ValueError, match="exceeds the limit"):
        th.theorem2_bound(2 * limit, *args)
    assert th.theorem2_bound(2 * limit, *args, check_stepsize=False) > 0
    with pytest.raises(ValueError, match=r"num_sampled \(S=50\)"):
        th.theorem2_stepsize(1.0, 1.0, 0.0, 1.0, 1.0, 40, 50, 10, 1000)
    with pytest.raises(ValueError, match="delta_f"):
        th.theorem2_stepsize(1.0, 1.0, 0.0, 1.0, 0.0, 40, 4, 10, 1000)


def test_stepsize_limit_closed_form():
    # L = C = 1, n = 40, S = 4, Q = 10, T = 50000: I_S = 36/39
    I = 36 / 39
    expect = min(1 / 160, math.sqrt(4 / (4 * 50_000 * 100 * (2 * I + 0.1))),
                 (1 / (24 * 1000 * 2 * 50_000)) ** (1 / 3))
    limit = th.theorem2_stepsize_limit(1.0, 1.0, 40, 4, 10, 50_000)
    assert limit == pytest.approx(expect, rel=1e-14)


# --------------------------------------------------------------------------- Remark 3


def test_remark3_nu_matches_term_dominance():
    rng = np.random.default_rng(5)
    for _ in range(200):
        p = _random_params(rng)
        p["C"], p["D"] = p["C"] + 0.1, p["D"] + 0.01  # nu > 0
        nu = th.remark3_nu(p["L"], p["C"], p["D"], p["sigma_f_star"], p["delta_f"])
        regime = th.remark3_sampling_dominates(nu, p["n"], p["Q"])
        if abs(nu - p["Q"]) > 1e-9 * p["Q"]:
            assert regime.empty == (nu > p["Q"])
        for S in {1, 2, p["n"] // 2, p["n"] - 1, p["n"]} - {0}:
            lead = th.theorem2_leading_terms(*_args(dict(p, S=S)))
            margin = abs(lead.sampling - lead.noise) / max(lead.noise, 1e-300)
            if margin > 1e-9:  # skip numerical ties
                assert (lead.sampling >= lead.noise) == (S in regime.s_values), (p, S, nu)


def test_remark3_closed_forms():
    assert th.remark3_nu(1.0, 1.0, 0.0, 4.0, 1.0) == pytest.approx(5 / 9)
    r = th.remark3_sampling_dominates(2.0, 40, 10)
    assert r.s_upper == pytest.approx(40 - 2 * 39 / 10) and r.s_values == tuple(range(1, 33))
    assert th.remark3_sampling_dominates(11.0, 40, 10).empty  # nu > Q
    assert th.remark3_sampling_dominates(0.0, 40, 10).s_values[-1] == 40


# --------------------------------------------------------------------------- Theorem 3


def test_diminishing_stepsize_schedule():
    sched = th.diminishing_stepsize(0.02, 0.75)
    alphas = fa.stepsize_array(sched, 100)  # the form fa.simulate evaluates
    np.testing.assert_allclose(alphas, 0.02 / np.arange(1, 101) ** 0.75, rtol=1e-14)
    for p in (0.5, 1.01, -1.0):
        with pytest.raises(ValueError, match="p"):
            th.diminishing_stepsize(0.01, p)
    with pytest.raises(ValueError, match="alpha0"):
        th.diminishing_stepsize(0.0, 1.0)


def test_check_theorem3_schedule():
    limit = th.theorem3_stepsize_limit(1.0, 1.0, 10)
    assert limit == 1 / 160
    ok = th.check_theorem3_schedule(th.diminishing_stepsize(limit, 0.6), 1.0, 1.0, 10, 10_000)
    assert ok.holds and ok.first_violation == -1 and ok.tail_exponent_ok
    assert ok.tail_exponent == pytest.approx(0.6, abs=1e-9)
    assert ok.max_stepsize == pytest.approx(limit)
    bad = th.check_theorem3_schedule(th.diminishing_stepsize(4 * limit, 1.0), 1.0, 1.0, 10, 100)
    assert not bad.holds and bad.first_violation == 0
    const = th.check_theorem3_schedule(limit / 2, 1.0, 1.0, 10, 100)  # constant: not summable
    assert const.holds and not const.tail_exponent_ok


def test_check_theorem3_schedule_log_factors():
    """alpha_0 / ((t+1) log(t+3)) satisfies Theorem 3 (sum diverges, squares converge):
    accepted, though a power-law fit gives an exponent above 1; 1/(t log^2 t), t^-1.2 and
    t^-1/2 are not."""
    import jax.numpy as jnp

    limit = th.theorem3_stepsize_limit(1.0, 1.0, 10)

    def with_log(k, p=1.0):
        return lambda t: limit / ((jnp.asarray(t, float) + 1) ** p * jnp.log(jnp.asarray(t, float) + 3) ** k)

    for horizon in (100, 10_000):
        ok = th.check_theorem3_schedule(with_log(1.0), 1.0, 1.0, 10, horizon)
        assert ok.holds and ok.tail_exponent > 1.05  # what the old power-law test rejected
        assert ok.sum_diverges and ok.sum_sq_converges and ok.tail_exponent_ok
        slow = th.check_theorem3_schedule(with_log(1.0, 0.5), 1.0, 1.0, 10, horizon)
        assert slow.tail_exponent_ok  # 1/(sqrt(t) log t): squares sum like 1/(t log^2 t)
        for k, p in ((2.0, 1.0), (0.0, 1.2), (0.0, 0.5)):
            c = th.check_theorem3_schedule(with_log(k, p), 1.0, 1.0, 10, horizon)
            assert not c.tail_exponent_ok, (k, p, horizon)
        assert not th.check_theorem3_schedule(with_log(2.0), 1.0, 1.0, 10, horizon).sum_diverges
        assert not th.check_theorem3_schedule(with_log(0.0, 0.5), 1.0, 1.0, 10, horizon).sum_sq_converges


def test_check_theorem3_schedule_shifted_schedules():
    """Valid schedules whose shift bends a fit over a short horizon: alpha_0 c / (t + c)
    (c = 1000) and alpha_0 / ((t + c) log(t + c)) (c = 10, 100) satisfy Theorem 3; the
    same shapes with an exponent that breaks a condition, and constants, do not. A finite
    array is classified from its own second half (the shift then still bends it)."""
    import jax.numpy as jnp

    a0 = th.theorem3_stepsize_limit(1.0, 1.0, 10)

    def shifted(c, p=1.0, k=0.0):
        def schedule(t):
            u = jnp.asarray(t, float) + c
            return a0 * c ** p / (u ** p * jnp.log(u) ** k)
        return schedule

    valid = [shifted(1000.0), shifted(10.0, k=1.0), shifted(100.0, k=1.0), shifted(10.0, 0.7)]
    invalid = [shifted(1000.0, 1.3), shifted(100.0, k=2.0), shifted(1000.0, 0.5), a0 / 2,
               shifted(10.0, 2.0)]
    for horizon in (200, 1000, 20_000):
        for s in valid:
            c = th.check_theorem3_schedule(s, 1.0, 1.0, 10, horizon)
            assert c.tail_exponent_ok and c.tail_rounds == (1e280, 1e288), horizon
        for s in invalid:
            assert not th.check_theorem3_schedule(s, 1.0, 1.0, 10, horizon).tail_exponent_ok
    # as an array of 1000 values the schedule is judged on t in [500, 1000), where the shift
    # bends it: the limit of a finite array, which the callable avoids
    arr = np.asarray(shifted(1000.0)(np.arange(1000)))
    c = th.check_theorem3_schedule(arr, 1.0, 1.0, 10, 1000)
    assert c.tail_rounds == (500, 999) and not c.tail_exponent_ok
    # its exponent still moves across t in [500, 1000): undecidable, not a verdict
    assert not c.decided and c.sum_diverges is None and c.sum_sq_converges is None


@pytest.mark.parametrize("c", [1.0, 1e5, 1e12, 1e100, 1e250])
def test_check_theorem3_schedule_accepts_every_shift(c):
    """alpha_0 c / (t + c) satisfies Theorem 3 for every c >= 1; the tail is fitted where
    c / t is negligible. The same shift on t^-1.2 (squares and values summable) and on a
    constant stays rejected."""
    import jax.numpy as jnp

    a0 = th.theorem3_stepsize_limit(1.0, 1.0, 10)
    ok = th.check_theorem3_schedule(lambda t: a0 * c / (jnp.asarray(t, float) + c), 1.0, 1.0, 10, 1000)
    assert ok.holds and ok.tail_exponent_ok and ok.tail_rounds[0] >= 1e20 * c
    fast = th.check_theorem3_schedule(
        lambda t: a0 * (c / (jnp.asarray(t, float) + c)) ** 1.2, 1.0, 1.0, 10, 1000)
    assert fast.sum_sq_converges and not fast.sum_diverges
    flat = th.check_theorem3_schedule(lambda t: a0 * c / (c + 0.0 * jnp.asarray(t, float)),
                                      1.0, 1.0, 10, 1000)
    assert not flat.tail_exponent_ok


@pytest.mark.parametrize("p, diverges, converges", [
    (1.0001, False, True), (0.9999, True, True), (0.5001, True, True), (0.4999, True, False),
    (1.0, True, True), (0.5, True, False), (1.2, False, True), (0.4, True, False)])
@pytest.mark.parametrize("shift", [1.0, 1e5])
def test_check_theorem3_schedule_exponents_near_one_and_one_half(p, diverges, converges, shift):
    """alpha_0 (c / (t + c))^p within 1e-4 of the edges p = 1 and p = 1/2: sum alpha_t is
    finite for p > 1 and sum alpha_t^2 infinite for p <= 1/2, each decided on the far tail
    whose resolution (about 1e-9) is far below 1e-4."""
    import jax.numpy as jnp

    a0 = th.theorem3_stepsize_limit(1.0, 1.0, 10)
    c = th.check_theorem3_schedule(
        lambda t: a0 * (shift / (jnp.asarray(t, float) + shift)) ** p, 1.0, 1.0, 10, 1000)
    assert c.decided and c.sum_diverges is diverges and c.sum_sq_converges is converges
    assert c.tail_exponent_ok == (diverges and converges)
    assert c.tail_p == pytest.approx(p, abs=1e-8) and c.resolution[0] <= 1e-6


def test_check_theorem3_schedule_says_where_it_cannot_decide():
    """Where the values cannot tell an exponent from the edge, the check says so (decided
    False, the sums None) rather than give a verdict: a float32 shift whose bend is still
    1e-3 on the first window, and a shift beyond float64's reach (c = 1e280); the same
    exponents far from an edge are still decided."""
    import jax.numpy as jnp

    a0 = th.theorem3_stepsize_limit(1.0, 1.0, 10)

    def f32(p, c=1e5):
        return lambda t: a0 * (c / (jnp.asarray(t, jnp.float32) + c)) ** p

    near = th.check_theorem3_schedule(f32(1.0), 1.0, 1.0, 10, 1000)
    assert near.tail_rounds == (1e8, 1e16) and near.sum_diverges is None
    assert not near.decided and not near.tail_exponent_ok
    assert near.resolution[0] > EXACT_RESOLUTION  # coarser than a reading as exactly 1
    far = th.check_theorem3_schedule(f32(0.7), 1.0, 1.0, 10, 1000)
    assert far.decided and far.tail_exponent_ok
    beyond = th.check_theorem3_schedule(
        lambda t: a0 * 1e280 / (jnp.asarray(t, float) + 1e280), 1.0, 1.0, 10, 1000)
    assert not beyond.decided and not beyond.tail_exponent_ok
    # float32 values of exact powers are resolved to about 1e-7: still decided
    for p, ok in ((1.0001, False), (0.9999, True), (0.5001, True), (0.4999, False)):
        c = th.check_theorem3_schedule(lambda t, p=p: a0 * (jnp.asarray(t, jnp.float32) + 1) ** -p,
                                       1.0, 1.0, 10, 1000)
        assert c.decided and c.tail_exponent_ok == ok, p
