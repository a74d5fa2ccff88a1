"""The Hierarchical schedule: one edge server holding every client is FedAvg (bit for bit);
with G edge servers and E edge rounds, a NumPy loop of the same rounds (exact gradients,
full participation) agrees to rounding; bad input gets one line."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa
from fedjax_abc.decentral import Hierarchical


@pytest.fixture(scope="module")
def problem():
    return fa.problems.quadratics(jax.random.key(0), n=8, d=2)


KW = dict(local_steps=3, stepsize=0.1, rounds=12, trials=3, key=jax.random.key(1),
          x0=jnp.ones(2), record_every=1)


@pytest.mark.parametrize("mode", ["mask", "gather"])
def test_one_edge_server_is_fedavg(problem, mode):
    fedavg = fa.simulate(problem, num_sampled=3, mode=mode, **KW)
    one = fa.simulate(problem, num_sampled=3, mode=mode, **KW,
                      schedule=Hierarchical.contiguous(8, 1))
    for name in ("gap", "grad_norm_sq", "x", "x_final"):
        np.testing.assert_array_equal(getattr(one, name), getattr(fedavg, name), err_msg=name)
    assert np.all(one.metrics["edge_spread"] == 0)


def numpy_hierarchical(problem, groups, E, T, Q, alpha, x0):
    """HierFAVG written out: exact gradients, every client of every group each round."""
    a, c = (np.asarray(v) for v in problem.params)
    G = len(groups)
    edges = np.tile(np.asarray(x0, float), (G, 1))
    out = [edges.mean(0)]
    for t in range(T):
        for g, members in enumerate(groups):
            local = []
            for i in members:
                y = edges[g].copy()
                for _ in range(Q):
                    y = y - alpha * a[i] * (y - c[i])
                local.append(y)
            edges[g] = np.mean(local, axis=0)
        if (t + 1) % E == 0:
            edges[:] = edges.mean(0)
        out.append(edges.mean(0))
    return np.array(out)


@pytest.mark.parametrize("assignment,E", [([0, 0, 1, 1, 0, 0, 1, 1], 3),
                                          ([0, 1, 2, 3, 0, 1, 2, 3], 1)])
def test_edges_against_numpy(problem, assignment, E):
    schedule = Hierarchical(assignment, edge_rounds=E)
    res = fa.simulate(problem, **KW, oracle=fa.ExactOracle(), schedule=schedule,
                      record_clients=True)
    groups = [np.flatnonzero(np.asarray(assignment) == g) for g in range(max(assignment) + 1)]
    want = numpy_hierarchical(problem, groups, E, 12, 3, 0.1, np.ones(2))
    np.testing.assert_allclose(res.x[0], want, rtol=1e-12, atol=1e-14)
    # between cloud rounds the edges differ; at a cloud round they agree
    spread = res.metrics["edge_spread"][0]
    assert np.all(spread[E::E] < 1e-28) and (E == 1 or spread[1] > 1e-8)
    # each client's own model is its edge server's (FedAvg's personal model is x_t)
    edge_of = np.asarray(assignment)
    for t in (1, 2):
        for g in range(len(groups)):
            members = np.flatnonzero(edge_of == g)
            assert np.all(res.client_x[0, t, members] == res.client_x[0, t, members[0]])
    # a wrong reference (the cloud every round) disagrees where E > 1
    if E > 1:
        other = numpy_hierarchical(problem, groups, 1, 12, 3, 0.1, np.ones(2))
        assert np.abs(other[2] - res.x[0, 2]).max() > 1e-8


def test_bad_input(problem):
    with pytest.raises(ValueError, match="more edge servers"):
        Hierarchical.contiguous(8, 9)
    with pytest.raises(ValueError, match="as many clients"):
        Hierarchical([0, 0, 0, 1])
    with pytest.raises(ValueError, match="edge_rounds"):
        Hierarchical([0, 1], edge_rounds=0)
    with pytest.raises(ValueError, match="numbered 0..G-1"):
        Hierarchical([0, 2])
    with pytest.raises(ValueError, match="stateless sampler, not MarkovAvailability"):
        fa.simulate(problem, sampler=fa.MarkovAvailability(0.1, 0.3, 2), **KW,
                    schedule=Hierarchical.contiguous(8, 2))
    with pytest.raises(ValueError, match="hold 4 clients"):
        fa.simulate(problem, **KW, schedule=Hierarchical([0, 0, 1, 1]))
    with pytest.raises(ValueError, match="num_sampled|S="):
        fa.simulate(problem, num_sampled=5, **KW, schedule=Hierarchical.contiguous(8, 2))
