"""The Gossip schedule (decentralised SGD) through the one driver.

- Pure consensus (a negligible stepsize after the first round): the node models follow
  X_{t+1} = W X_t exactly as NumPy's dense products say, and the consensus error's rate
  approaches lambda_2(W)^2; with random matchings the mean one-step contraction is the
  closed form (n - 2) / (2 (n - 1)) within 3 standard errors.
- The complete graph with uniform weights is FedAvg with full participation (to rounding).
- An independent NumPy reference (dense matrices, loops) agrees to rounding with noise,
  for each topology and both orders.
- Checkpoints, sweeps and trial independence hold as for synchronous rounds.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa
from fedjax_abc import decentral as dc
from reference_dsgd import dsgd, tracked


@pytest.fixture(scope="module")
def problem():
    return fa.problems.quadratics(jax.random.key(0), n=8, d=2)


def run(problem, schedule, **kw):
    base = dict(local_steps=2, stepsize=0.1, rounds=12, trials=3, key=jax.random.key(1),
                x0=jnp.ones(2), record_every=1, schedule=schedule, record_clients=True)
    base.update(kw)
    return fa.simulate(problem, **base)


def spread_then_consensus(T):
    """A large first step (the nodes part ways), then a stepsize of 1e-300, far below the
    models' rounding (a stepsize must be > 0): local steps leave them as they are, pure
    gossip."""
    return np.concatenate([[0.9], np.full(T - 1, 1e-300)])


@pytest.mark.parametrize("topology", [dc.Ring(), dc.Star(), dc.ErdosRenyi(0.5), dc.Complete()],
                         ids=["ring", "star", "erdos_renyi", "complete"])
def test_pure_consensus_is_the_matrix_power(problem, topology):
    T = 30
    res = run(problem, dc.Gossip(topology), rounds=T, stepsize=spread_then_consensus(T))
    for r in range(res.trials):
        X1 = res.client_x[r, 1]
        W = dc.Gossip(topology).round_matrix(problem.num_clients, jax.random.key(1), r)
        X = X1
        for t in range(2, T + 1):
            X = W @ X
            np.testing.assert_allclose(res.client_x[r, t], X, rtol=1e-11, atol=1e-13)
        bar = X1.mean(0)
        e = res.metrics["consensus"][r]
        np.testing.assert_allclose(e[1], np.mean(np.sum((X1 - bar) ** 2, 1)), rtol=1e-12)
        if isinstance(topology, (dc.Ring, dc.Star)):  # a gap: the rate is lambda_2^2
            lam2 = np.sort(np.abs(np.linalg.eigvalsh(W)))[-2]
            rate = (e[T] / e[T - 5]) ** (1 / 5)
            assert rate == pytest.approx(lam2 ** 2, rel=1e-3)
            assert rate < 1
    # x_bar does not move in pure gossip (W doubly stochastic): the gap is constant
    np.testing.assert_allclose(res.x[:, 2:], np.broadcast_to(res.x[:, 1:2], res.x[:, 2:].shape),
                               rtol=1e-12, atol=1e-14)


def test_random_matchings_contract_as_the_closed_form(problem):
    """E ||W X - x_bar||^2 = c ||X - x_bar||^2 for a uniform perfect matching on even n,
    c = (n - 2) / (2 (n - 1)): E[W^T W] = E[W] = I/2 + (J - I) / (2 (n - 1)) (a matched pair
    averages; each other node is i's partner with probability 1 / (n - 1))."""
    T, n = 2, problem.num_clients
    res = run(problem, dc.Gossip(dc.RandomMatching()), rounds=T, trials=1000,
              stepsize=spread_then_consensus(T), record_clients=False)
    e = res.metrics["consensus"]
    # given X_1, round 2's matching is independent of it: E[e_2 / e_1] = c exactly (later
    # rounds may reach exact consensus, 0 / 0)
    ratios = e[:, 2] / e[:, 1]
    mean, se = ratios.mean(), ratios.std(ddof=1) / np.sqrt(ratios.size)
    closed = (n - 2) / (2 * (n - 1))
    assert abs(mean - closed) < 3 * se
    assert abs(mean - 0.5) > 3 * se  # a wrong closed form (pairs of a fixed matching) fails


def test_complete_uniform_is_fedavg_with_full_participation(problem):
    gossip = run(problem, dc.Gossip(dc.Complete(), dc.UniformWeights()), record_clients=False)
    fedavg = fa.simulate(problem, local_steps=2, stepsize=0.1, rounds=12, trials=3,
                         key=jax.random.key(1), x0=jnp.ones(2), record_every=1)
    np.testing.assert_allclose(gossip.x, fedavg.x, rtol=1e-14, atol=1e-15)
    assert np.abs(gossip.metrics["consensus"]).max() < 1e-28


@pytest.mark.parametrize("topology,order", [(dc.Ring(), "atc"), (dc.Ring(), "cta"),
                                            (dc.ErdosRenyi(0.4), "atc"),
                                            (dc.Exponential(), "atc"),
                                            (dc.RandomMatching(), "cta")],
                         ids=["ring", "ring_cta", "erdos_renyi", "exponential", "matching"])
def test_numpy_reference_with_noise(problem, topology, order):
    T = 6
    res = run(problem, dc.Gossip(topology, order=order), rounds=T, trials=2)
    want = dsgd(problem, topology, None, rounds=T, local_steps=2, stepsize=0.1,
                x0=np.ones(2), trials=2, key=jax.random.key(1), order=order)
    np.testing.assert_allclose(res.client_x, want, rtol=1e-11, atol=1e-13)
    # a deliberately wrong reference (the other order) disagrees
    other = dsgd(problem, topology, None, rounds=2, local_steps=2, stepsize=0.1,
                 x0=np.ones(2), trials=1, key=jax.random.key(1),
                 order="cta" if order == "atc" else "atc")
    assert np.abs(res.client_x[0, 2] - other[0, 2]).max() > 1e-6


def test_gradient_tracking_reaches_the_optimum(problem):
    """With exact gradients, tracking takes every node to x* (linear convergence); plain
    D-SGD stops at a heterogeneity bias; with noise it agrees with NumPy's loop."""
    kw = dict(local_steps=1, stepsize=0.2, rounds=600, record_every=600, trials=1,
              oracle=fa.ExactOracle(), record_clients=True)
    tracked_run = run(problem, dc.Gossip(dc.Ring(), tracking=True), **kw)
    plain = run(problem, dc.Gossip(dc.Ring()), **kw)
    x_star = np.asarray(problem.x_star)
    assert np.abs(tracked_run.client_x[0, -1] - x_star).max() < 1e-10
    assert np.abs(plain.client_x[0, -1] - x_star).max() > 1e-4  # the bias tracking removes
    noisy = run(problem, dc.Gossip(dc.Ring(), tracking=True), local_steps=1, rounds=5,
                trials=2)
    want = tracked(problem, dc.Ring(), None, rounds=5, stepsize=0.1, x0=np.ones(2), trials=2,
                   key=jax.random.key(1))
    np.testing.assert_allclose(noisy.client_x, want, rtol=1e-11, atol=1e-13)
    with pytest.raises(ValueError, match="one local step"):
        run(problem, dc.Gossip(dc.Ring(), tracking=True))
    with pytest.raises(ValueError, match="every node"):
        run(problem, dc.Gossip(dc.Ring(), tracking=True), local_steps=1, num_sampled=3)
    with pytest.raises(ValueError, match="adapt-then-combine"):
        dc.Gossip(dc.Ring(), order="cta", tracking=True)


def test_trials_and_checkpoint(problem, tmp_path):
    schedule = dc.Gossip(dc.RandomMatching())
    few = run(problem, schedule, trials=2, record_clients=False)
    many = run(problem, schedule, trials=9, record_clients=False)
    np.testing.assert_array_equal(many.x[:2], few.x)
    np.testing.assert_array_equal(many.metrics["consensus"][:2], few.metrics["consensus"])
    kw = dict(rounds=40, trials=4, trial_chunk=2, record_every=2, record_clients=False)
    straight = run(problem, schedule, **kw)
    calls = []

    def stop(done, total, secs):
        calls.append(done)
        if len(calls) == 3:
            raise KeyboardInterrupt

    path = tmp_path / "run.npz"
    with pytest.raises(KeyboardInterrupt):
        run(problem, schedule, **kw, checkpoint=path, progress=stop)
    assert run(problem, schedule, **kw, checkpoint=path).equals(straight)


def test_sweeps_over_schedules_and_a_topology_field(problem):
    sim = fa.Simulation(problem, local_steps=2, rounds=12, record_every=1,
                        schedule=dc.Gossip(dc.Ring()))
    grid = fa.sweep(sim, grid={"schedule": [dc.Gossip(dc.Ring()), dc.Gossip(dc.Complete())]},
                    key=jax.random.key(1), x0=jnp.ones(2), stepsize=0.1, trials=3)
    ring = run(problem, dc.Gossip(dc.Ring()), record_clients=False)
    np.testing.assert_array_equal(grid.gap[0], ring.gap)
    # an array field of the topology is one program's axis
    er = fa.Simulation(problem, local_steps=2, rounds=12, record_every=1,
                       schedule=dc.Gossip(dc.ErdosRenyi(0.3)))
    grid = fa.sweep(er, grid={"schedule.topology.p": [0.3, 0.9]}, key=jax.random.key(1),
                    x0=jnp.ones(2), stepsize=0.1, trials=3)
    dense = run(problem, dc.Gossip(dc.ErdosRenyi(0.9)), record_clients=False)
    np.testing.assert_array_equal(grid.gap[1], dense.gap)


def test_bad_input(problem):
    with pytest.raises(ValueError, match="topology must be"):
        dc.Gossip("ring")
    with pytest.raises(ValueError, match="order"):
        dc.Gossip(dc.Ring(), order="both")
    with pytest.raises(ValueError, match="no server"):
        run(problem, dc.Gossip(dc.Ring()), aggregator=fa.robust.Median())
    with pytest.raises(ValueError, match="keeps client states"):
        run(problem, dc.Gossip(dc.Ring()), algorithm=fa.algorithms.Scaffold())
    with pytest.raises(ValueError, match="stateless sampler, not MarkovAvailability"):
        run(problem, dc.Gossip(dc.Ring()), sampler=fa.MarkovAvailability(0.1, 0.3, 2))
    with pytest.raises(ValueError, match="schedule must be"):
        run(problem, "gossip")
    small = fa.problems.quadratics(jax.random.key(0), n=2, d=2)
    with pytest.raises(ValueError, match="n"):
        run(small, dc.Gossip(dc.Ring()))
