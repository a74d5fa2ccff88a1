"""fa.theory.lemma_diagnostics: Lemmas 4-8 (inequalities 15-19) by Monte Carlo over one round.

- an exact case in closed form (quadratics, exact gradients, S = n): every quantity to 1e-12;
- the Monte Carlo estimates against an independent NumPy implementation of one round
  (Section II-A, eq. 5-6), written from the equations, within standard errors;
- every inequality holds on problem (27) at a stepsize inside its condition;
- one-line errors on bad input.
"""

import math

import jax
import numpy as np
import pytest

import fedjax_abc as fa
from fedjax_abc.repro import offsets as offs

Z = 4.0


def quad(n=5, d=3, seed=1, C=1.0, D=0.1):
    return fa.problems.quadratics(jax.random.key(seed), n=n, d=d, spread=2.0, C=C, D=D)


def test_exact_case_in_closed_form():
    """f_i = (1/2) sum_j a_ij (x_j - c_ij)^2, exact gradients: x~^l - c_i = r_i^l (x - c_i),
    r_i = 1 - alpha a_i, so sum_l grad f_i(x~^l) = (1 - r_i^Q)(x - c_i) / alpha."""
    p = quad()
    a, c = (np.asarray(v) for v in p.params)
    n, Q, alpha = 5, 4, 0.1
    x = np.asarray(p.x_star) + np.array([1.0, -2.0, 0.5])
    r = fa.theory.lemma_diagnostics(jax.random.key(0), p, x, stepsize=alpha, num_sampled=n,
                                    local_steps=Q, L=1.0, C=0.0, D=0.0, num_replicates=3,
                                    oracle=fa.ExactOracle())
    rho = 1 - alpha * a
    e = x - c  # (n, d)
    ls = np.arange(Q)[:, None, None]
    traj = rho[None] ** ls * e[None]  # x~^l - c, (Q, n, d)
    drift = np.sum((traj - e[None]) ** 2)
    gaps = np.sum(0.5 * a[None] * traj ** 2)
    acc = (1 - rho ** Q) * e / alpha  # sum_l grad f_i(x~^l)
    b = acc - acc.mean(axis=0)
    G = acc.mean(axis=0)
    x1 = x - alpha * G
    f1 = np.mean(0.5 * np.sum(a * (x1 - c) ** 2, axis=1)) - float(p.f_star)
    want = dict(drift=drift, gaps=gaps, psi=np.mean(np.sum(b ** 2, axis=1)), sampling_error=0.0,
                grad_bar_sq=np.sum((G / Q) ** 2), G_sq=np.sum(G ** 2), next_gap=f1)
    for name, v in want.items():
        est = r.quantities[name]
        np.testing.assert_allclose(est.mean, v, rtol=1e-12, atol=1e-14, err_msg=name)
        np.testing.assert_allclose(est.stderr, 0.0, atol=1e-12, err_msg=name)
    # (15) by hand: C = D = 0, I_S = 0 (S = n)
    gap0 = 0.5 * np.mean(np.sum(a * e ** 2, axis=1)) - float(p.f_star)
    g0 = np.mean(a * e, axis=0)
    rhs15 = gap0 - alpha * Q / 2 * np.sum(g0 ** 2) + alpha / (2 * n) * drift
    np.testing.assert_allclose(r.lemma4.rhs, rhs15, rtol=1e-12)
    np.testing.assert_allclose(r.lemma4.terms.sum(axis=1), r.lemma4.rhs, rtol=1e-12)
    np.testing.assert_allclose(r.lemma4.ratio, rhs15 / f1, rtol=1e-12)
    assert all(bool(ch.holds[0]) for ch in r.checks)


def numpy_round(rng, a, c, f_star, C, D, x, alpha, S, Q):
    """One round of Algorithm 1 with all n virtual trajectories, from the equations.

    g_i(y) = a_i (y - c_i) + z sqrt((C f_i(y) + D) / d), z ~ N(0, I_d) (f_i* = 0).
    """
    n, d = a.shape
    y = np.repeat(x[None], n, axis=0)
    drift = gaps = 0.0
    sum_g = np.zeros((n, d))
    sum_grad = np.zeros((n, d))
    for _ in range(Q):
        f = 0.5 * np.sum(a * (y - c) ** 2, axis=1)
        grad = a * (y - c)
        g = grad + rng.standard_normal((n, d)) * np.sqrt((C * f + D) / d)[:, None]
        drift += np.sum((y - x) ** 2)
        gaps += np.sum(f)
        sum_g += g
        sum_grad += grad
        y = y - alpha * g
    chosen = rng.choice(n, S, replace=False)
    G = sum_g[chosen].mean(axis=0)
    b = sum_grad - sum_grad.mean(axis=0)
    x1 = x - alpha * G
    return dict(drift=drift, gaps=gaps, psi=np.mean(np.sum(b ** 2, axis=1)),
                sampling_error=np.sum(b[chosen].mean(axis=0) ** 2),
                grad_bar_sq=np.sum((sum_grad.mean(axis=0) / Q) ** 2), G_sq=np.sum(G ** 2),
                next_gap=np.mean(0.5 * np.sum(a * (x1 - c) ** 2, axis=1)) - f_star)


def test_monte_carlo_against_numpy():
    p = quad(n=6, d=2, seed=2, C=1.0, D=0.5)
    a, c = (np.asarray(v) for v in p.params)
    n, S, Q, alpha, M = 6, 2, 3, 0.2, 3000
    x = np.asarray(p.x_star) + 1.5
    r = fa.theory.lemma_diagnostics(jax.random.key(7), p, x, stepsize=alpha, num_sampled=S,
                                    local_steps=Q, L=1.0, C=1.0, D=0.5, num_replicates=M)
    rng = np.random.default_rng(0)
    ref = [numpy_round(rng, a, c, float(p.f_star), 1.0, 0.5, x, alpha, S, Q) for _ in range(M)]
    for name in ref[0]:
        v = np.array([s[name] for s in ref])
        se = math.sqrt(v.var(ddof=1) / M + float(r.quantities[name].stderr[0]) ** 2)
        assert se > 0, name
        assert abs(v.mean() - float(r.quantities[name].mean[0])) <= Z * se, name
    # Lemma 3 (eq. 14) on the package's estimates: E||sampling error||^2 = (I_S / S) Psi_t
    I_S = fa.theory.sampling_factor(n, S)
    q = r.quantities
    se = math.hypot(float(q["sampling_error"].stderr[0]), I_S / S * float(q["psi"].stderr[0]))
    assert abs(float(q["sampling_error"].mean[0]) - I_S / S * float(q["psi"].mean[0])) <= Z * se


SLOW = pytest.mark.slow


@pytest.mark.parametrize("d_max,S", [(20.0, 4), pytest.param(200.0, 4, marks=SLOW),
                                     pytest.param(20.0, 40, marks=SLOW),
                                     pytest.param(200.0, 40, marks=SLOW)])
def test_inequalities_hold_on_problem_27(d_max, S):
    """At alpha = 1/(8 Q (L + C)), inside every lemma's condition (L = C = 1, D = 0)."""
    p = fa.problems.huber_offsets(offsets=offs.paper_offsets(d_max, 40))
    x_star = float(p.x_star[0])
    pts = np.array([[x_star + 10.0], [x_star + 1.0], [x_star + 0.1]])
    limits = fa.theory.lemma_stepsize_limits(1.0, 1.0, 10)
    r = fa.theory.lemma_diagnostics(jax.random.key(S), p, pts, stepsize=limits[8], num_sampled=S,
                                    local_steps=10, L=1.0, C=1.0, D=0.0, num_replicates=300)
    for ch in r.checks:
        assert ch.stepsize_ok, ch.equation
        assert np.all(ch.holds), (ch.equation, ch.lhs, ch.rhs, ch.diff_stderr)
        np.testing.assert_allclose(ch.terms.sum(axis=1), ch.rhs, rtol=1e-10)
    assert np.all(r.lemma5.ratio >= 1) and np.all(r.lemma7.ratio >= 1)  # the pointwise ones


def test_stepsize_limits():
    lim = fa.theory.lemma_stepsize_limits(1.0, 1.0, 10)
    assert lim[4] == pytest.approx(0.05) and lim[8] == pytest.approx(1 / 160)
    assert lim[6] == pytest.approx(min(1 / (20 * math.sqrt(3)), 1 / (2 * math.sqrt(20))))
    assert math.isinf(lim[5]) and math.isinf(lim[7])
    assert lim[6] == pytest.approx(1 / (20 * math.sqrt(3)))  # C = 1: the L part binds
    assert fa.theory.lemma_stepsize_limits(1.0, 0.0, 3)[6] == pytest.approx(1 / (6 * math.sqrt(3)))  # C = 0


def test_run_points():
    p = fa.problems.huber_offsets(offsets=[0.0, 4.0])
    res = fa.simulate(p, num_sampled=1, local_steps=2, stepsize=0.1, rounds=20, x0=[6.0],
                      trials=2, key=jax.random.key(0), record_every=5)
    pts, t = fa.theory.run_points(res, (0.0, 0.5, 1.0), trials=(0, 1))
    assert pts.shape == (6, 1) and t.tolist() == [0, 10, 20] * 2
    np.testing.assert_array_equal(pts[2], res.x_final[0])
    with pytest.raises(ValueError, match="record_x=True"):
        fa.theory.run_points(fa.simulate(p, num_sampled=1, local_steps=2, stepsize=0.1, rounds=2,
                                         x0=[6.0], key=jax.random.key(0), record_x=False))


@pytest.mark.parametrize("kw,match", [
    (dict(points=np.zeros((2, 3))), r"points must have shape \(P, d=1\), got \(2, 3\)"),
    (dict(points=np.zeros((1, 1, 1))), r"points must have shape"),
    (dict(num_sampled=5), r"num_sampled \(S=5\) must be in \[1, n=3\]"),
    (dict(num_sampled=0), r"num_sampled \(S=0\) must be in \[1, n=3\]"),
    (dict(num_replicates=1), r"num_replicates \(M\) \(1\) must be >= 2"),
    (dict(stepsize=-1.0), r"stepsize"),
    (dict(L=0.0), r"L"),
    (dict(local_steps=0), r"local_steps \(Q\)"),
])
def test_bad_input(kw, match):
    p = fa.problems.huber_offsets(offsets=[0.0, 4.0, 8.0])
    args = dict(points=[[1.0]], stepsize=0.01, num_sampled=2, local_steps=2, L=1.0, C=1.0, D=0.0,
                num_replicates=4)
    args.update(kw)
    pts = args.pop("points")
    with pytest.raises(ValueError, match=match) as err:
        fa.theory.lemma_diagnostics(jax.random.key(0), p, pts, **args)
    assert "\n" not in str(err.value)
