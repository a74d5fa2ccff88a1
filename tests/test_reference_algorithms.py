"""Deterministic self-checks of tests/reference_algorithms.py (the NumPy reference of FedAvg
with server stepsize, FedProx, SCAFFOLD and FedOpt), so that a wrong reference cannot pass
silently. These check the reference against reference_numpy.fedavg, hand loops, hand-computed
numbers and known identities; one test cross-checks the optimizer transcriptions against optax
itself (the reference module imports neither jax nor optax).
"""

import contextlib

import numpy as np
import pytest

import reference_algorithms as ra
import reference_numpy as ref


def quadratics(n=5, d=3, C=0.5, D=0.2, seed=0):
    r = np.random.default_rng(seed)
    return ref.Quadratics(a=r.uniform(0.5, 2.0, (n, d)), c=r.normal(0.0, 1.0, (n, d)), C=C, D=D)


STEPS = np.array([0.1, 0.08, 0.06, 0.05, 0.05, 0.04])


def test_reference_module_is_independent():
    src = open(ra.__file__).read()
    for name in ("fedjax_abc", "jax", "optax"):
        assert f"import {name}" not in src and f"from {name}" not in src


# --------------------------------------------------------------------------------- FedAvg


def test_fedavg_exact_equals_reference_numpy():
    p = ref.ExactGradients(quadratics())
    kw = dict(S=2, Q=4, stepsizes=STEPS, trials=7)
    x0 = np.array([0.3, -1.0, 2.0])
    got = ra.run(p, ra.FedAvg(1.0), x0, rng=np.random.default_rng(5), **kw)["x"]
    want = ref.fedavg(p, x0, rng=np.random.default_rng(5), **kw)
    assert got.shape == (7, 3)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)
    # different trials really sampled different subsets (S < n), so the sampler was exercised
    assert np.ptp(got, axis=0).max() > 1e-3


@pytest.mark.parametrize("problem", [quadratics(), ref.HuberOffsets([-2.0, -0.5, 0.0, 1.0, 3.0])],
                         ids=["quadratics", "huber_offsets"])
def test_fedavg_stochastic_same_draws_as_reference_numpy(problem):
    """Same seed -> same subsets and same oracle noise, draw for draw."""
    kw = dict(S=3, Q=3, stepsizes=STEPS, trials=11)
    x0 = np.full(problem.d, 1.5)
    got = ra.fedavg(problem, x0, rng=np.random.default_rng(9), **kw)
    want = ref.fedavg(problem, x0, rng=np.random.default_rng(9), **kw)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    assert np.ptp(got, axis=0).max() > 1e-2   # noise is really there


def test_fedavg_server_lr_is_interpolation_per_round():
    """One round: x_1 = x_0 + eta (mean y^Q - x_0) = (1 - eta) x_0 + eta * (eta=1 result)."""
    p = ref.ExactGradients(quadratics())
    kw = dict(S=5, Q=3, stepsizes=[0.1], trials=2)   # S = n: no randomness
    x0 = np.array([1.0, -2.0, 0.5])
    one = ra.fedavg(p, x0, rng=np.random.default_rng(0), **kw)
    half = ra.fedavg(p, x0, rng=np.random.default_rng(0), server_lr=0.5, **kw)
    np.testing.assert_allclose(half, 0.5 * x0 + 0.5 * one, rtol=0, atol=1e-14)


def test_history_and_shapes():
    p = ref.ExactGradients(quadratics())
    out = ra.run(p, ra.FedAvg(), 0.0, S=2, Q=2, stepsizes=STEPS, trials=4,
                 rng=np.random.default_rng(1), keep_history=True)
    assert out["history"].shape == (len(STEPS) + 1, 4, 3)
    np.testing.assert_array_equal(out["history"][0], 0.0)
    np.testing.assert_array_equal(out["history"][-1], out["x"])


# -------------------------------------------------------------------------------- FedProx


@pytest.mark.parametrize("exact", [True, False])
def test_fedprox_mu0_equals_fedavg(exact):
    p = quadratics()
    p = ref.ExactGradients(p) if exact else p
    kw = dict(S=2, Q=4, stepsizes=STEPS, trials=6)
    got = ra.fedprox(p, 0.7, rng=np.random.default_rng(3), mu=0.0, **kw)
    want = ra.fedavg(p, 0.7, rng=np.random.default_rng(3), **kw)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)


def test_fedprox_hand_loop_one_client():
    """n = 1, 1-d quadratic f = (a/2)(x - b)^2, exact: y <- y - alpha (a (y - b) + mu (y - x_t))."""
    a, b, mu, alpha, Q = 2.0, 1.0, 3.0, 0.1, 4
    p = ref.ExactGradients(ref.Quadratics(a=[[a]], c=[[b]], C=0.0, D=0.0))
    x = 5.0
    for _ in range(3):
        y = x
        for _ in range(Q):
            y = y - alpha * (a * (y - b) + mu * (y - x))
        x = y
    got = ra.fedprox(p, 5.0, S=1, Q=Q, stepsizes=[alpha] * 3, trials=2,
                     rng=np.random.default_rng(0), mu=mu)
    np.testing.assert_allclose(got, x, rtol=1e-14)
    # mu > 0 really pulls towards x_t: it differs from FedAvg
    fa = ra.fedavg(p, 5.0, S=1, Q=Q, stepsizes=[alpha] * 3, trials=1, rng=np.random.default_rng(0))
    assert abs(fa[0, 0] - x) > 1e-2


# ------------------------------------------------------------------------------- SCAFFOLD


def test_scaffold_one_client_is_plain_sgd():
    """n = 1, eta_g = 1, exact gradients: c = c_1 always, so local steps are plain SGD and
    x_{t+1} = y^Q: T * Q consecutive gradient steps."""
    base = quadratics(n=1, d=2)
    p = ref.ExactGradients(base)
    Q = 3
    x = np.array([2.0, -1.0])
    for alpha in STEPS:
        for _ in range(Q):
            x = x - alpha * base.grads(np.array([0]), x[None, :])[0]
    out = ra.run(p, ra.Scaffold(1.0), [2.0, -1.0], S=1, Q=Q, stepsizes=STEPS, trials=3,
                 rng=np.random.default_rng(0))
    np.testing.assert_allclose(out["x"], np.broadcast_to(x, (3, 2)), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(out["c"], out["c_clients"][:, 0, :], rtol=1e-13, atol=1e-14)


def test_scaffold_two_rounds_by_hand():
    """n = S = 2, d = 1, f_1 = (1/2) x^2, f_2 = (3/2)(x - 2)^2, exact, x_0 = 1, Q = 2,
    alpha = 1/4, eta_g = 1 (all numbers dyadic, so exact in floating point).

    Round 0 (c = c_1 = c_2 = 0):
      client 1: g = y.        y: 1 -> 0.75 -> 0.5625
      client 2: g = 3(y - 2). y: 1 -> 1.75 -> 1.9375
      c_1^+ = (1 - 0.5625) / (2 * 0.25) = 0.875;  c_2^+ = (1 - 1.9375) / 0.5 = -1.875
      x_1 = 1 + mean(-0.4375, 0.9375) = 1.25
      c = 0 + (2/2) mean(0.875, -1.875) = -0.5
    Round 1 (c = -0.5; correction c - c_i = -1.375 for client 1, +1.375 for client 2):
      client 1: y: 1.25 -> 1.25 - 0.25 (1.25 - 1.375) = 1.28125
                     -> 1.28125 - 0.25 (1.28125 - 1.375) = 1.3046875
      client 2: y: 1.25 -> 1.25 - 0.25 (3 (-0.75) + 1.375) = 1.46875
                     -> 1.46875 - 0.25 (3 (-0.53125) + 1.375) = 1.5234375
      x_2 = 1.25 + mean(0.0546875, 0.2734375) = 1.4140625
      c_1^+ = 0.875 + 0.5 + (1.25 - 1.3046875) / 0.5 = 1.265625
      c_2^+ = -1.875 + 0.5 + (1.25 - 1.5234375) / 0.5 = -1.921875
      c = -0.5 + mean(1.265625 - 0.875, -1.921875 + 1.875) = -0.328125 (= mean of the c_i)
    """
    p = ref.ExactGradients(ref.Quadratics(a=[[1.0], [3.0]], c=[[0.0], [2.0]], C=0.0, D=0.0))
    kw = dict(S=2, Q=2, trials=2, rng=np.random.default_rng(0))
    r1 = ra.run(p, ra.Scaffold(1.0), 1.0, stepsizes=[0.25], **kw)
    assert np.all(r1["x"] == 1.25)
    assert np.all(r1["c"] == -0.5)
    assert np.all(r1["c_clients"][:, :, 0] == [0.875, -1.875])
    r2 = ra.run(p, ra.Scaffold(1.0), 1.0, stepsizes=[0.25, 0.25], **kw)
    assert np.all(r2["x"] == 1.4140625)
    assert np.all(r2["c"] == -0.328125)
    assert np.all(r2["c_clients"][:, :, 0] == [1.265625, -1.921875])


def test_scaffold_partial_participation_by_hand():
    """n = 2, S = 1: c moves by (S/n) = 1/2 of the sampled client's Delta c_i and only that
    client's c_i changes. Same problem as above, one round from x_0 = 1, Q = 2, alpha = 1/4,
    eta_g = 0.5: sampled client 1 -> x_1 = 1 + 0.5 (-0.4375), c = 0.875 / 2, c = (0.875, 0);
    sampled client 2 -> x_1 = 1 + 0.5 (0.9375), c = -1.875 / 2, c = (0, -1.875)."""
    p = ref.ExactGradients(ref.Quadratics(a=[[1.0], [3.0]], c=[[0.0], [2.0]], C=0.0, D=0.0))
    rng = np.random.default_rng(4)
    trials = 40
    idx = ref.sample_subsets(np.random.default_rng(4), trials, 2, 1)[:, 0]
    out = ra.run(p, ra.Scaffold(0.5), 1.0, S=1, Q=2, stepsizes=[0.25], trials=trials, rng=rng)
    assert 0 < idx.sum() < trials    # both clients were sampled in some trial
    np.testing.assert_array_equal(out["x"][:, 0], np.where(idx == 0, 0.78125, 1.46875))
    np.testing.assert_array_equal(out["c"][:, 0], np.where(idx == 0, 0.4375, -0.9375))
    np.testing.assert_array_equal(out["c_clients"][:, 0, 0], np.where(idx == 0, 0.875, 0.0))
    np.testing.assert_array_equal(out["c_clients"][:, 1, 0], np.where(idx == 0, 0.0, -1.875))


def test_scaffold_invariant_c_is_mean_of_client_cs():
    """c starts at 0 and gains (1/n) sum_{S_t} Delta c_i per round, so c = mean_i c_i always
    (stochastic oracle, partial participation)."""
    p = quadratics(n=6, d=2)
    out = ra.run(p, ra.Scaffold(0.8), 0.5, S=2, Q=3, stepsizes=STEPS, trials=9,
                 rng=np.random.default_rng(2))
    np.testing.assert_allclose(out["c"], out["c_clients"].mean(axis=1), rtol=1e-12, atol=1e-13)
    assert np.abs(out["c"]).max() > 1e-2


# --------------------------------------------------------------------------------- FedOpt


@pytest.mark.parametrize("momentum", [None, 0.0])
def test_fedopt_sgd1_equals_fedavg(momentum):
    p = quadratics()
    kw = dict(S=2, Q=3, stepsizes=STEPS, trials=8)
    got = ra.fedopt(p, -0.4, rng=np.random.default_rng(6), optimizer=ra.sgd(1.0, momentum=momentum), **kw)
    want = ra.fedavg(p, -0.4, rng=np.random.default_rng(6), **kw)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)
    # and sgd(lr) is FedAvg with server_lr = lr
    got = ra.fedopt(p, -0.4, rng=np.random.default_rng(6), optimizer=ra.sgd(0.7, momentum=momentum), **kw)
    want = ra.fedavg(p, -0.4, rng=np.random.default_rng(6), server_lr=0.7, **kw)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)


def test_sgd_momentum_hand():
    """trace_t = g_t + b trace_{t-1}; u_t = -lr trace_t."""
    opt = ra.sgd(0.5, momentum=0.9)
    s = opt.init(np.zeros((1, 1)))
    u1, s = opt.update(np.array([[2.0]]), s)
    u2, s = opt.update(np.array([[1.0]]), s)
    assert u1[0, 0] == pytest.approx(-1.0) and u2[0, 0] == pytest.approx(-0.5 * (1.0 + 1.8))


def test_adam_first_update_has_magnitude_lr():
    """Bias-corrected Adam: mhat_1 = g, vhat_1 = g^2, so u_1 = -lr g / (|g| + eps)."""
    lr = 0.3
    g = np.array([[1e-3, -2.0, 50.0], [-0.7, 4e-2, 1.0]])
    opt = ra.adam(lr)
    u, _ = opt.update(g, opt.init(np.zeros_like(g)))
    np.testing.assert_allclose(u, -lr * g / (np.abs(g) + 1e-8), rtol=1e-12)
    np.testing.assert_allclose(np.abs(u), lr, rtol=1e-5)


def test_adagrad_and_yogi_first_update_hand():
    g = np.array([[0.5, -3.0]])
    lr = 0.2
    # adagrad: s_1 = 0.1 + g^2, u = -lr g / sqrt(s_1 + 1e-7)
    opt = ra.adagrad(lr)
    u, s = opt.update(g, opt.init(np.zeros_like(g)))
    np.testing.assert_allclose(u, -lr * g / np.sqrt(0.1 + g**2 + 1e-7), rtol=1e-14)
    np.testing.assert_allclose(s, 0.1 + g**2, rtol=1e-14)
    # yogi: m_0 = v_0 = 1e-6; m_1 = 0.9e-6 + 0.1 g, v_1 = 1e-6 + 0.001 g^2 (g^2 > v_0);
    # mhat = m_1 / 0.1 = g + 9e-6, vhat = v_1 / 0.001 = g^2 + 1e-3; u = -lr mhat / (sqrt(vhat) + 1e-3)
    opt = ra.yogi(lr)
    u, _ = opt.update(g, opt.init(np.zeros_like(g)))
    np.testing.assert_allclose(u, -lr * (g + 9e-6) / (np.sqrt(g**2 + 1e-3) + 1e-3), rtol=1e-12)


def test_fedopt_adam_one_round_by_hand():
    """n = S = 1, 1-d f = (1/2) x^2 exact, Q = 1, alpha = 0.5, x_0 = 2: y^1 = 1, Delta = 1;
    adam(0.1) update = -0.1 * 1 / (1 + 1e-8), so x_1 = 2 - 0.1 / (1 + 1e-8)."""
    p = ref.ExactGradients(ref.Quadratics(a=[[1.0]], c=[[0.0]], C=0.0, D=0.0))
    x = ra.fedopt(p, 2.0, S=1, Q=1, stepsizes=[0.5], trials=1, rng=np.random.default_rng(0),
                  optimizer=ra.adam(0.1))
    assert x[0, 0] == pytest.approx(2.0 - 0.1 / (1 + 1e-8), rel=1e-15)


# ---------------------------------------------------- cross-check against optax itself


def _x64(jax):
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(True)
    try:
        from jax.experimental import enable_x64
        return enable_x64()
    except ImportError:
        return contextlib.nullcontext()


@pytest.mark.parametrize("name,make_ref,make_optax", [
    ("sgd", lambda: ra.sgd(0.3), lambda o: o.sgd(0.3)),
    ("sgd_momentum", lambda: ra.sgd(0.3, momentum=0.9), lambda o: o.sgd(0.3, momentum=0.9)),
    ("sgd_nesterov", lambda: ra.sgd(0.3, momentum=0.9, nesterov=True),
     lambda o: o.sgd(0.3, momentum=0.9, nesterov=True)),
    ("adam", lambda: ra.adam(0.05), lambda o: o.adam(0.05)),
    ("adagrad", lambda: ra.adagrad(0.05), lambda o: o.adagrad(0.05)),
    ("yogi", lambda: ra.yogi(0.05), lambda o: o.yogi(0.05)),
])
def test_optimizers_match_optax(name, make_ref, make_optax):
    """The NumPy transcriptions reproduce optax's updates on a fixed gradient sequence
    (optax is used only here, never by the reference module)."""
    optax = pytest.importorskip("optax")
    import jax
    import jax.numpy as jnp
    gs = np.random.default_rng(8).normal(0.0, 1.0, (12, 3, 2)) * np.array([1e-3, 1.0])
    gs[5] = 0.0                                          # a zero gradient step too
    opt = make_ref()
    s = opt.init(np.zeros((3, 2)))
    mine = []
    for g in gs:
        u, s = opt.update(g, s)
        mine.append(u)
    with _x64(jax):
        dtype = jnp.float64 if jnp.zeros(()).dtype == jnp.float64 else jnp.float32
        tx = make_optax(optax)
        st = tx.init(jnp.zeros((3, 2), dtype))
        theirs = []
        for g in gs:
            u, st = tx.update(jnp.asarray(g, dtype), st)
            theirs.append(np.asarray(u, np.float64))
    tol = 1e-12 if dtype == jnp.float64 else 2e-5
    np.testing.assert_allclose(np.array(mine), np.array(theirs), rtol=tol, atol=tol * 1e-3)
