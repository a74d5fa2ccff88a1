"""FedNova, FedDyn, FedExP and the named FedOpt constructors: rounds computed by hand from
the papers' pseudo-code, and each paper's headline behaviour against a closed form.

(Agreement in distribution with independent NumPy implementations: test_zoo_reference.py.)
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import fedjax_abc as fa
from test_engine_local_work import quadratics
from conftest import count_backend_compilations as count_compilations

A = fa.algorithms
TWO = dict(a=[1.0, 2.0], b=[0.0, 3.0])  # f_1 = (x)^2 / 2, f_2 = (x - 3)^2; x* = 2


def rounds(alg, T, local_steps=1, a=TWO["a"], b=TWO["b"], x0=1.0, alpha=0.1, **kw):
    """x_0, ..., x_T of one trial with exact gradients (full participation by default)."""
    res = fa.simulate(quadratics(a, b), algorithm=alg, local_steps=local_steps,
                      stepsize=alpha, rounds=T, x0=[x0], trials=1, key=jax.random.key(0),
                      record_every=1, **kw)
    return res.x[0, :, 0]


# --------------------------------------------------------------- rounds by hand


def test_fednova_one_round_by_hand():
    """K = (1, 2), x0 = 1, alpha = 0.1. Client 1: y = 0.9, d = 0.1. Client 2: y = 1.4, 1.72,
    d = -0.72 / 2 = -0.36. tau_eff = 1.5, x_1 = 1 - 1.5 (0.1 - 0.36) / 2 = 1.195.
    Momentum 0.5: client 2's m = -4, -2 - 3.2 = -5.2, y = 1.4, 1.92, ||a||_1 = 1.5 + 1 = 2.5,
    d = -0.368; tau_eff = 1.75, x_1 = 1 + 1.75 * 0.134 = 1.2345."""
    np.testing.assert_allclose(rounds(A.FedNova(), 1, [1, 2])[1], 1.195, rtol=1e-14)
    np.testing.assert_allclose(rounds(A.FedNova(momentum=0.5), 1, [1, 2])[1], 1.2345,
                               rtol=1e-14)
    np.testing.assert_allclose(A.momentum_norm(2, 0.5), 2.5, rtol=1e-15)
    np.testing.assert_allclose(A.momentum_norm(7, 0.0), 7.0, rtol=0)


def test_feddyn_two_rounds_by_hand():
    """a = 0.5, Q = 1. Round 1: y = (0.9, 1.4), g = (0.05, -0.2), h = -0.25 * 0.3 = -0.075,
    x_1 = 1.15 + 0.15 = 1.3. Round 2: y = 1.3 - 0.1 * (1.3 - 0.05) = 1.175 and
    1.3 - 0.1 * (-3.4 + 0.2) = 1.62, h = -0.075 - 0.25 * 0.195 = -0.12375,
    x_2 = 1.3975 + 0.2475 = 1.645."""
    np.testing.assert_allclose(rounds(A.FedDyn(alpha=0.5), 2)[1:], [1.3, 1.645], rtol=1e-14)


def test_fedexp_one_round_by_hand():
    """Delta = (0.1, -0.4): mean -0.15, mean square 0.085; eta = 0.085 / (2 (0.0225 + 1e-3))
    = 1.80851..., x_1 = 1 + 0.15 eta."""
    eta = 0.085 / (2 * (0.0225 + 1e-3))
    np.testing.assert_allclose(rounds(A.FedExP(eps=1e-3), 1)[1], 1 + 0.15 * eta, rtol=1e-14)
    # a round whose clients agree takes the plain step: eta = max(1, 1/2 ...) = 1
    np.testing.assert_allclose(rounds(A.FedExP(), 1, b=[3.0, 3.0], a=[2.0, 2.0])[1], 1.4,
                               rtol=1e-14)


def test_fedopt_constructors_first_round_by_hand():
    """The pseudo-gradient of the first round is x_0 - mean y = -0.15. FedAvgM: x_1 = x_0 -
    lr (-0.15). FedAdam (bias-corrected first step): x_1 = x_0 + lr 0.15 / (0.15 + eps).
    FedAdagrad (optax, accumulator 0.1): x_1 = x_0 + lr 0.15 / sqrt(0.1 + 0.15^2 + eps)."""
    np.testing.assert_allclose(rounds(A.FedAvgM(0.5, momentum=0.9), 1)[1], 1.075, rtol=1e-14)
    np.testing.assert_allclose(rounds(A.FedAdam(0.1, eps=1e-3), 1)[1], 1 + 0.015 / 0.151,
                               rtol=1e-12)
    np.testing.assert_allclose(rounds(A.FedAdagrad(0.1, eps=1e-3), 1)[1],
                               1 + 0.015 / np.sqrt(0.1 + 0.0225 + 1e-3), rtol=1e-12)
    x = rounds(A.FedYogi(0.1), 1)[1]
    assert 1.0 < x <= 1.1 + 1e-12  # Yogi's first step moves by at most lr toward x*


def test_scaffnew_with_p_one_is_gradient_descent_by_hand():
    """p = 1: one step a round, h_i = 0 first. Round 1: y = (0.9, 1.4), x_1 = 1.15. Round
    2: h = 10 (1.15 - y) = (2.5, -2.5), y = (1.285, 1.27), messages y - 0.1 h = (1.035,
    1.52), x_2 = 1.2775 = x_1 - 0.1 f'(x_1), gradient descent."""
    alg = A.Scaffnew(p=1.0)
    np.testing.assert_allclose(rounds(alg, 2, alg.local_steps(5))[1:], [1.15, 1.2775],
                               rtol=1e-14)


def test_mimelite_two_rounds_by_hand():
    """beta = 0.5, Q = 2, m = 0. Round 1: client 1 d = 0.5, 0.475, y = 0.9025; client 2
    d = -2, -1.8, y = 1.38; x_1 = 1.14125, m = 0.5 (1 - 4) / 2 = -0.75. Round 2: client 1
    y = 1.1216875, 1.103103125; client 2 y = 1.364625, 1.5656625; x_2 = 1.3343828125."""
    np.testing.assert_allclose(rounds(A.MimeLite(beta=0.5), 2, 2)[1:],
                               [1.14125, 1.3343828125], rtol=1e-14)


def test_mime_two_rounds_by_hand():
    """beta = 0.5, Q = 2, exact gradients, x0 = 1. Round 1: c = (1 - 4) / 2 = -1.5, m = 0;
    both clients' first step y = 1 - 0.1 * 0.5 * (-1.5) = 1.075; client 1's second
    g = 1.075 - 1 - 1.5 = -1.425, y = 1.14625; client 2's g = -3.85 + 4 - 1.5 = -1.35,
    y = 1.1425; x_1 = 1.144375, m = -0.75. Round 2: c = (1.144375 - 3.71125) / 2 =
    -1.2834375; y = 1.246046875 after one step, then 1.34263515625 and 1.33755156250;
    x_2 = 1.340093359375."""
    np.testing.assert_allclose(rounds(A.Mime(beta=0.5), 2, 2)[1:],
                               [1.144375, 1.340093359375], rtol=1e-14)
    for mode in ("mask", "gather"):  # the first communication in both modes
        np.testing.assert_allclose(rounds(A.Mime(beta=0.5), 2, 2, mode=mode)[1:],
                                   [1.144375, 1.340093359375], rtol=1e-14)


class _ProbeState(fa.algorithms.AbstractServerState):
    x: jax.Array
    c: jax.Array


class _Probe(fa.algorithms.AbstractAlgorithm):
    """A first communication that reads the client state: k_i grad f_i(x_t), k_i the
    client's rounds so far plus one; every local step moves by -alpha c."""

    reads_scale = False

    def init(self, x0):
        return _ProbeState(x0, x0 * 0)

    def init_client(self, x0):
        return x0[0] * 0 + 1

    def query(self, server, client, full_gradient):
        return client * full_gradient(server.x)

    def receive(self, server, mean_query):
        return _ProbeState(server.x, mean_query)

    def client_init(self, server, client):
        return ()

    def local_step(self, server, y, local, gradient, stepsize):
        return y - stepsize * server.c, local

    def client_final(self, server, client, y, local, info):
        return y, client + 1

    def server_update(self, server, mean_message, info):
        return _ProbeState(mean_message, server.c)


def test_a_first_communication_reads_the_client_state_by_hand():
    """x0 = 1, one step of 0.1: c = (1 - 4) / 2 = -1.5, x_1 = 1.15; then k = 2:
    c = 2 (1.15 - 3.7) / 2 = -2.55, x_2 = 1.405. With S = 1 of 2 mask and gather agree."""
    for mode in ("mask", "gather"):
        np.testing.assert_allclose(rounds(_Probe(), 2, 1, mode=mode)[1:], [1.15, 1.405],
                                   rtol=1e-14)
    one = [rounds(_Probe(), 6, 1, mode=m, num_sampled=1) for m in ("mask", "gather")]
    np.testing.assert_array_equal(one[0], one[1])


# ------------------------------------------------------------ headline behaviours

QA = np.array([1.0, 2.0, 0.5, 1.5, 3.0])
QB = np.array([-2.0, 0.0, 1.0, 3.0, 5.0])
STEPS = np.array([1, 2, 5, 10, 3])


def test_fednova_removes_the_objective_inconsistency():
    """Exact gradients, full participation, client i takes K_i steps: y_i = b_i + (1 -
    alpha a_i)^K_i (x - b_i), c_i = 1 - (1 - alpha a_i)^K_i. FedAvg's fixed point is
    sum c_i b_i / sum c_i (weighted by the steps); FedNova's sum (c_i / K_i) b_i /
    sum (c_i / K_i), which tends to x* = sum a_i b_i / sum a_i as alpha -> 0 (its error is
    O(alpha); FedAvg's is not)."""
    x_star = np.sum(QA * QB) / np.sum(QA)
    for alpha in (0.05, 0.005):
        c = 1 - (1 - alpha * QA) ** STEPS
        fedavg_fp = np.sum(c * QB) / np.sum(c)
        fednova_fp = np.sum(c / STEPS * QB) / np.sum(c / STEPS)
        T = int(60 / alpha)
        kw = dict(a=QA, b=QB, x0=4.0, alpha=alpha)
        fedavg = rounds(A.FedAvg(), T, list(STEPS), **kw)[-1]
        fednova = rounds(A.FedNova(), T, list(STEPS), **kw)[-1]
        np.testing.assert_allclose(fedavg, fedavg_fp, rtol=1e-9)
        np.testing.assert_allclose(fednova, fednova_fp, rtol=1e-9)
        assert abs(fednova - x_star) < abs(fedavg - x_star) / 2, (alpha, fednova, fedavg)
    assert abs(fednova - x_star) < 0.03 and abs(fedavg - x_star) > 0.5  # alpha = 0.005


def test_feddyn_reaches_x_star_where_fedavg_stalls():
    """Exact gradients, Q = 5: FedAvg stops at its biased fixed point, FedDyn at x* (full
    participation, and S = 2 of 5 with the client states carried)."""
    x_star = np.sum(QA * QB) / np.sum(QA)
    kw = dict(a=QA, b=QB, x0=4.0, alpha=0.05)
    fedavg = rounds(A.FedAvg(), 3000, 5, **kw)[-1]
    assert abs(fedavg - x_star) > 0.1
    for extra in ({}, {"num_sampled": 2}):
        x = rounds(A.FedDyn(alpha=0.5), 3000, 5, **kw, **extra)[-1]
        assert abs(x - x_star) < 1e-9, (extra, x)


def coordinate_clients(n=4):
    """Client i owns coordinate i: f_i(x) = (x_i - 1)^2 / 2 in R^n; a common minimiser x* = 1
    (an interpolating problem, the setting of FedExP's analysis)."""
    import jax.numpy as jnp

    return fa.make_problem(lambda e, x: 0.5 * jnp.sum(e * (x - 1.0) ** 2), jnp.eye(n),
                           fa.ExactOracle(), local_minima=np.zeros(n), f_star=0.0,
                           x_star=np.ones(n), dim=n, name="coordinates")


def test_fedexp_extrapolates_on_a_consistent_problem():
    """Orthogonal client updates of equal norm r: mean ||Delta_i||^2 = r^2, ||Delta_bar||^2 =
    r^2 / n, so eta_g = n / 2 (up to eps): FedExP moves each coordinate n/2 times as far as
    FedAvg in a round, x_{t+1} - 1 = (1 - (n/2) c / n) (x_t - 1) against (1 - c / n),
    c = 1 - (1 - alpha)^Q. FedAvgM reaches FedAvg's fixed point on the quadratics."""
    n, alpha, Q, T = 4, 0.1, 2, 20
    p = coordinate_clients(n)
    kw = dict(local_steps=Q, stepsize=alpha, rounds=T, x0=np.full(n, 3.0), trials=1,
              key=jax.random.key(0), record_every=1)
    fedavg = fa.simulate(p, algorithm=A.FedAvg(), **kw).x[0, :, 0] - 1
    fedexp = fa.simulate(p, algorithm=A.FedExP(eps=1e-12), **kw).x[0, :, 0] - 1
    c = 1 - (1 - alpha) ** Q
    np.testing.assert_allclose(fedavg, 2.0 * (1 - c / n) ** np.arange(T + 1), rtol=1e-12)
    np.testing.assert_allclose(fedexp, 2.0 * (1 - c / 2) ** np.arange(T + 1), rtol=1e-9)
    assert fedexp[-1] < fedavg[-1] / 2
    kw = dict(a=QA, b=QB, x0=4.0, alpha=0.05)
    np.testing.assert_allclose(rounds(A.FedAvgM(0.5), 4000, 3, **kw)[-1],
                               rounds(A.FedAvg(), 4000, 3, **kw)[-1], rtol=1e-9)


def test_scaffnew_reaches_x_star_with_one_coin_for_all_clients():
    """Exact gradients, Geometric(p) iterations between communications: Scaffnew ends at x*,
    FedAvg on the same local work does not. With every a_i = 1 FedAvg's round reads the
    round's K off the path, (x_{t+1} - b_bar) = (1 - alpha)^K (x_t - b_bar): an integer K
    shared by all clients (not with a draw per client, the negative control) whose mean
    over 1000 rounds is 1/p within 4 s.e."""
    p_comm = 0.25
    alg = A.Scaffnew(p=p_comm)
    kw = dict(a=QA, b=QB, x0=4.0, alpha=0.05)
    x_star = np.sum(QA * QB) / np.sum(QA)
    assert abs(rounds(alg, 2000, alg.local_steps(200), **kw)[-1] - x_star) < 1e-10
    assert abs(rounds(A.FedAvg(), 2000, alg.local_steps(200), **kw)[-1] - x_star) > 0.05
    b = np.linspace(-1.0, 1.0, 5)
    drawn = {}
    for shared in (True, False):
        law = fa.GeometricSteps(p_comm, 60, shared=shared)
        path = rounds(A.FedAvg(), 1000, law, a=np.ones(5), b=b, x0=1e6, alpha=0.002) - b.mean()
        drawn[shared] = np.log(path[1:] / path[:-1]) / np.log(1 - 0.002)
    assert np.allclose(drawn[True], np.round(drawn[True]), atol=1e-6)
    assert not np.allclose(drawn[False], np.round(drawn[False]), atol=1e-6)
    K = np.round(drawn[True])  # P(K = 60) = 0.75^59: the cut changes E[K] by < 1e-6
    assert abs(K.mean() - 1 / p_comm) < 4 * K.std(ddof=1) / np.sqrt(K.size)


def test_mimelite_with_one_step_is_centralized_momentum_sgd():
    """Full participation, Q = 1, exact gradients: m <- (1 - beta) f'(x) + beta m,
    x <- x - alpha m, computed here in NumPy for 50 rounds; FedAvgM's momentum (not
    averaged) follows another path (the comparison can fail)."""
    beta, alpha = 0.8, 0.05
    x, m, path = 4.0, 0.0, [4.0]
    for _ in range(50):
        m = (1 - beta) * np.mean(QA * (x - QB)) + beta * m
        x = x - alpha * m
        path.append(x)
    kw = dict(a=QA, b=QB, x0=4.0, alpha=alpha)
    np.testing.assert_allclose(rounds(A.MimeLite(beta=beta), 50, 1, **kw), path, rtol=1e-12)
    other = rounds(A.FedAvgM(1.0, momentum=beta), 50, 1, **kw)
    assert np.max(np.abs(other - path)) > 1e-2


def test_mime_reaches_x_star_where_fedavg_and_mimelite_stall():
    """Exact gradients, Q = 5: MIME's correction g_i(y) - g_i(x) + grad f(x) vanishes at
    x = x* for every client, so x* is its fixed point (full participation; with S = 2 of 5,
    c is the participants' mean and the iterates keep moving, within a band around x*).
    FedAvg stops at its biased fixed point sum c_i b_i / sum c_i, c_i = 1 - (1 - alpha
    a_i)^5, and MimeLite (without the correction) also stalls away from x*."""
    x_star = np.sum(QA * QB) / np.sum(QA)
    alpha = 0.05
    c = 1 - (1 - alpha * QA) ** 5
    biased = np.sum(c * QB) / np.sum(c)
    kw = dict(a=QA, b=QB, x0=4.0, alpha=alpha)
    np.testing.assert_allclose(rounds(A.FedAvg(), 2000, 5, **kw)[-1], biased, rtol=1e-10)
    lite = rounds(A.MimeLite(0.5), 2000, 5, **kw)
    assert abs(lite[-1] - lite[-2]) < 1e-12 and abs(lite[-1] - x_star) > 0.02
    np.testing.assert_allclose(rounds(A.Mime(0.5), 2000, 5, **kw)[-1], x_star, rtol=1e-10)
    assert abs(biased - x_star) > 0.1


def test_mime_with_one_step_is_centralized_momentum_gd():
    """Full participation, Q = 1, exact gradients: the correction cancels and MIME is
    m <- (1 - beta) f'(x) + beta m applied after the step x <- x - alpha ((1 - beta) f'(x)
    + beta m) with the old m, computed here in NumPy for 50 rounds."""
    beta, alpha = 0.8, 0.05
    x, m, path = 4.0, 0.0, [4.0]
    for _ in range(50):
        g = np.mean(QA * (x - QB))
        x = x - alpha * ((1 - beta) * g + beta * m)
        m = (1 - beta) * g + beta * m
        path.append(x)
    kw = dict(a=QA, b=QB, x0=4.0, alpha=alpha)
    np.testing.assert_allclose(rounds(A.Mime(beta=beta), 50, 1, **kw), path, rtol=1e-12)


# ------------------------------------------------------------------ as values


def test_client_state_algorithms_refuse_repeating_slots_in_one_line():
    p = quadratics(QA, QB)
    with pytest.raises(ValueError, match=r"^FedDyn keeps client states: it needs a sampler "
                                         r"whose slots are distinct clients, not "
                                         r"WithReplacement$"):
        fa.simulate(p, algorithm=A.FedDyn(), sampler=fa.WithReplacement(2), local_steps=2,
                    stepsize=0.1, rounds=3, x0=[1.0], trials=2, key=jax.random.key(0))


@pytest.mark.parametrize("alg, field, values", [
    (A.FedNova(), "momentum", [0.0, 0.5, 0.9]),
    (A.FedDyn(0.1), "alpha", [0.1, 0.3, 1.0]),
    (A.FedExP(), "eps", [1e-3, 1e-2, 1e-1]),
    (A.MimeLite(), "beta", [0.0, 0.5, 0.9]),
    (A.Mime(), "beta", [0.0, 0.5, 0.9]),
    (A.Scaffnew(0.5), "p", [0.5, 0.9, 1.0]),
])
def test_a_hyperparameter_sweep_compiles_once_per_shape(alg, field, values):
    p = fa.problems.huber_offsets(jax.random.key(0), n=6, d_max=10.0)
    kw = dict(algorithm=alg, num_sampled=3, local_steps=2, stepsize=1e-2, rounds=5,
              x0=p.x_star + 1.0, trials=2, key=jax.random.key(1), record_every=5)
    fa.sweep(p, grid={f"algorithm.{field}": values}, **kw)
    with count_compilations() as later:
        sw = fa.sweep(p, grid={f"algorithm.{field}": values[::-1]}, **kw)
    assert later == []
    import equinox as eqx
    one = eqx.tree_at(lambda a: getattr(a, field), alg, np.asarray(values[0], float))
    alone = fa.simulate(p, **dict(kw, algorithm=one))
    np.testing.assert_array_equal(sw.gap[-1], alone.gap)


@pytest.mark.parametrize("make, match", [
    (lambda: A.FedNova(momentum=1.0), r"momentum \(rho\) must be < 1"),
    (lambda: A.FedNova(momentum=-0.1), r"momentum \(rho\) must be >= 0"),
    (lambda: A.FedDyn(alpha=0.0), r"alpha \(FedDyn's a\) must be > 0"),
    (lambda: A.FedExP(eps=-1.0), r"eps must be > 0"),
    (lambda: A.Mime(beta=1.0), r"beta \(momentum\) must be < 1"),
    (lambda: A.FedAdam(server_lr=0.0), r"server_lr must be > 0"),
    (lambda: A.FedAdam(b1=1.0), r"b1 must be < 1"),
    (lambda: A.FedAvgM(momentum=1.5), r"momentum must be < 1"),
    (lambda: A.FedDyn("0.1"), r"alpha \(FedDyn's a\) must be a number, got '0.1'"),
    (lambda: A.FedOpt(__import__("optax").sgd(-1.0)),
     r"server_optimizer's first update of a pseudo-gradient of ones is 1: it must step "
     r"against it"),
])
def test_bad_hyperparameters_are_refused(make, match):
    with pytest.raises(ValueError, match=match) as e:
        make()
    assert "\n" not in str(e.value)
