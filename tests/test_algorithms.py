"""The algorithm interface: FedAvg, FedProx, SCAFFOLD and FedOpt as values.

Contracts: Algorithm 1 through the interface is Algorithm 1 bit for bit; mask and gather
agree bit for bit for every algorithm on the paper's problems; every algorithm agrees in
distribution with the independent NumPy implementation in reference_algorithms.py;
SCAFFOLD with one client is SGD; a new hyperparameter value compiles nothing; bad input
is a one-line error naming the parameter.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import fedjax_abc as fa
import reference_algorithms as ra
import reference_numpy as ref
from fedjax_abc._engine import _round
from fedjax_abc._engine._random import stream_words
from fedjax_abc.algorithms import FedAvg, FedOpt, FedProx, Scaffold
from conftest import count_compilations


@pytest.fixture(scope="module")
def p27():
    return fa.problems.huber_offsets(jax.random.key(0), n=40, d_max=20.0)


@pytest.fixture(scope="module")
def quad():
    return fa.problems.quadratics(jax.random.key(3), n=8, d=5, C=1.0, D=0.1)


def _kw(p, **over):
    kw = dict(num_sampled=4, local_steps=5, stepsize=0.02, rounds=60, x0=np.asarray(p.x_star) + 3.0,
              trials=24, key=jax.random.key(7), record_every=20)
    kw.update(over)
    return kw


# ------------------------------------------------------------- Algorithm 1, bit for bit


@pytest.mark.parametrize("mode", ["mask", "gather"])
@pytest.mark.parametrize("algorithm", [FedAvg(), FedProx(mu=0.0)], ids=["FedAvg()", "FedProx(0)"])
def test_algorithm1_through_the_interface_bit_for_bit(p27, quad, mode, algorithm):
    for p in (p27, quad):
        kw = _kw(p, mode=mode)
        base = fa.simulate(p, **kw)
        res = fa.simulate(p, algorithm=algorithm, **kw)
        np.testing.assert_array_equal(res.x, base.x)
        np.testing.assert_array_equal(res.gap, base.gap)


@pytest.mark.parametrize("mode", ["mask", "gather"])
def test_fedopt_sgd_one_is_algorithm1_to_rounding(p27, quad, mode):
    for p in (p27, quad):
        kw = _kw(p, mode=mode)
        base = fa.simulate(p, **kw)
        res = fa.simulate(p, algorithm=FedOpt(optax.sgd(1.0)), **kw)
        np.testing.assert_allclose(res.x, base.x, rtol=1e-13, atol=1e-13)


def test_fedavg_round_takes_an_algorithm(p27):
    x = jnp.asarray(p27.x_star) + 2.0
    args = (p27, p27.oracle, fa.UniformWithoutReplacement(4), x, 3, 0.05, jax.random.key(1))
    plain = fa.fedavg_round(*args, local_steps=5)
    eta2 = fa.fedavg_round(*args, local_steps=5, algorithm=FedAvg(2.0))
    np.testing.assert_allclose(eta2, x + 2.0 * (plain - x), rtol=1e-14)


# --------------------------------------------------------- mask == gather, every algorithm

ALGORITHMS = {
    "FedAvg(2)": FedAvg(server_stepsize=2.0),
    "FedProx(0.5)": FedProx(mu=0.5),
    "Scaffold()": Scaffold(),
    "Scaffold(0.5)": Scaffold(server_stepsize=0.5),
    "FedAdam": FedOpt(optax.adam(0.3)),
    "FedAvgM": FedOpt(optax.sgd(0.5, momentum=0.9)),
    "Mime(0.5)": fa.algorithms.Mime(beta=0.5),  # a first communication in the round
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow)  # 7-9 s each
                                  if n in ("Scaffold()", "FedAdam", "FedAvgM") else n
                                  for n in ALGORITHMS])
def test_mask_and_gather_agree_bit_for_bit(p27, name):
    for sampler in (fa.UniformWithoutReplacement(4), fa.Bernoulli(0.2)):
        kw = _kw(p27, num_sampled=None, sampler=sampler)
        a = fa.simulate(p27, algorithm=ALGORITHMS[name], mode="mask", **kw)
        b = fa.simulate(p27, algorithm=ALGORITHMS[name], mode="gather", **kw)
        np.testing.assert_array_equal(a.x, b.x)
        assert np.all(np.isfinite(a.x))


def test_algorithms_differ_from_fedavg(p27):
    """The mask == gather checks compare runs that really use the algorithm."""
    kw = _kw(p27)
    base = fa.simulate(p27, **kw).x_final
    for name, alg in ALGORITHMS.items():
        assert np.abs(fa.simulate(p27, algorithm=alg, **kw).x_final - base).max() > 1e-6, name


# ------------------------------------------------- in distribution, against plain NumPy

REFERENCE = {
    "FedAvg(2)": (FedAvg(server_stepsize=2.0), ra.FedAvg(server_lr=2.0)),
    "FedProx(1)": (FedProx(mu=1.0), ra.FedProx(mu=1.0)),
    "Scaffold()": (Scaffold(), ra.Scaffold()),
    "Scaffold(0.7)": (Scaffold(server_stepsize=0.7), ra.Scaffold(server_lr=0.7)),
    "FedAvgM": (FedOpt(optax.sgd(0.5, momentum=0.8)), ra.FedOpt(ra.sgd(0.5, momentum=0.8))),
    "FedAdam": (FedOpt(optax.adam(0.2)), ra.FedOpt(ra.adam(0.2))),
    "FedAdagrad": (FedOpt(optax.adagrad(0.3)), ra.FedOpt(ra.adagrad(0.3))),
    "FedYogi": (FedOpt(optax.yogi(0.2)), ra.FedOpt(ra.yogi(0.2))),
}
TRIALS = 1000


def _reference_problem(p):
    if p.dim == 1:
        return ref.HuberOffsets(np.asarray(p.params)[:, 0])
    a, c = (np.asarray(v) for v in p.params)
    return ref.Quadratics(a, c, float(p.oracle.C), float(p.oracle.D))


def _gap_and_gns(rp, x, f_star):
    """f(x) - f* and ||grad f(x)||^2 per trial, from the reference problem's formulas."""
    idx = np.arange(rp.n)
    xs = np.repeat(x[:, None, :], rp.n, axis=1)  # (trials, n, d)
    vals = rp.values(np.broadcast_to(idx, xs.shape[:2]), xs).mean(1)
    grad = rp.grads(np.broadcast_to(idx, xs.shape[:2]), xs).mean(1)
    return vals - f_star, np.sum(grad ** 2, axis=1)


SETTINGS = {"p27": dict(S=4, Q=5, alpha=0.05, T=20, shift=4.0),
            "quad": dict(S=3, Q=4, alpha=0.1, T=30, shift=1.5)}


@pytest.mark.parametrize("problem_name", ["p27", "quad"])
@pytest.mark.parametrize("name", list(REFERENCE))
def test_agrees_in_distribution_with_numpy(request, problem_name, name):
    p = request.getfixturevalue(problem_name)
    s = SETTINGS[problem_name]
    alg, ref_alg = REFERENCE[name]
    x0 = np.asarray(p.x_star) + s["shift"]
    res = fa.simulate(p, algorithm=alg, num_sampled=s["S"], local_steps=s["Q"], stepsize=s["alpha"],
                      rounds=s["T"], x0=x0, trials=TRIALS, key=jax.random.key(11),
                      record_every=s["T"], mode="gather", record_x=False)
    rp = _reference_problem(p)
    out = ra.run(rp, ref_alg, x0, S=s["S"], Q=s["Q"], stepsizes=np.full(s["T"], s["alpha"]),
                 trials=TRIALS, rng=np.random.default_rng(5))
    gap, gns = _gap_and_gns(rp, out["x"], float(p.f_star))
    ref.assert_same_distribution(res.gap[:, -1], gap, what=f"{name} gap")
    ref.assert_same_distribution(res.grad_norm_sq[:, -1], gns, what=f"{name} ||grad f||^2")


def test_the_distribution_check_has_power(p27):
    """Another server stepsize in the reference is rejected: the comparison can fail."""
    s = SETTINGS["p27"]
    x0 = np.asarray(p27.x_star) + s["shift"]
    res = fa.simulate(p27, algorithm=FedAvg(2.0), num_sampled=s["S"], local_steps=s["Q"],
                      stepsize=s["alpha"], rounds=s["T"], x0=x0, trials=TRIALS,
                      key=jax.random.key(11), record_every=s["T"], mode="gather")
    rp = _reference_problem(p27)
    out = ra.run(rp, ra.FedAvg(server_lr=1.5), x0, S=s["S"], Q=s["Q"],
                 stepsizes=np.full(s["T"], s["alpha"]), trials=TRIALS, rng=np.random.default_rng(5))
    gap, _ = _gap_and_gns(rp, out["x"], float(p27.f_star))
    with pytest.raises(AssertionError):
        ref.assert_same_distribution(res.gap[:, -1], gap)


# ------------------------------------------------------------ SCAFFOLD: one client is SGD


def test_scaffold_with_one_client_is_sgd():
    p = fa.make_problem(lambda c, x: 0.5 * jnp.sum(c[0] * (x - c[1]) ** 2),
                        jnp.array([[[1.0, 2.0, 0.5], [1.0, -2.0, 3.0]]]), fa.ExactOracle(), dim=3,
                        local_minima=[0.0], f_star=0.0, x_star=[1.0, -2.0, 3.0])
    Q, T, alpha = 4, 25, 0.1
    x0 = np.array([5.0, 4.0, -3.0])
    res = fa.simulate(p, algorithm=Scaffold(), local_steps=Q, stepsize=alpha, rounds=T, x0=x0,
                      key=jax.random.key(0), record_every=1)
    a, c = np.array([1.0, 2.0, 0.5]), np.array([1.0, -2.0, 3.0])
    x, path = x0.copy(), [x0.copy()]
    for _ in range(T):
        for _ in range(Q):
            x = x - alpha * a * (x - c)
        path.append(x.copy())
    np.testing.assert_allclose(res.x[0], np.array(path), rtol=1e-12, atol=1e-12)


def test_scaffold_client_states_change_only_for_sampled_clients(p27):
    x = jnp.asarray(p27.x_star)[None] + 2.0
    alg, n, sampler = Scaffold(), p27.num_clients, fa.UniformWithoutReplacement(4)
    state = _round.init_state(alg, x, n)
    k_t = jax.random.key_data(jax.random.key(2))[:, None]
    idx, _ = sampler.from_words(stream_words(k_t[:, 0], 0, sampler.num_words(n)), n)
    for mode in ("mask", "gather"):
        nxt = _round.batched_round(_round.Parts(p27, p27.oracle, sampler, alg, None, 5),
                                   _round.Program(mode), state, k_t, 0.05)
        changed = np.flatnonzero(np.asarray(nxt.clients)[:, 0, 0] != 0)
        assert sorted(changed.tolist()) == sorted(np.asarray(idx).tolist()), mode
        assert np.all(np.asarray(nxt.server.c) != 0)


# --------------------------------------------------------------------- no recompilation


def test_new_hyperparameters_compile_nothing(p27):
    kw = _kw(p27, rounds=13, record_every=13, trials=3, local_steps=3)  # shapes no other test uses
    with count_compilations() as first:
        a = fa.simulate(p27, algorithm=FedProx(mu=0.1), **kw)
    assert first
    with count_compilations() as later:
        b = fa.simulate(p27, algorithm=FedProx(mu=0.7), **kw)
    assert later == [], f"recompiled: {later}"
    assert np.all(a.x_final != b.x_final)


# ------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("make, match", [
    (lambda: FedProx(mu=-0.1), r"mu must be >= 0"),
    (lambda: FedProx(mu=float("nan")), r"mu must be finite"),
    (lambda: FedAvg(server_stepsize=0.0), r"server_stepsize \(eta_g\) must be > 0"),
    (lambda: Scaffold(server_stepsize=-1.0), r"server_stepsize \(eta_g\) must be > 0"),
    (lambda: FedAvg(server_stepsize="fast"), r"server_stepsize \(eta_g\) must be a number"),
    (lambda: FedOpt(optax.adam), r"server_optimizer must be an optax GradientTransformation"),
    (lambda: FedOpt("adam"), r"server_optimizer must be an optax GradientTransformation"),
])
def test_bad_hyperparameters_are_one_line_errors(make, match):
    with pytest.raises(ValueError, match=match) as err:
        make()
    assert "\n" not in str(err.value)


def test_simulate_rejects_bad_algorithms(p27):
    with pytest.raises(ValueError, match=r"algorithm must be a fedjax_abc.algorithms.AbstractAlgorithm"):
        fa.simulate(p27, algorithm=optax.adam(0.1), **_kw(p27))
    with pytest.raises(ValueError, match=r"Scaffold keeps client states: .*not WithReplacement"):
        fa.simulate(p27, algorithm=Scaffold(), **_kw(p27, num_sampled=None,
                                                     sampler=fa.WithReplacement(4)))
