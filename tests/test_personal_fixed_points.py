"""Personalised algorithms against their closed-form fixed points and a NumPy reference.

On diagonal quadratics f_i(x) = (1/2) sum_j a_ij (x_j - b_ij)^2 (``fa.problems.quadratics``)
with exact gradients and full participation, Ditto, pFedMe, Per-FedAvg (HF and FO), APFL
and FedAvg with fine-tuning reach the fixed points of ``fa.theory`` (server model and every
client's personal model, ``record_clients=True``) within 1e-8; with noise and partial
participation the mean of the final personal models over trials agrees with the independent
NumPy reference (``reference_personal``) within 4 standard errors. Negative controls: the
first-order Per-FedAvg run misses the Hessian-free point by exactly the first-order bias,
Ditto's closed form with a wrong lam and APFL's Q = 1 formula used at Q = 3 miss the run,
and the reference with a wrong lam is rejected by the statistical test. ``mask`` and
``gather`` runs agree bit for bit.
"""

import equinox as eqx
import jax
import numpy as np
import pytest

import fedjax_abc as fa
import reference_personal as rp
from conftest import count_compilations

A, T = fa.algorithms, fa.theory

N, D = 6, 2
PROBLEM = fa.problems.quadratics(jax.random.key(3), n=N, d=D, curvature=(0.5, 2.0), spread=2.0,
                                 C=0.5, D=0.2)
CURV, CENTRES = (np.asarray(p, np.float64) for p in PROBLEM.params)
X0 = np.array([3.0, -2.0])
ROUNDS = 300  # the exact runs contract below 1e-12 in 300 rounds (APFL's v_i: in 1000)
TOL = 1e-8


def exact_run(algorithm, stepsize, local_steps, rounds=ROUNDS):
    """(x_T, personal models (n, d)) of one exact, fully participating run."""
    res = fa.simulate(PROBLEM, local_steps=local_steps, stepsize=stepsize, rounds=rounds, x0=X0,
                      trials=1, key=jax.random.key(0), oracle=fa.ExactOracle(),
                      algorithm=algorithm, record_clients=True, record_every=rounds)
    assert res.client_x.shape == (1, 2, N, D) and res.client_loss.shape == (1, 2, N)
    personal = res.client_x[0, -1]
    np.testing.assert_allclose(res.client_loss[0, -1],  # f_i at client i's own model
                               0.5 * np.sum(CURV * (personal - CENTRES) ** 2, axis=1), rtol=1e-12,
                               atol=1e-14)
    return res.x_final[0], personal


def assert_at(run, point, tol=TOL):
    """The run's server and personal models within ``tol`` of the closed form's."""
    x, personal = run
    err_x, err_p = np.max(np.abs(x - point.x)), np.max(np.abs(personal - point.personal))
    assert err_x < tol and err_p < tol, (err_x, err_p)
    return max(err_x, err_p)


# ------------------------------------------------------------- exact, full participation


def test_fedavg_and_its_fine_tuned_clients_reach_the_closed_form():
    eta, Q, K, gamma = 0.2, 3, 4, 0.3
    w = T.fedavg_fixed_point(CURV, CENTRES, eta, Q)
    plain = exact_run(A.FedAvg(), eta, Q)
    assert_at(plain, T.PersonalFixedPoint(w, np.broadcast_to(w, (N, D))))
    tuned = exact_run(A.FineTuned(A.FedAvg(), steps=K, stepsize=gamma), eta, Q)
    np.testing.assert_array_equal(tuned[0], plain[0])  # the same training, bit for bit
    assert_at(tuned, T.PersonalFixedPoint(w, T.fine_tuned_personal(CURV, CENTRES, w, K, gamma)))
    # K = 0: the inner algorithm's own personal model
    np.testing.assert_array_equal(exact_run(A.FineTuned(A.FedAvg(), 0, gamma), eta, Q)[1],
                                  plain[1])


def test_ditto_reaches_its_closed_form_and_a_wrong_lam_misses_it():
    eta, Q, lam = 0.2, 3, 0.7
    run = exact_run(A.Ditto(lam), eta, Q)
    assert_at(run, T.ditto_fixed_point(CURV, CENTRES, lam, eta, Q))
    wrong = T.ditto_fixed_point(CURV, CENTRES, 1.5 * lam, eta, Q)
    np.testing.assert_allclose(wrong.x, run[0], atol=TOL)  # the global model does not see lam
    assert np.max(np.abs(run[1] - wrong.personal)) > 1e-2
    # lam = 0: each client's own minimiser
    np.testing.assert_allclose(exact_run(A.Ditto(0.0), eta, Q)[1], CENTRES, atol=TOL)


@pytest.mark.parametrize("K", [1, 3])
def test_pfedme_reaches_its_closed_form(K):
    eta, Q, lam, inner, beta = 0.2, 3, 1.0, 0.2, 0.8
    run = exact_run(A.PFedMe(lam, K, inner, beta), eta, Q)
    assert_at(run, T.pfedme_fixed_point(CURV, CENTRES, lam, K, inner, eta, Q))
    # the Moreau envelope's point (an exact inner solution) is another one for finite K
    moreau = T.pfedme_fixed_point(CURV, CENTRES, lam, None, None, eta, Q)
    assert np.max(np.abs(run[0] - moreau.x)) > 1e-3


@pytest.mark.parametrize("delta", [1e-3, 0.0])  # central difference; exact jvp
def test_perfedavg_hessian_free_reaches_its_closed_form(delta):
    eta, Q, alpha = 0.2, 3, 0.2
    run = exact_run(A.PerFedAvg(alpha, "hf", delta=delta), eta, Q)
    assert_at(run, T.perfedavg_fixed_point(CURV, CENTRES, alpha, eta, Q, "hf"))


def test_perfedavg_first_order_misses_the_hessian_free_point_by_the_bias():
    eta, Q, alpha = 0.2, 3, 0.2
    x, personal = exact_run(A.PerFedAvg(alpha, "fo"), eta, Q)
    assert_at((x, personal), T.perfedavg_fixed_point(CURV, CENTRES, alpha, eta, Q, "fo"))
    hf = T.perfedavg_fixed_point(CURV, CENTRES, alpha, eta, Q, "hf")
    bias = T.perfedavg_first_order_bias(CURV, CENTRES, alpha, eta, Q)
    assert np.max(np.abs(x - hf.x)) > 1e-2  # the negative control fails ...
    np.testing.assert_allclose(x - hf.x, bias, atol=TOL)  # ... by exactly the bias


@pytest.mark.parametrize("Q", [1, 3])
def test_apfl_reaches_its_closed_form(Q):
    eta, alpha = 0.2, 0.7  # v_i contracts by (1 - eta alpha^2 a_i)^Q a round: 1000 rounds
    run = exact_run(A.APFL(alpha), eta, Q, rounds=1000)
    point = T.apfl_fixed_point(CURV, CENTRES, alpha, eta, Q)
    assert_at(run, point)
    np.testing.assert_allclose(alpha * point.client + (1 - alpha) * point.x, point.personal,
                               atol=1e-12)
    gap = np.max(np.abs(run[1] - CENTRES))  # the personal model is b_i only for Q = 1
    assert gap < TOL if Q == 1 else gap > 1e-2


def test_apfl_learned_mixing_ends_at_the_clients_minimisers_or_the_global_model():
    """With Q = 1 a fixed point of the learned mixing has grad f_i(v_bar_i) = 0 (v_bar_i = b_i)
    or alpha_i clipped to 0 (v_bar_i = x*): eq. (10)'s gradient <v - w, grad f_i(w)> can push
    alpha_i out of [0, 1] at 0, where v_i no longer moves. Both happen here."""
    eta = 0.2
    x, personal = exact_run(A.APFL(0.5, learn_alpha=True), eta, 1, rounds=3000)
    np.testing.assert_allclose(x, T.fedavg_fixed_point(CURV, CENTRES, eta, 1), atol=TOL)
    at_own = np.max(np.abs(personal - CENTRES), axis=1) < TOL
    at_global = np.max(np.abs(personal - x), axis=1) < TOL
    assert np.all(at_own | at_global) and at_own.any() and at_global.any(), (at_own, at_global)


# ------------------------------------------------------------------ closed forms alone


def test_closed_forms_by_their_definitions():
    a, b = np.array([0.5, 1.0, 2.0]), np.array([[0.0], [1.0], [3.0]])
    # the Moreau envelope is pFedMe's limit K -> infinity
    np.testing.assert_allclose(T.pfedme_curvature(a, 2.0, 400, 0.2), T.moreau_curvature(a, 2.0),
                               rtol=1e-14)
    # Q = 1 FedAvg minimises f; HF Per-FedAvg with Q = 1 minimises the meta-objective
    np.testing.assert_allclose(T.fedavg_fixed_point(a, b, 0.1, 1), [(a @ b[:, 0]) / a.sum()])
    c = a * (1 - 0.3 * a) ** 2
    np.testing.assert_allclose(T.perfedavg_fixed_point(a, b, 0.3, 0.1, 1).x,
                               [(c @ b[:, 0]) / c.sum()])
    # equal curvatures: no first-order bias
    assert np.all(T.perfedavg_first_order_bias([1.0, 1.0], [[0.0], [4.0]], 0.3, 0.1, 3) == 0)
    # APFL's Q = 1 client states v_i* = (b_i - (1 - alpha) w*) / alpha
    point = T.apfl_fixed_point(a, b, 0.4, 0.1, 1)
    np.testing.assert_allclose(point.client, (b - 0.6 * point.x) / 0.4, atol=1e-12)


# --------------------------------------------------- noise and partial participation

STAT = dict(S=3, Q=2, stepsize=0.1, rounds=40, trials=128)
CASES = {
    "ditto": (A.Ditto(0.5), rp.ditto, dict(lam=0.5)),
    "pfedme": (A.PFedMe(1.0, 3, 0.2, 0.8), rp.pfedme,
               dict(lam=1.0, K=3, inner_stepsize=0.2, beta=0.8)),
    "perfedavg_hf": (A.PerFedAvg(0.2, "hf", delta=1e-3), rp.perfedavg,
                     dict(alpha=0.2, variant="hf", delta=1e-3)),
    "perfedavg_fo": (A.PerFedAvg(0.2, "fo"), rp.perfedavg,
                     dict(alpha=0.2, variant="fo", delta=0.0)),
    "apfl": (A.APFL(0.6), rp.apfl, dict(alpha=0.6, learn_alpha=False)),
    "apfl_learned": (A.APFL(0.6, learn_alpha=True), rp.apfl, dict(alpha=0.6, learn_alpha=True)),
    "fine_tuned": (A.FineTuned(A.FedAvg(), 3, 0.3), rp.fedavg_fine_tuned,
                   dict(steps=3, fine_stepsize=0.3)),
}


def _z(sample, reference):
    """The largest |difference of means| / combined standard error over every coordinate."""
    se = np.sqrt(sample.var(0, ddof=1) / len(sample) + reference.var(0, ddof=1) / len(reference))
    return np.max(np.abs(sample.mean(0) - reference.mean(0)) / se)


def _engine(algorithm):
    res = fa.simulate(PROBLEM, num_sampled=STAT["S"], local_steps=STAT["Q"],
                      stepsize=STAT["stepsize"], rounds=STAT["rounds"], x0=X0,
                      trials=STAT["trials"], key=jax.random.key(11), algorithm=algorithm,
                      record_clients=True, record_every=STAT["rounds"])
    return res.x_final, res.client_x[:, -1]


def _reference(fn, kw, seed=5):
    problem = rp.Quadratics(CURV, CENTRES, C=0.5, D=0.2)
    out = fn(problem, X0, rng=np.random.default_rng(seed), **kw,
             **{k: STAT[k] for k in ("S", "Q", "stepsize", "rounds", "trials")})
    return out["x"], out["personal"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_noisy_partial_runs_agree_with_the_numpy_reference(name):
    algorithm, fn, kw = CASES[name]
    (x, personal), (x_ref, personal_ref) = _engine(algorithm), _reference(fn, kw)
    assert np.ptp(personal, axis=0).max() > 1e-2  # the noise and the sampling are there
    assert _z(x, x_ref) < 4 and _z(personal, personal_ref) < 4, (_z(x, x_ref),
                                                                 _z(personal, personal_ref))


def test_the_statistical_test_rejects_a_wrong_lam():
    _, personal = _engine(CASES["ditto"][0])
    _, wrong = _reference(rp.ditto, dict(lam=1.0))
    assert _z(personal, wrong) > 4


@pytest.mark.parametrize("name", ["apfl_learned"] + [
    pytest.param(name, marks=pytest.mark.slow)
    for name in ("ditto", "fine_tuned", "perfedavg_hf", "pfedme")])
def test_mask_and_gather_agree_bit_for_bit(name):
    kw = dict(num_sampled=3, local_steps=2, stepsize=0.1, rounds=8, x0=X0, trials=2,
              key=jax.random.key(2), algorithm=CASES[name][0], record_clients=True)
    a = fa.simulate(PROBLEM, mode="mask", **kw)
    b = fa.simulate(PROBLEM, mode="gather", **kw)
    np.testing.assert_array_equal(a.x, b.x)
    np.testing.assert_array_equal(a.client_x, b.client_x)
    assert np.all(np.isfinite(a.client_loss))


def test_new_hyperparameters_compile_nothing():
    """Per-FedAvg's inner stepsize and delta, pFedMe's lam, inner stepsize and beta are
    leaves: a new value is the same program."""
    for old, new in ((A.PerFedAvg(0.2, delta=1e-3), A.PerFedAvg(0.1, delta=1e-4)),
                     (A.PFedMe(1.0, 3, 0.2, 0.8), A.PFedMe(2.0, 3, 0.1, 1.0))):
        a = exact_run(old, 0.2, 3)
        with count_compilations() as later:
            b = exact_run(new, 0.2, 3)
        assert later == [], f"recompiled: {later}"
        assert np.all(a[1] != b[1])


# ------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("build, message", [
    (lambda: A.Ditto(lam=-1.0), "lam must be >= 0, got -1.0"),
    (lambda: A.PFedMe(lam=-1.0, inner_steps=3, inner_stepsize=0.1), "lam must be > 0, got -1.0"),
    (lambda: A.PFedMe(lam=1.0, inner_steps=0, inner_stepsize=0.1),
     "inner_steps (K) must be an integer >= 1, got 0"),
    (lambda: A.PFedMe(lam=1.0, inner_steps=3, inner_stepsize=0.0),
     "inner_stepsize must be > 0, got 0.0"),
    (lambda: A.PerFedAvg(alpha=-0.1), "alpha must be >= 0, got -0.1"),
    (lambda: A.PerFedAvg(alpha=0.1, delta=-1.0), "delta must be >= 0, got -1.0"),
    (lambda: A.PerFedAvg(alpha=0.1, variant="so"), "variant must be one of ('hf', 'fo'), got 'so'"),
    (lambda: A.APFL(alpha=1.5), "alpha must be <= 1, got 1.5"),
    (lambda: A.APFL(alpha=-0.5), "alpha must be >= 0, got -0.5"),
    (lambda: A.FineTuned(A.FedAvg(), steps=-1, stepsize=0.1),
     "steps (K) must be an integer >= 0, got -1"),
    (lambda: A.FineTuned(A.FedAvg(), steps=2, stepsize=0.0), "stepsize must be > 0, got 0.0"),
    (lambda: T.apfl_fixed_point(CURV, CENTRES, 0.0, 0.1, 1), "alpha (0.0) must be > 0"),
    (lambda: T.ditto_personal(CURV, CENTRES, -1.0, X0), "lam (-1.0) must be >= 0"),
    (lambda: T.pfedme_curvature(CURV, 1.0, 0, 0.1), "inner_steps (K) (0) must be >= 1"),
])
def test_bad_input_is_one_line(build, message):
    with pytest.raises(ValueError) as err:
        build()
    assert str(err.value) == message


def test_a_value_put_in_by_tree_at_is_checked_when_run():
    bad = eqx.tree_at(lambda a: a.alpha, A.APFL(0.5), np.float64(2.0))
    with pytest.raises(ValueError, match=r"^alpha must be <= 1, got 2.0$"):
        exact_run(bad, 0.1, 1)
