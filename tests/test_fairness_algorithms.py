"""q-FFL, AFL, IFCA, FedRep and FedPer reach their closed-form fixed points.

Clients f_i(x) = a_i/2 ||x - b_i||^2 (+ e_i) in R^2 or R^3, exact gradients (``ExactOracle``),
full participation: each run goes through ``fa.simulate(..., record_clients=True)`` and its
last record (every client's own model, ``SimResult.client_x``) is compared with the
functions of ``fa.theory`` (derived in their docstrings, checked against NumPy iterations
of the papers' updates). Every dynamics here contracts linearly, so a few hundred rounds
reach the fixed point to rounding; the tolerance is 1e-8. Negative controls: a q-FFL run
asserted against another q's point, IFCA started where it assigns the clients wrongly.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa

A = fa.algorithms
TOL = 1e-8


def quadratics(a, b, floors=None):
    """f_i(x) = a_i/2 ||x - b_i||^2 + e_i (e_i = ``floors``, default 0), closed-form gradients."""
    a = np.asarray(a, float)
    b = np.asarray(b, float).reshape(a.size, -1)
    e = np.zeros(a.size) if floors is None else np.asarray(floors, float)
    x_star = (a[:, None] * b).sum(0) / a.sum()
    f_star = float(np.mean(a / 2 * ((x_star - b) ** 2).sum(1) + e))
    return fa.make_problem(lambda p, x: 0.5 * p[0] * jnp.sum((x - p[1]) ** 2) + p[2],
                           (jnp.asarray(a), jnp.asarray(b), jnp.asarray(e)), fa.ExactOracle(),
                           dim=b.shape[1], local_minima=e, f_star=f_star, x_star=x_star,
                           grad_fn=lambda p, x: p[0] * (x - p[1]), name="quadratics")


def run(problem, algorithm, rounds, local_steps=1, alpha=0.1, x0=None, **kw):
    """One trial, records at t = 0 and T, with every client's model and loss."""
    x0 = np.zeros(problem.dim) if x0 is None else np.asarray(x0, float)
    return fa.simulate(problem, algorithm=algorithm, local_steps=local_steps, stepsize=alpha,
                       rounds=rounds, x0=x0, trials=1, key=jax.random.key(0),
                       record_every=rounds, record_clients=True, **kw)


def one_line(excinfo) -> bool:
    return "\n" not in str(excinfo.value)


# ------------------------------------------------------------------------------ q-FFL

TWO_A = np.array([1.0, 3.0])
TWO_B = np.array([[0.0, 1.0], [2.0, -1.0]])
TWO = quadratics(TWO_A, TWO_B)


@pytest.mark.parametrize("local_steps", [1, 3])
def test_qffl_reaches_the_two_client_closed_form(local_steps):
    """(w - b_1) / (b_2 - w) = (a_2^q c_2 / (a_1^q c_1))^(1/(2q+1)) on the segment, for
    q = 0, 1, 3 (one program: q is a leaf); every client's own model is w (no personal
    models). L = 10 = 1 / alpha, the authors' choice. q = 3 with Q = 3 contracts slowest
    (3e-9 after 300 rounds): 600 rounds reach rounding."""
    for q in (0.0, 1.0, 3.0):
        res = run(TWO, A.QFFL(q, lipschitz=10.0), 600, local_steps)
        w = fa.theory.qffl_two_clients(TWO_A, TWO_B, q, local_steps=local_steps, stepsize=0.1)
        np.testing.assert_allclose(res.x_final[0], w, rtol=0, atol=TOL)
        np.testing.assert_allclose(res.client_x[0, -1], [w, w], rtol=0, atol=TOL)
        losses = TWO_A / 2 * ((w - TWO_B) ** 2).sum(1)
        np.testing.assert_allclose(res.client_loss[0, -1], losses, rtol=0, atol=TOL)


def test_qffl_with_q_zero_is_fedavg():
    """q = 0: Delta_k = L (w - w_bar_k), h_k = L: w^{t+1} = mean_k w_bar_k whatever L,
    FedAvg's rounds to rounding, and FedAvg's fixed point (Q = 3: c_i-weighted)."""
    qffl = run(TWO, A.QFFL(0.0, lipschitz=3.0), 300, 3, record_x=True)
    fedavg = run(TWO, A.FedAvg(), 300, 3)
    np.testing.assert_allclose(qffl.x_final, fedavg.x_final, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(qffl.x_final[0],
                               fa.theory.fedavg_fixed_point(TWO_A, TWO_B, stepsize=0.1,
                                                             local_steps=3), atol=TOL)


def test_qffl_tends_to_afl_minimax_point_as_q_grows():
    """The closed form's limit q -> infinity is where F_1 = F_2, AFL's minimax point; runs
    with q = 1, 3, 8 come closer to it in turn (and each sits on its own closed form). A
    larger q contracts more slowly (h_k's term q F^(q-1) ||Delta w||^2 shortens the step):
    q = 8 is at 3e-7 after 300 rounds, at rounding after 1000."""
    minimax = fa.theory.afl_minimax(TWO_A, TWO_B).x
    np.testing.assert_allclose(fa.theory.qffl_two_clients(TWO_A, TWO_B, np.inf), minimax,
                               atol=1e-15)
    gaps = []
    for q in (1.0, 3.0, 8.0):
        w = run(TWO, A.QFFL(q, lipschitz=10.0), 1000).x_final[0]
        np.testing.assert_allclose(w, fa.theory.qffl_two_clients(TWO_A, TWO_B, q), atol=TOL)
        gaps.append(np.abs(w - minimax).max())
    assert gaps[0] > gaps[1] > gaps[2] > 0, gaps


def test_qffl_negative_control_another_q_fails():
    """A run with q = 1 asserted against q = 3's closed form (or q = 0's) fails."""
    w = run(TWO, A.QFFL(1.0, lipschitz=10.0), 300).x_final[0]
    for other in (0.0, 3.0):
        with pytest.raises(AssertionError):
            np.testing.assert_allclose(w, fa.theory.qffl_two_clients(TWO_A, TWO_B, other),
                                       atol=TOL)
    assert np.abs(w - fa.theory.qffl_two_clients(TWO_A, TWO_B, 3.0)).max() > 1e-2


# -------------------------------------------------------------------------------- AFL


@pytest.mark.parametrize("floors, local_steps", [(None, 1), ([0.0, 0.5], 3), ([20.0, 0.0], 1)])
def test_afl_reaches_the_minimax_point(floors, local_steps):
    """Interior minimax points (f_1 = f_2), with Q = 1 and Q = 3, and one client's own
    minimiser (e_1 = 20 >= f_2(b_1) = 12).

    Tolerance 1e-8 after 600 rounds: near the saddle point the round's map of (x, lambda_1)
    is linear with Jacobian [[1 - alpha A, -alpha g], [gamma g / 2, 1]] (A = sum lambda_i
    a_i, g = grad f_1 - grad f_2 along the segment), whose eigenvalues have modulus
    sqrt(1 - alpha A + alpha gamma |g|^2 / 2) < 1 for gamma < 2 A / |g|^2 (here about 0.3);
    gamma = 0.02 gives about 0.93 per round, so 600 rounds take the error from O(1) below
    1e-15 (a NumPy iteration of the same updates: 1e-16 after 1000 rounds). A vertex is
    reached in finitely many projected steps, then x contracts by 1 - alpha a_1."""
    problem = quadratics(TWO_A, TWO_B, floors)
    res = run(problem, A.AFL(0.02, num_clients=2), 600, local_steps)
    m = fa.theory.afl_minimax(TWO_A, TWO_B, floors, local_steps=local_steps, stepsize=0.1)
    assert m.interior == (floors != [20.0, 0.0])
    np.testing.assert_allclose(res.x_final[0], m.x, rtol=0, atol=TOL)
    np.testing.assert_allclose(res.client_loss[0, -1].max(), m.value, rtol=0, atol=TOL)
    if m.interior:  # both clients at the minimax value
        np.testing.assert_allclose(res.client_loss[0, -1], [m.value, m.value], atol=TOL)


def _exact_round(alg, state, problem, local_steps, alpha):
    """One full-participation round of ``alg`` from ``state`` by hand, through its own
    methods, with exact gradients (the engine's weighted mean of unit weights)."""
    messages = []
    for i in range(problem.num_clients):
        data = problem.client(jnp.asarray(i))
        objective = A.LocalObjective(jnp.asarray(i, jnp.int32),
                                     lambda z, data=data: problem.local_value(data, z),
                                     lambda z, data=data: problem.local_grad(data, z))
        y, local = state.x, alg.client_init(state, ())
        for _ in range(local_steps):
            y, local = alg.local_step(state, y, local, objective.gradient, alpha)
        msg, _ = alg.client_final(state, (), y, local,
                                  A.LocalInfo(local_steps, alpha, objective))
        messages.append(msg)
    mean = jax.tree_util.tree_map(lambda *m: sum(m) / len(m), *messages)
    info = A.RoundInfo(jnp.asarray(float(problem.num_clients)), problem.num_clients,
                       jnp.asarray(alpha), local_steps)
    return alg.server_update(state, mean, info)


@pytest.mark.parametrize("local_steps", [1, 3])
def test_afl_saddle_point_weights_are_a_fixed_point(local_steps):
    """lambda* of the closed form (lambda_1 c_1 s = lambda_2 c_2 (1 - s)) with x* is left
    as it is by one round of AFL's own updates (the records hold x, not lambda)."""
    m = fa.theory.afl_minimax(TWO_A, TWO_B, local_steps=local_steps, stepsize=0.1)
    alg = A.AFL(0.02, num_clients=2)
    state = A.AFLState(jnp.asarray(m.x), jnp.asarray(m.weights))
    new = _exact_round(alg, state, TWO, local_steps, 0.1)
    np.testing.assert_allclose(new.x, m.x, atol=1e-13)
    np.testing.assert_allclose(new.weights, m.weights, atol=1e-13)
    wrong = A.AFLState(jnp.asarray(m.x), jnp.asarray([0.5, 0.5]))  # negative control
    assert np.abs(np.asarray(_exact_round(alg, wrong, TWO, local_steps, 0.1).x) - m.x).max() > 1e-3


def test_project_simplex_against_bisection():
    """The sort-based projection equals max(v - theta, 0) with theta found by bisection on
    sum_i max(v_i - theta, 0) = 1 (an independent computation), on random vectors."""
    rng = np.random.default_rng(0)
    project = jax.jit(A.project_simplex)
    for size in (1, 2, 5):
        for _ in range(6):
            v = rng.normal(0, 2, size=size)
            lo, hi = v.min() - 1, v.max()
            for _ in range(200):
                mid = (lo + hi) / 2
                lo, hi = (mid, hi) if np.maximum(v - mid, 0).sum() > 1 else (lo, mid)
            p = np.asarray(project(jnp.asarray(v)))
            np.testing.assert_allclose(p, np.maximum(v - lo, 0), atol=1e-12)
            assert abs(p.sum() - 1) < 1e-12 and p.min() >= 0


# ------------------------------------------------------------------------------- IFCA

IF_A = np.array([1.0, 2.0, 1.5, 1.2, 0.5, 2.0])
IF_B = np.array([[-5.0, 0.0], [-4.0, 1.0], [-6.0, -1.0], [-5.0, 2.0], [5.0, 0.0], [6.0, 1.0]])
IF_TRUE = np.array([0, 0, 0, 0, 1, 1])
IFCA_PROBLEM = quadratics(IF_A, IF_B)


def test_ifca_reaches_the_fixed_point_of_two_separated_clusters():
    """Clusters started at x0 + (-1, 0) and x0 + (1, 0): each client joins the cluster on
    its side, and each cluster model reaches FedAvg's fixed point of its members (Q = 4);
    every client's own model is its cluster's, and x_T the cluster of 4 clients (most)."""
    res = run(IFCA_PROBLEM, A.IFCA(2, offsets=[[-1.0, 0.0], [1.0, 0.0]]), 300, 4)
    fp = fa.theory.ifca_fixed_point(IF_A, IF_B, IF_TRUE, stepsize=0.1, local_steps=4)
    assert fp.consistent
    np.testing.assert_allclose(res.client_x[0, -1], fp.models[IF_TRUE], rtol=0, atol=TOL)
    np.testing.assert_allclose(res.x_final[0], fp.models[0], rtol=0, atol=TOL)
    losses = IF_A / 2 * ((fp.models[IF_TRUE] - IF_B) ** 2).sum(1)
    np.testing.assert_allclose(res.client_loss[0, -1], losses, rtol=0, atol=TOL)


def test_ifca_negative_control_clusters_assigned_wrongly():
    """Cluster 1 started far from every client (x0 + (0, 50)): every client prefers cluster
    0, cluster 1 is never chosen, and the run is FedAvg over all six. Asserting the
    separated clusters' fixed point fails; the closed form of the assignment the run made
    (all in cluster 0) holds, and is not a consistent IFCA point of the true clusters."""
    res = run(IFCA_PROBLEM, A.IFCA(2, offsets=[[0.0, 0.0], [0.0, 50.0]]), 300, 4)
    right = fa.theory.ifca_fixed_point(IF_A, IF_B, IF_TRUE, stepsize=0.1, local_steps=4)
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(res.client_x[0, -1], right.models[IF_TRUE], atol=TOL)
    made = fa.theory.ifca_fixed_point(IF_A, IF_B, np.zeros(6, int), k=2, stepsize=0.1,
                                      local_steps=4)
    np.testing.assert_allclose(res.client_x[0, -1], made.models[np.zeros(6, int)], atol=TOL)
    swapped = IF_TRUE.copy()
    swapped[3] = 1  # one client in the wrong cluster: not a fixed point of IFCA
    assert not fa.theory.ifca_fixed_point(IF_A, IF_B, swapped, stepsize=0.1,
                                          local_steps=4).consistent


# -------------------------------------------------------------------- FedRep, FedPer

BH_A = np.array([1.0, 2.0, 0.5, 3.0])
BH_B = np.array([[0.0, 1.0, 2.0], [1.0, -1.0, 0.0], [2.0, 3.0, -2.0], [-1.0, 0.0, 1.0]])
HEAD = np.array([False, True, False])
BODY_HEAD = quadratics(BH_A, BH_B)


@pytest.mark.parametrize("name", ["FedPer", "FedRep"])
def test_body_head_reach_their_fixed_point(name):
    """Heads at b_i's head coordinate; the body at FedAvg's fixed point with the local
    steps that train it (FedPer: all Q = 3; FedRep: Q - tau_h = 4 - 2). x_T keeps x0's head
    coordinate (the server never sees a head)."""
    if name == "FedPer":
        alg, Q, body_steps = A.FedPer(HEAD), 3, 3
    else:
        alg, Q, body_steps = A.FedRep(HEAD, head_steps=2), 4, 2
    x0 = np.array([0.5, 0.25, -0.5])
    res = run(BODY_HEAD, alg, 300, Q, x0=x0)
    own = fa.theory.body_head_fixed_point(BH_A, BH_B, HEAD, stepsize=0.1, body_steps=body_steps)
    np.testing.assert_allclose(res.client_x[0, -1], own, rtol=0, atol=TOL)
    np.testing.assert_allclose(res.x_final[0], np.where(HEAD, x0, own[0]), rtol=0, atol=TOL)
    wrong = fa.theory.body_head_fixed_point(BH_A, BH_B, HEAD, stepsize=0.1,
                                            body_steps=Q if name == "FedRep" else 1)
    assert np.abs(res.client_x[0, -1] - wrong).max() > 1e-3  # the split of the Q steps shows


@pytest.mark.parametrize("make", [lambda: A.FedRep(HEAD, head_steps=1),
                                  lambda: A.IFCA(2, offsets=[[-1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])],
                         ids=["FedRep", "IFCA"])
def test_mask_and_gather_agree_with_partial_participation(make):
    """S = 2 of 4 clients: mask and gather make the same draws and keep the same client
    states (FedRep's heads; IFCA's choices among its cluster models), so the models and
    every client's loss agree to rounding."""
    kw = dict(algorithm=make(), local_steps=2, stepsize=0.1, rounds=20, x0=np.ones(3),
              trials=2, key=jax.random.key(3), record_every=5, record_clients=True,
              num_sampled=2)
    mask = fa.simulate(BODY_HEAD, mode="mask", **kw)
    gather = fa.simulate(BODY_HEAD, mode="gather", **kw)
    np.testing.assert_allclose(mask.x, gather.x, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(mask.client_loss, gather.client_loss, rtol=1e-12, atol=1e-14)


def test_head_mask_follows_from_models_parameter_order():
    """head_mask of an equinox MLP's last layer marks exactly the coordinates of x that
    ``fa.problems.EquinoxModel.unravel`` puts into that layer, by a function or a path."""
    mlp = eqx.nn.MLP(3, 2, width_size=4, depth=1, key=jax.random.key(0))
    model = fa.problems.EquinoxModel.of(mlp, fa.problems.cross_entropy, 3, 2)
    mask = A.head_mask(mlp, lambda m: m.layers[-1])
    assert mask.shape == (model.dim,) and mask.sum() == 4 * 2 + 2
    x = jnp.arange(model.dim, dtype=jnp.float64)
    last = model.unravel(x).layers[-1]
    np.testing.assert_array_equal(np.sort(np.concatenate([np.ravel(last.weight),
                                                          np.ravel(last.bias)])),
                                  np.asarray(x)[mask])
    np.testing.assert_array_equal(A.head_mask(mlp, ".layers[1]"), mask)
    assert [p for p, _ in A.parameter_paths(mlp)][:2] == [".layers[0].weight", ".layers[0].bias"]
    with pytest.raises(ValueError, match="no parameter's path") as e:
        A.head_mask(mlp, ".layers[7]")
    assert one_line(e)


# -------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("make, match", [
    (lambda: A.QFFL(-0.5, lipschitz=1.0), r"q \(q-FFL's exponent\) must be >= 0"),
    (lambda: A.QFFL(1.0, lipschitz=0.0), r"lipschitz \(q-FFL's L\) must be > 0"),
    (lambda: A.AFL(0.0, num_clients=3), r"lambda_stepsize \(gamma_lambda\) must be > 0"),
    (lambda: A.AFL(-1.0, num_clients=3), r"lambda_stepsize \(gamma_lambda\) must be > 0"),
    (lambda: A.AFL(0.1, num_clients=2, weights=[0.7, 0.7]), r"weights \(lambda_0\) must lie"),
    (lambda: A.IFCA(0, offsets=np.zeros((0, 1))), r"k \(IFCA's clusters\) must be"),
    (lambda: A.IFCA(2, offsets=np.zeros((3, 1))), r"offsets must have shape \(k=2, d\)"),
    (lambda: A.FedPer([True, True]), r"at least one must be shared"),
    (lambda: A.FedRep([True, True, True], head_steps=1), r"at least one must be shared"),
    (lambda: A.FedRep([False, True], head_steps=-1), r"head_steps \(tau_h\) must be an integer"),
], ids=["q<0", "L=0", "gamma=0", "gamma<0", "lambda0", "k=0", "offsets", "FedPer-head",
        "FedRep-head", "head_steps"])
def test_bad_input_one_line(make, match):
    with pytest.raises(ValueError, match=match) as e:
        make()
    assert one_line(e)


def test_bad_input_put_in_by_tree_at_and_at_run_time():
    """A value put in with eqx.tree_at gets the constructor's error when the run is built;
    k > n, a head partition leaving no shared parameter and tau_h >= Q are one line each."""
    kw = dict(local_steps=2, stepsize=0.1, rounds=2, x0=np.zeros(3), key=jax.random.key(0))
    bad = [
        (eqx.tree_at(lambda a: a.q, A.QFFL(1.0, 1.0), np.float64(-1.0)), "q-FFL's exponent"),
        (eqx.tree_at(lambda a: a.lambda_stepsize, A.AFL(0.1, 4), np.float64(0.0)),
         "lambda_stepsize"),
        (eqx.tree_at(lambda a: a.head, A.FedPer(HEAD), np.ones(3, bool)), "must be shared"),
        (A.IFCA(5, offsets=np.zeros((5, 3))), r"k \(5 clusters\) must be at most the number "
                                              r"of clients \(n=4\)"),
        (A.FedRep(HEAD, head_steps=2), r"head_steps \(tau_h=2\) must be below"),
        (A.AFL(0.1, num_clients=3), r"num_clients \(3\) must be the problem's n=4"),
    ]
    for alg, match in bad:
        with pytest.raises(ValueError, match=match) as e:
            fa.simulate(BODY_HEAD, algorithm=alg, **kw)
        assert one_line(e), str(e.value)


# --------------------------------------- the closed forms against plain NumPy iterations


def _local(a, b, x, steps, alpha):
    """``steps`` exact gradient steps on a/2 ||x - b||^2 from x."""
    for _ in range(steps):
        x = x - alpha * a * (x - b)
    return x


def test_closed_forms_against_numpy_iterations():
    """Each closed form of fa.theory against the papers' updates iterated in NumPy (no
    package code): q-FedAvg (q = 2, Q = 3), AFL's projected descent-ascent (Q = 3, with
    floors), IFCA's model averaging, FedRep's split steps."""
    a, b, Q, alpha = np.array([1.0, 3.0]), np.array([[0.0, 1.0], [2.0, -1.0]]), 3, 0.1
    w, L, q = np.ones(2), 1 / alpha, 2.0
    for _ in range(500):
        F = a / 2 * ((w - b) ** 2).sum(1)
        dw = [L * (w - _local(a[k], b[k], w, Q, alpha)) for k in range(2)]
        h = sum(q * F[k] ** (q - 1) * dw[k] @ dw[k] + L * F[k] ** q for k in range(2))
        w = w - sum(F[k] ** q * dw[k] for k in range(2)) / h
    np.testing.assert_allclose(w, fa.theory.qffl_two_clients(a, b, q, local_steps=Q,
                                                             stepsize=alpha), atol=1e-12)
    e, x, lam = np.array([0.0, 0.5]), np.ones(2), np.array([0.5, 0.5])
    for _ in range(1000):
        F = a / 2 * ((x - b) ** 2).sum(1) + e
        x = x + sum(lam[k] * (_local(a[k], b[k], x, Q, alpha) - x) for k in range(2))
        v = lam + 0.02 * F  # two weights: the projection onto the simplex by hand
        lam = np.clip(np.array([v[0] - v[1] + 1, v[1] - v[0] + 1]) / 2, 0, 1)
    m = fa.theory.afl_minimax(a, b, e, local_steps=Q, stepsize=alpha)
    np.testing.assert_allclose(np.r_[x, lam], np.r_[m.x, m.weights], atol=1e-12)
    models = np.array([[-1.0, 0.0], [1.0, 0.0]])
    for _ in range(500):
        pick = [np.argmin([IF_A[i] / 2 * ((m_ - IF_B[i]) ** 2).sum() for m_ in models])
                for i in range(6)]
        models = np.array([np.mean([_local(IF_A[i], IF_B[i], models[j], 4, alpha)
                                    for i in range(6) if pick[i] == j], axis=0)
                           for j in range(2)])
    np.testing.assert_allclose(models, fa.theory.ifca_fixed_point(
        IF_A, IF_B, IF_TRUE, stepsize=alpha, local_steps=4).models, atol=1e-12)
    x, heads = np.zeros(3), np.zeros((4, 3))
    for _ in range(500):
        ys = []
        for i in range(4):
            z = np.where(HEAD, _local(BH_A[i], BH_B[i], np.where(HEAD, heads[i], x), 2, alpha), x)
            heads[i] = z
            ys.append(np.where(HEAD, z, _local(BH_A[i], BH_B[i], z, 2, alpha)))  # body steps
        x = np.where(HEAD, x, np.mean(ys, axis=0))
    np.testing.assert_allclose(np.where(HEAD, heads, x), fa.theory.body_head_fixed_point(
        BH_A, BH_B, HEAD, stepsize=alpha, body_steps=2), atol=1e-12)
